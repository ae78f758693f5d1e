"""Module maps list exactly their folder: a package whose docstring (or README.md) names some of its modules names all.

A map that omits a module sends a new contributor past it; one that names a module no longer there sends them looking
for it. Either way the map is wrong, so this test reads every map against the tree.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import kai_ray

ROOT = Path(kai_ray.__file__).parent
NAMED = re.compile(r"`+([A-Za-z_][A-Za-z0-9_]*)(?:\.py)?`+")


def _members(folder: Path) -> set[str]:
    modules = {p.stem for p in folder.glob("*.py") if p.stem not in ("__init__", "__main__")}
    packages = {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}
    return modules | packages


def _map_text(folder: Path) -> str:
    readme = folder / "README.md"
    if readme.is_file():
        return readme.read_text(encoding="utf-8")
    return ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))) or ""


def _maps() -> list[Path]:
    """Every package whose map names at least two of its own members: those are module maps (one-line docstrings
    that name a single module are descriptions, not maps)."""
    out = []
    for init in sorted(ROOT.rglob("__init__.py")):
        folder = init.parent
        if len(set(NAMED.findall(_map_text(folder))) & _members(folder)) >= 2:
            out.append(folder)
    return out


MAPS = _maps()


def test_the_known_maps_are_found() -> None:
    found = {str(f.relative_to(ROOT.parent)) for f in MAPS}
    assert {"kai_ray/k8s", "kai_ray/bench", "kai_ray/testing", "kai_ray/scheduler"} <= found


@pytest.mark.parametrize("folder", MAPS, ids=lambda f: str(f.relative_to(ROOT.parent)))
def test_each_map_names_every_module_of_its_folder(folder: Path) -> None:
    missing = sorted(_members(folder) - set(NAMED.findall(_map_text(folder))))
    assert not missing, f"{folder.relative_to(ROOT.parent)}: its map does not name {', '.join(missing)}"

"""Piped output is plain text a person or a tool can read: no blanks padding lines to the console's width, and the
``top-owner-metadata`` annotation (a YAML document in a string) shown as a block, not a folded quoted string."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kai_ray import constants as c
from kai_ray.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _out(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    assert not exc.value.code
    return capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ("simulate", "demo"),
        ("demo", "--no-report"),
        ("queues", "--scenario", "demo", "--at", "45m"),
        ("pending", "--scenario", "demo", "--at", "45m"),
    ],
)
def test_piped_output_has_no_trailing_blanks(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    lines = _out(capsys, *argv).splitlines()
    assert len(lines) > 3
    assert [line for line in lines if line != line.rstrip()] == []


def test_top_owner_metadata_prints_as_a_block(capsys: pytest.CaptureFixture[str]) -> None:
    out = _out(capsys, "podgroup", "-f", str(ROOT / "examples" / "rayjob-training.yaml"))
    assert f"    {c.TOP_OWNER_METADATA}: |\n      group: ray.io\n      kind: RayJob\n" in out
    assert "''''" not in out
    meta = yaml.safe_load(yaml.safe_load(out)["metadata"]["annotations"][c.TOP_OWNER_METADATA])
    assert meta == {"group": "ray.io", "kind": "RayJob", "name": "llm-finetune", "uid": "", "version": "v1"}

"""Real manifests in: what ``kubectl get -o yaml`` writes (a ``List`` of objects) is read item by item, and inputs
that would make the reader run away (``/dev/zero``, YAML nested thousands deep) are one-line errors, never an
endless read or a crash."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kai_ray.api.loader import MAX_DEPTH, ManifestError, load_documents
from kai_ray.cli import main

ROOT = Path(__file__).resolve().parents[2]
RAYJOB = ROOT / "examples" / "rayjob-training.yaml"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _rayjobs() -> list[dict[str, object]]:
    return [d for d in yaml.safe_load_all(RAYJOB.read_text()) if d and d.get("kind") == "RayJob"]


@pytest.mark.parametrize("kind", ["List", "RayJobList"])
def test_a_list_is_read_item_by_item(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (job,) = _rayjobs()
    second = {**job, "metadata": {**job["metadata"], "name": "second"}}  # type: ignore[dict-item]
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r"}, "rules": []}
    listed = {"apiVersion": "v1", "kind": kind, "metadata": {}, "items": [job, second, role]}
    path = tmp_path / "listed.yaml"
    path.write_text(yaml.safe_dump(listed))
    code, out, err = _run(["podgroup", "-f", str(path), "-o", "json"], capsys)
    assert code == 0, err
    assert out.count('"kind": "PodGroup"') == 2
    assert f"document 1 ({kind}) item 3 (Role r): not a Ray CR; skipped" in err


def test_dev_zero_is_refused_not_read_forever(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(["podgroup", "-f", "/dev/zero"], capsys)
    assert code == 2 and "/dev/zero: larger than 64 MiB; not read" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("text", "message"), [("[" * 20000, "nested deeper than Python can read"), (None, "nested more than")]
)
def test_deep_nesting_is_one_line(
    text: str | None, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if text is None:
        text = "a: " + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "\n"
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    with pytest.raises(ManifestError, match=message):
        list(load_documents(text, str(path)))
    code, _, err = _run(["podgroup", "-f", str(path)], capsys)
    assert code == 2 and message in err and "Traceback" not in err and err.count("\n") == 1

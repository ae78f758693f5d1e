"""A command that needs an extra that is not installed says which, in one line (modules hidden in-process)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kai_ray import extras
from kai_ray.cli import main
from kai_ray.extras import MissingExtra, missing_extra, require


def test_operator_without_kopf_names_the_operator_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "kopf", None)  # "import kopf" now raises ModuleNotFoundError
    monkeypatch.delitem(sys.modules, "kai_ray.k8s.kopf_app", raising=False)
    with pytest.raises(SystemExit) as exit_:
        main(["operator", "podgrouper", "--kubeconfig", str(tmp_path / "kubeconfig")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "kai-ray: error: this needs kopf, which comes with the 'operator' extra: in a kai-ray checkout, pip install "
        "'.[operator]'"
    )


def test_missing_modules_map_to_their_extras(monkeypatch: pytest.MonkeyPatch) -> None:
    for module, extra in (("matplotlib", "plots"), ("cryptography", "operator"), ("ray", "ray")):
        found = missing_extra(ModuleNotFoundError(name=f"{module}.sub"), "x")
        assert isinstance(found, MissingExtra) and f"pip install '.[{extra}]'" in str(found)
    assert missing_extra(ModuleNotFoundError(name="not_ours")) is None
    require("yaml", "json", purpose="nothing")  # installed: no error
    monkeypatch.setitem(extras.EXTRA_OF, "kai_ray_no_such_module", "operator")
    with pytest.raises(MissingExtra, match=r"^a check needs kai_ray_no_such_module, .*pip install '\.\[operator\]'"):
        require("yaml", "kai_ray_no_such_module", purpose="a check")

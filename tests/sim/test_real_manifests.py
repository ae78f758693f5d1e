"""Real manifests as simulator workloads: a workload file that also holds the RBAC and ConfigMaps a real deployment
ships is read for its Ray CR (the rest skipped with the note ``podgroup -f`` gives), and a RayJob written with
``spec.suspend: true`` stays suspended for the whole run, as KubeRay keeps it on a cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray.cli import main
from tests.sim.helpers import ray_cluster

ROLE = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "reader"}, "rules": []}
CONFIG = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"a": "b"}}


def _as_job(name: str, **spec: Any) -> dict[str, Any]:
    cluster = ray_cluster(name, "default-queue", workers=1, gpus=1)
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": cluster["metadata"],
        "spec": {
            "entrypoint": "python x.py",
            "submissionMode": "SidecarMode",
            "rayClusterSpec": cluster["spec"],
            **spec,
        },
    }


def _scenario(tmp_path: Path, workloads: list[dict[str, Any]]) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump({"nodes": [{"name": "n", "count": 2, "gpus": 8}], "workloads": workloads}))
    return path


def _simulate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any], str]:
    try:
        main(["simulate", str(path), "--json"])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else {}), err


def test_rbac_and_configmaps_beside_the_ray_cr_are_skipped_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "job.yaml").write_text(yaml.safe_dump_all([ROLE, CONFIG, _as_job("train")]))
    path = _scenario(tmp_path, [{"path": "job.yaml", "duration": 60}])
    code, doc, err = _simulate(path, capsys)
    assert code == 0, err
    assert doc["metrics"]["completed"] == 1
    assert "workloads[0].path: job.yaml document 1 (Role reader): not a Ray CR; skipped" in err
    assert "job.yaml document 2 (ConfigMap settings): not a Ray CR; skipped" in err


def test_a_file_of_two_ray_crs_is_still_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "two.yaml").write_text(yaml.safe_dump_all([ROLE, _as_job("a"), _as_job("b")]))
    code, _, err = _simulate(_scenario(tmp_path, [{"path": "two.yaml"}]), capsys)
    assert code == 2 and "holds 2 documents; a workload is one Ray CR" in err


def test_a_suspended_rayjob_stays_suspended(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _scenario(
        tmp_path,
        [
            {"manifest": _as_job("held", suspend=True), "duration": 60},
            {"manifest": _as_job("runs"), "duration": 60, "at": 5},
        ],
    )
    code, doc, err = _simulate(path, capsys)
    assert code == 0, err
    held = doc["workloads"]["team/held"]
    assert held["state"] == "Suspended" and held["podgroup"] is None
    assert doc["workloads"]["team/runs"]["state"] == "Completed"
    assert doc["metrics"]["suspended"] == 1 and doc["metrics"]["completed"] == 1
    assert "spec.suspend is true: KubeRay creates no pods until it is resumed; it stays suspended" in err

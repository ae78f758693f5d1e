"""Malformed scenario files: one line naming the field, a non-zero exit, never a traceback (the CLI as a process)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.sim.helpers import kai_ray, queue, ray_cluster, write_yaml


def _good() -> dict[str, Any]:
    return {
        "nodes": [{"name": "n", "count": 2, "gpus": 8}],
        "queues": [queue("team")],
        "workloads": [{"manifest": ray_cluster("a", "team", workers=1, gpus=2), "at": 0, "duration": 60}],
    }


def _error_line(path: Path) -> str:
    out = kai_ray("simulate", str(path))
    assert out.returncode != 0
    assert "Traceback" not in out.stderr and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


def _mutate(**changes: Any) -> dict[str, Any]:
    data = _good()
    for dotted, value in changes.items():
        target: Any = data
        parts = dotted.split("__")
        for p in parts[:-1]:
            target = target[int(p)] if p.isdigit() else target[p]
        last = parts[-1]
        if value is KeyError:
            del target[last]
        elif last.isdigit():
            target[int(last)] = value
        else:
            target[last] = value
    return data


CASES = [
    ("no nodes", _mutate(nodes=KeyError), "nodes: required"),
    ("negative duration", _mutate(workloads__0__duration=-5), "workloads[0].duration"),
    ("bad duration text", _mutate(workloads__0__duration="soon"), "workloads[0].duration"),
    ("gpus not a number", _mutate(nodes__0__gpus="eight"), "nodes[0].gpus"),
    ("bad memory quantity", _mutate(nodes__0__memory="lots"), "nodes[0].memory"),
    ("unknown top-level key", _mutate(wokloads=[]), "wokloads"),
    ("unknown config option", _mutate(config={"placementGPU": "spread"}), "config.placementGPU"),
    ("bad placement", _mutate(config={"placementGpu": "random"}), "config.placementGpu"),
    ("bad action", _mutate(config={"actions": ["allocate", "steal"]}), "config.actions[1]"),
    ("manifest and path", _mutate(workloads__0__path="x.yaml"), "workloads[0]"),
    (
        "unknown queue",
        _mutate(workloads__0__manifest__metadata__labels={"kai.scheduler/queue": "nope"}),
        "queue 'nope'",
    ),
    ("negative replicas", _mutate(workloads__0__manifest__spec__workerGroupSpecs__0__replicas=-1), "replicas"),
    (
        "queue quota above limit",
        _mutate(queues__0__resources__gpu={"quota": 8, "limit": 4}),
        "spec.resources.gpu.quota",
    ),
    (
        "scale group",
        _mutate(workloads__0__scale=[{"at": 5, "group": "cpu", "replicas": 1}]),
        "workloads[0].scale[0].group",
    ),
]


@pytest.mark.parametrize(("name", "data", "needle"), CASES, ids=[c[0] for c in CASES])
def test_malformed_scenario_is_one_line_naming_the_field(tmp_path: Path, name: str, data: Any, needle: str) -> None:
    path = write_yaml(tmp_path / "s.yaml", copy.deepcopy(data))
    line = _error_line(path)
    assert line.startswith("kai-ray: error: ") and str(path) in line
    assert needle in line, line
    assert not any(w in line for w in ("Input should", "Field required", "Value error")), (
        "the house's words, not pydantic's"
    )


def test_missing_manifest_file_and_yaml_syntax(tmp_path: Path) -> None:
    data = _good()
    data["workloads"][0] = {"path": "missing.yaml", "at": 0}
    line = _error_line(write_yaml(tmp_path / "s.yaml", data))
    assert "workloads[0].path" in line and "missing.yaml" in line
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: [\n  {name: n\n")
    assert "invalid YAML" in _error_line(bad)
    assert "cannot read" in _error_line(tmp_path / "nope.yaml")


def test_good_scenario_runs(tmp_path: Path) -> None:
    out = kai_ray("simulate", str(write_yaml(tmp_path / "s.yaml", _good())))
    assert out.returncode == 0, out.stderr
    assert "Timeline" in out.stdout and "team/a" in out.stdout

"""``kai-ray queues`` and ``kai-ray pending`` on a simulator scenario at a chosen simulated time, and the strict
reading of scenarios (unknown fields warn with a suggestion; the run goes on)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kai_ray.cli import main
from tests.sim.helpers import queue, ray_cluster, write_yaml

DEMO = Path(__file__).resolve().parents[2] / "kai_ray" / "sim" / "demo" / "scenario.yaml"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[str, str]:
    capsys.readouterr()
    try:
        main(list(argv))
    except SystemExit as exc:
        assert not exc.code, capsys.readouterr().err
    got = capsys.readouterr()
    return got.out, got.err


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    out, _ = _run(capsys, *argv, "-o", "json")
    doc: dict[str, Any] = json.loads(out)
    return doc


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One 8-GPU node filled by a non-preemptible gang of team a (within its quota); four workloads arrive at 60 s
    and cannot run: nothing can be preempted or reclaimed for them."""
    team_b = queue("b", gpu_quota=0, parent="dept")
    team_b["displayName"] = "Team B"
    data = {
        "nodes": [{"name": "n", "count": 1, "gpus": 8}],
        "queues": [queue("dept", gpu_quota=8), queue("a", gpu_quota=8, parent="dept"), team_b],
        "workloads": [
            {"manifest": ray_cluster("runner", "a", workers=2, gpus=4, priority="inference"), "at": 0},
            {"manifest": ray_cluster("b-train", "b", workers=1, gpus=4, priority="train"), "at": 60},
            {"manifest": ray_cluster("b-build", "b", workers=1, gpus=4, priority="build"), "at": 60},
            {"manifest": ray_cluster("a-more", "a", workers=1, gpus=4, priority="train"), "at": 60},
            {"manifest": ray_cluster("never", "b", workers=1, gpus=16, priority="train"), "at": 60},
        ],
        "simulation": {"until": "10m"},
    }
    return str(write_yaml(tmp_path_factory.mktemp("views") / "scenario.yaml", data))


def test_pending_in_the_schedulers_order_with_its_reasons(capsys: pytest.CaptureFixture[str], scenario: str) -> None:
    assert _json(capsys, "pending", "--scenario", scenario, "--at", "30s")["pending"] == []
    doc = _json(capsys, "pending", "--scenario", scenario, "--at", "2m")
    assert doc["at"] == 120.0
    rows = {r["name"]: r for r in doc["pending"]}
    assert set(rows) == {"pg-b-train", "pg-b-build", "pg-a-more", "pg-never"}
    assert sorted(r["position"] for r in rows.values()) == [1, 2, 3, 4]
    b = sorted((r for r in rows.values() if r["queue"] == "b"), key=lambda r: r["queue_position"])
    assert [r["name"] for r in b][:2] == ["pg-b-build", "pg-b-train"], "higher priority first within a queue"
    assert rows["pg-b-build"]["position"] < rows["pg-b-train"]["position"]
    assert rows["pg-never"]["reason"] == "NeverFits" and "can never fit" in rows["pg-never"]["message"]
    for r in rows.values():
        assert r["reason"] and r["message"] and r["age_seconds"] == 60.0
        assert r["owner"] == f"RayCluster/{r['name'].removeprefix('pg-')}"
    only_b = _json(capsys, "pending", "--scenario", scenario, "--at", "2m", "-q", "b")["pending"]
    assert [r["name"] for r in only_b] == [r["name"] for r in sorted(b, key=lambda r: r["position"])]
    text, _ = _run(capsys, "pending", "--scenario", scenario, "--at", "2m")
    assert "pg-b-build" in text and "NeverFits" in text and "can never fit" in text


def test_the_queue_tree_with_the_last_cycles_numbers(capsys: pytest.CaptureFixture[str], scenario: str) -> None:
    doc = _json(capsys, "queues", "--scenario", scenario, "--at", "2m")
    rows = {r["name"]: r for r in doc["queues"]}
    assert [r["name"] for r in doc["queues"]] == ["dept", "a", "b"]
    dept, a, b = rows["dept"], rows["a"], rows["b"]
    assert (dept["depth"], a["depth"], a["parent"]) == (0, 1, "dept")
    assert (a["quota"]["gpu"], a["limit"]["gpu"], a["weight"]["gpu"], a["priority"]) == (8, -1, 1, 100)
    assert a["allocated"]["gpu"] == 8 and a["fair_share"]["gpu"] == 8 and a["running_podgroups"] == 1
    assert (a["pending_podgroups"], a["pending_pods"]) == (1, 2)  # a head and a worker
    assert (b["pending_podgroups"], b["pending_pods"], b["requested"]["gpu"]) == (3, 6, 24)
    assert b["display_name"] == "Team B" and dept["pending_podgroups"] == 4
    text, _ = _run(capsys, "queues", "--scenario", scenario, "--at", "2m")
    assert "├─ a" in text and "└─ b (Team B)" in text and "FAIR" in text


def test_the_demo_at_thirty_minutes(capsys: pytest.CaptureFixture[str]) -> None:
    """The packaged demo (whatever its story) renders: every queue once, every pending workload placed and explained."""
    queues = _json(capsys, "queues", "--scenario", str(DEMO), "--at", "30m")["queues"]
    assert queues and len({r["name"] for r in queues}) == len(queues)
    pending = _json(capsys, "pending", "--scenario", str(DEMO), "--at", "30m")["pending"]
    assert all(r["position"] and r["reason"] for r in pending)


def test_unknown_fields_in_a_scenario_warn_and_the_run_goes_on(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    manifest = ray_cluster("c", "team", workers=1, gpus=2)
    manifest["spec"]["workerGroupSpecs"][0]["minReplica"] = 1
    team = queue("team")
    team["resources"]["gpu"]["overQuotaWieght"] = 2
    path = write_yaml(
        tmp_path / "s.yaml",
        {"nodes": [{"name": "n", "gpus": 8}], "queues": [team], "workloads": [{"manifest": manifest, "duration": 60}]},
    )
    out, err = _run(capsys, "simulate", str(path), "--json")
    assert json.loads(out)["metrics"]["completed"] == 1
    assert err.splitlines() == [
        f"kai-ray: warning: {path}: queues[0]: spec.resources.gpu.overQuotaWieght: unknown field "
        "(did you mean overQuotaWeight?); ignored (--strict makes this an error)",
        f"kai-ray: warning: {path}: workloads[0].manifest (RayCluster c): spec.workerGroupSpecs[0].minReplica: "
        "unknown field (did you mean minReplicas?); ignored (--strict makes this an error)",
    ]


def test_at_takes_the_printed_clock_and_days_and_refuses_a_bare_number(
    capsys: pytest.CaptureFixture[str], scenario: str
) -> None:
    """A newcomer's report: ``--at 45`` silently meant 45 seconds, ``0:02:00`` (the tool's own format) and ``10d`` were
    refused. One grammar for every duration flag: a unit or the clock."""
    assert _json(capsys, "pending", "--scenario", scenario, "--at", "0:02:00")["at"] == 120.0
    assert _json(capsys, "pending", "--scenario", scenario, "--at", "10d")["at"] == 864000.0
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["pending", "--scenario", scenario, "--at", "45"])
    assert exc.value.code == 2
    assert "'45' is not a duration" in capsys.readouterr().err


def test_at_past_the_end_says_when_the_run_ended(capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = _run(capsys, "pending", "--scenario", "demo", "--at", "99h")
    assert out.strip() == "nothing pending (demo at 99:00:00; the simulation ended at 2:12:22)"


def test_demo_names_the_packaged_scenario_from_any_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A newcomer's report: after a wheel install the README's ``--scenario kai_ray/sim/demo/scenario.yaml`` is no path
    a user has; ``demo`` is the packaged scenario for every command that reads one."""
    monkeypatch.chdir(tmp_path)
    doc = _json(capsys, "queues", "--scenario", "demo", "--at", "45m")
    assert doc["source"] == "demo at 0:45:00" and {r["name"] for r in doc["queues"]} >= {"llm", "vision"}
    out, _ = _run(capsys, "simulate", "demo", "--json")
    assert json.loads(out)["source"] == "demo"


def test_the_gang_count_is_not_read_as_the_subgroups(capsys: pytest.CaptureFixture[str]) -> None:
    """A newcomer's report: "4 pods required of subgroup gpu-workers" where gpu-workers has 3 pods (4 is the gang)."""
    (row,) = _json(capsys, "pending", "--scenario", "demo", "--at", "45m")["pending"]
    assert row["message"].startswith(
        "gang does not fit: 4 pods required, 0 placed before pod eval-raycluster-gpu-workers-worker-0 of subgroup "
        "gpu-workers found no node;"
    )

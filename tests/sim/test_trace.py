"""Trace replay on small generated CSVs in the Alibaba cluster-trace-gpu-v2023 schema."""

from __future__ import annotations

import csv
from pathlib import Path

from kai_ray.bench.trace_gen import generate_nodes, generate_pods, write_csv
from kai_ray.sim.trace import NODE_COLUMNS, POD_COLUMNS
from tests.sim.helpers import kai_ray, run_json


def _trace(tmp_path: Path, nodes: int = 40, pods: int = 300) -> tuple[Path, Path]:
    n = write_csv(tmp_path / "nodes.csv", NODE_COLUMNS, generate_nodes(nodes, seed=3))
    p = write_csv(tmp_path / "pods.csv", POD_COLUMNS, generate_pods(pods, seed=3, span=6 * 3600, mean_run=3600))
    return n, p


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_replay_maps_pods_to_single_pod_gangs(tmp_path: Path) -> None:
    nodes_csv, pods_csv = _trace(tmp_path)
    doc = run_json(
        "simulate",
        "--trace",
        "alibaba-v2023",
        "--nodes",
        str(nodes_csv),
        "--pods",
        str(pods_csv),
        "--report",
        str(tmp_path / "report"),
    )
    pods = {r["name"]: r for r in _rows(pods_csv)}
    models = {r["sn"]: r["model"] for r in _rows(nodes_csv)}
    ran = {name for name, r in pods.items() if r["scheduled_time"]}
    assert doc["trace"]["skipped"] == {"never scheduled in the trace": len(pods) - len(ran)}
    assert set(doc["workloads"]) == {f"trace/{n}" for n in ran}
    m = doc["metrics"]
    assert m["arrived"] == len(ran) and m["completed"] + m["pending_at_end"] == len(ran)
    assert m["completed"] > 0.9 * len(ran)
    assert doc["errors"] == []
    t0 = min(float(r["creation_time"]) for r in pods.values() if r["scheduled_time"])

    binds = {e["workload"].split("/", 1)[1]: e for e in doc["events"] if e["type"] == "bind"}
    fractional = 0
    for name, e in binds.items():
        r = pods[name]
        w = doc["workloads"][f"trace/{name}"]
        assert w["arrived_at"] == float(r["creation_time"]) - t0
        if w["completed_at"] is not None and not w["runs_stopped"]:  # run time = deletion - scheduled, once bound
            assert w["completed_at"] - w["first_running_at"] == float(r["deletion_time"]) - float(r["scheduled_time"])
        if r["num_gpu"] == "1" and int(r["gpu_milli"]) < 1000:
            assert e["gpus"] == int(r["gpu_milli"]) / 1000
            fractional += 1
        else:
            assert e["gpus"] == float(r["num_gpu"])
        if r["gpu_spec"] and r["num_gpu"] != "0":
            assert models[e["nodes"][0]] in r["gpu_spec"].split("|")
    assert fractional > 10
    assert all((tmp_path / "report" / f).stat().st_size > 5000 for f in ("gpu-allocation.png", "timeline.png"))


def test_replay_limit_and_placement(tmp_path: Path) -> None:
    nodes_csv, pods_csv = _trace(tmp_path, pods=120)
    args = ("simulate", "--trace", "alibaba-v2023", "--nodes", str(nodes_csv), "--pods", str(pods_csv))
    doc = run_json(*args, "--limit", "50", "--placement", "spread")
    assert doc["metrics"]["arrived"] + sum(doc["trace"]["skipped"].values()) == 50
    out = kai_ray(*args, "--limit", "30")
    assert out.returncode == 0, out.stderr
    assert "replayed" in out.stdout and "GPU allocation rate" in out.stdout


def test_bad_trace_files_are_one_line_errors(tmp_path: Path) -> None:
    nodes_csv, pods_csv = _trace(tmp_path, pods=20)
    broken = tmp_path / "broken.csv"
    broken.write_text(pods_csv.read_text().replace("gpu_milli", "gpu_mili", 1))
    out = kai_ray("simulate", "--trace", "alibaba-v2023", "--nodes", str(nodes_csv), "--pods", str(broken))
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        f"kai-ray: error: {broken}: header: missing column 'gpu_milli' (expected {', '.join(POD_COLUMNS)})"
    ]
    bad_value = tmp_path / "bad_value.csv"
    lines = pods_csv.read_text().splitlines()
    fields = lines[2].split(",")
    fields[3] = "two"
    lines[2] = ",".join(fields)
    bad_value.write_text("\n".join(lines) + "\n")
    out = kai_ray("simulate", "--trace", "alibaba-v2023", "--nodes", str(nodes_csv), "--pods", str(bad_value))
    assert out.returncode != 0
    assert out.stderr.strip() == f"kai-ray: error: {bad_value}: line 3: num_gpu: 'two' is not a number"
    out = kai_ray("simulate", "--trace", "alibaba-v2023", "--pods", str(pods_csv))
    assert out.returncode != 0 and "--nodes: required" in out.stderr
    out = kai_ray("simulate", "--trace", "google", "--nodes", str(nodes_csv), "--pods", str(pods_csv))
    assert out.returncode != 0 and "--trace: 'google'" in out.stderr

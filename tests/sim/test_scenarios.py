"""Scenario outcomes through the CLI: the same workloads under bin-pack and spread placement."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.sim.helpers import queue, ray_cluster, run_json, write_yaml


def _packing_scenario(tmp_path: Path, placement: str) -> Path:
    """Four 2-GPU jobs, then one job whose worker needs a whole 8-GPU node."""
    small = [
        {"manifest": ray_cluster(f"small-{i}", "team", workers=1, gpus=2), "at": i, "duration": 600} for i in range(4)
    ]
    big = {"manifest": ray_cluster("big", "team", workers=1, gpus=8), "at": 60, "duration": 300}
    data: dict[str, Any] = {
        "nodes": [{"name": "n", "count": 4, "gpus": 8, "cpu": 64, "memory": "512Gi"}],
        "queues": [queue("team")],
        "workloads": [*small, big],
        "config": {"placementStrategy": {"gpu": placement, "cpu": placement}},
    }
    return write_yaml(tmp_path / f"{placement}.yaml", data)


def _small_nodes(doc: dict[str, Any]) -> set[str]:
    nodes: set[str] = set()
    for e in doc["events"]:
        if e["type"] == "bind" and e["workload"].startswith("team/small-"):
            nodes.update(e["nodes"])
    return nodes


def test_binpack_keeps_a_whole_node_free_for_the_big_gang(tmp_path: Path) -> None:
    doc = run_json("simulate", str(_packing_scenario(tmp_path, "binpack")))
    big = doc["workloads"]["team/big"]
    assert big["queueing_delay_seconds"] == 0.0
    assert big["completed_at"] == 360.0
    # the four small GPU workers share one node (heads are CPU-only and may sit anywhere)
    gpu_nodes = {
        e["nodes"][0]
        for e in doc["events"]
        if e["type"] == "bind" and e["workload"].startswith("team/small-") and e["gpus"] > 0
    }
    assert len(gpu_nodes) == 1


def test_spread_fragments_the_cluster_and_the_big_gang_waits(tmp_path: Path) -> None:
    spread = run_json("simulate", str(_packing_scenario(tmp_path, "spread")))
    big = spread["workloads"]["team/big"]
    assert len(_small_nodes(spread)) == 4
    # 6 GPUs free on every node, 24 in all, but no node can take an 8-GPU worker until the small jobs end
    assert big["first_running_at"] >= 600.0
    assert big["last_pending_reason"] == "GangDoesNotFit"
    binpack = run_json("simulate", str(_packing_scenario(tmp_path, "binpack")))
    assert spread["metrics"]["gpu_fragmentation"] > binpack["metrics"]["gpu_fragmentation"]
    assert spread["metrics"]["avg_jct_seconds"] > binpack["metrics"]["avg_jct_seconds"]


def test_placement_flag_overrides_the_scenario(tmp_path: Path) -> None:
    doc = run_json("simulate", str(_packing_scenario(tmp_path, "binpack")), "--placement", "spread")
    assert doc["workloads"]["team/big"]["first_running_at"] >= 600.0


def test_same_scenario_same_result(tmp_path: Path) -> None:
    path = str(_packing_scenario(tmp_path, "spread"))
    a, b = run_json("simulate", path), run_json("simulate", path)
    for doc in (a, b):
        doc.pop("stats")
    assert a == b

"""Engine behaviour through scenarios: the autoscaler policy and its ceiling, termination grace, scale steps."""

from __future__ import annotations

from typing import Any

from kai_ray.sim.run import simulate
from kai_ray.sim.run_metrics import result_document
from kai_ray.sim.scenario import parse_scenario
from tests.sim.helpers import queue, ray_cluster


def _elastic(name: str, lo: int, hi: int, gpus: int, mode: str | None = None) -> dict[str, Any]:
    m = ray_cluster(name, "team", workers=lo, gpus=gpus)
    wg = m["spec"]["workerGroupSpecs"][0]
    wg["minReplicas"], wg["maxReplicas"] = lo, hi
    m["spec"]["enableInTreeAutoscaling"] = True
    if mode:
        m["spec"]["autoscalerOptions"] = {"upscalingMode": mode}
    return m


def _run(data: dict[str, Any]) -> dict[str, Any]:
    return result_document(simulate(parse_scenario(data, "test.yaml")), "test")


def test_autoscaler_grows_to_max_replicas_and_no_further() -> None:
    data = {
        "nodes": [{"name": "n", "count": 2, "gpus": 8}],
        "queues": [queue("team")],
        "workloads": [{"manifest": _elastic("el", 1, 3, 2), "at": 0, "duration": 600}],
        "simulation": {"autoscalerPeriod": 30},
    }
    doc = _run(data)
    binds = [e for e in doc["events"] if e["type"] == "bind"]
    # head + 1 worker at 0, then one worker per autoscaler period while everything runs: 30 s and 60 s
    assert [(e["t"], e["reason"], e["gpus"]) for e in binds] == [
        (0.0, "Scheduled", 2.0),
        (30.0, "ElasticScaleUp", 2.0),
        (60.0, "ElasticScaleUp", 2.0),
    ]
    w = doc["workloads"]["team/el"]
    assert [g["max_pods"] for g in w["gang"] if g["group"] == "gpu"] == [3]
    # linear speed-up: 30 s at 1x, 30 s at 2x, then 3x: 600 = 30 + 60 + 3 (t - 60) -> t = 230
    assert w["completed_at"] == 230.0


def test_aggressive_upscaling_asks_for_max_at_once() -> None:
    data = {
        "nodes": [{"name": "n", "count": 2, "gpus": 8}],
        "queues": [queue("team")],
        "workloads": [{"manifest": _elastic("el", 1, 4, 2, mode="Aggressive"), "at": 0, "duration": 600}],
        "simulation": {"autoscalerPeriod": 30, "elasticSpeedup": "none"},
    }
    doc = _run(data)
    growth = [e for e in doc["events"] if e["type"] == "bind" and e["reason"] == "ElasticScaleUp"]
    assert [(e["t"], e["pods"]) for e in growth] == [(30.0, 3)]
    assert doc["workloads"]["team/el"]["completed_at"] == 600.0  # no speed-up


def test_termination_grace_holds_gpus_and_delays_the_preemptor() -> None:
    """Same queue, one 8-GPU node: an inference job preempts a train job; the victim's pod keeps its GPUs for the
    30 s grace, so the preemptor starts 30 s later and the held GPUs count as wasted."""
    train = ray_cluster("train", "team", workers=1, gpus=8)
    serve = ray_cluster("serve", "team", workers=1, gpus=8, priority="inference")
    data = {
        "nodes": [{"name": "n", "gpus": 8}],
        "queues": [queue("team", gpu_quota=8)],
        "workloads": [
            {"manifest": train, "at": 0, "duration": 1000},
            {"manifest": serve, "at": 100, "duration": 100},
        ],
        "simulation": {"terminationGrace": 30, "restartCost": 0},
    }
    doc = _run(data)
    t, s = doc["workloads"]["team/train"], doc["workloads"]["team/serve"]
    assert t["stopped_at"] == [100.0]
    assert s["first_running_at"] == 130.0 and s["completed_at"] == 230.0
    assert t["first_running_at"] == 0.0 and t["state"] == "Completed"
    assert t["completed_at"] == 230.0 + 900.0
    assert doc["metrics"]["wasted_gpu_hours"] == round(30 * 8 / 3600, 4)
    assert doc["errors"] == []


def test_scale_steps_remove_and_add_workers() -> None:
    m = _elastic("svc", 1, 3, 4)
    m["spec"]["workerGroupSpecs"][0]["replicas"] = 3
    data = {
        "nodes": [{"name": "n", "count": 2, "gpus": 8}],
        "queues": [queue("team")],
        "workloads": [
            {
                "manifest": m,
                "at": 0,
                "scale": [{"at": 100, "group": "gpu", "replicas": 1}, {"at": 200, "group": "gpu", "replicas": 2}],
            }
        ],
        "simulation": {"until": 300},
    }
    doc = _run(data)
    assert [(s["t"], s["replicas"], s["pods_removed"]) for s in doc["scale_steps"]] == [(100.0, 1, 2), (200.0, 2, 0)]
    growth = [e["t"] for e in doc["events"] if e["type"] == "bind" and e["reason"] == "ElasticScaleUp"]
    assert 200.0 in growth
    assert doc["workloads"]["team/svc"]["state"] == "Running"

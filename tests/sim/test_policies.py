"""The simulator's policies on small scenarios: what changes around the same core, and what it costs.

- kai-ray: an elastic victim shrinks and its run goes on.
- KAI semantics: the same eviction restarts the Ray job from its last checkpoint (work lost, restart cost paid), and
  a RayService without a priority label is ``train``.
- no gang: pods are placed one by one, so a gang that does not fit yet holds part of the cluster, GPUs a small job
  could have used.
"""

from __future__ import annotations

from typing import Any

from kai_ray.sim.policy import KAI, KAI_RAY, NO_GANG, Policy
from kai_ray.sim.run import simulate
from kai_ray.sim.run_metrics import result_document
from kai_ray.sim.scenario import parse_scenario
from tests.sim.helpers import queue, ray_cluster


def _run(data: dict[str, Any], policy: Policy) -> dict[str, Any]:
    return result_document(simulate(parse_scenario(data, "test.yaml"), policy), "test")


def _reclaim_scenario() -> dict[str, Any]:
    """Team a's elastic job borrows all 4 GPUs (quota 2); team b's 2-GPU gang reclaims its quota at t=300."""
    el = ray_cluster("el", "a", workers=2, gpus=1)
    wg = el["spec"]["workerGroupSpecs"][0]
    wg["minReplicas"], wg["maxReplicas"] = 2, 4
    el["spec"]["enableInTreeAutoscaling"] = True
    return {
        "nodes": [{"name": "n", "count": 1, "gpus": 4}],
        "queues": [queue("dept", 4), queue("a", 2, parent="dept"), queue("b", 2, parent="dept")],
        "workloads": [
            {"manifest": el, "at": 0, "duration": 1200},
            {"manifest": ray_cluster("b", "b", workers=2, gpus=1), "at": 300, "duration": 600},
        ],
        "simulation": {"restartCost": 60, "checkpointInterval": 250, "autoscalerPeriod": 10},
    }


def test_kai_ray_shrinks_the_elastic_victim_and_its_run_goes_on() -> None:
    doc = _run(_reclaim_scenario(), KAI_RAY)
    rec = [e for e in doc["events"] if e["type"] == "reclaim"]
    assert [(e["workload"], e["outcome"], e["gpus"]) for e in rec] == [("team/el", "shrink", 2.0)]
    w = doc["workloads"]["team/el"]
    assert (w["runs_stopped"], w["restarts"], w["shrink_events"], w["lost_gpu_hours"]) == (0, 0, 1, 0)
    assert doc["metrics"]["outcomes"] == {"shrink": 1}


def test_kai_semantics_restart_the_victim_from_its_checkpoint() -> None:
    doc = _run(_reclaim_scenario(), KAI)
    rec = [e for e in doc["events"] if e["type"] == "reclaim"]
    assert [(e["workload"], e["outcome"], e["elastic"]) for e in rec] == [("team/el", "restart", True)]
    w = doc["workloads"]["team/el"]
    assert (w["runs_stopped"], w["restarts"], w["shrink_events"]) == (1, 1, 0)
    assert w["stopped_at"] == [300.0]
    # at 300 s it had done 10 s at 2 workers, 10 s at 3 (1.5x), 280 s at 4 (2x): 585 s of work, 500 kept at the
    # checkpoint; 85 s x its 2-GPU minimum lost, plus a 60 s restart cost on the 2 GPUs it kept
    assert w["lost_gpu_hours"] == round((85 * 2 + 60 * 2) / 3600, 4)
    # KubeRay recreated the evicted workers (replicas unchanged): they wait while the run goes on
    assert w["state"] == "Completed" and doc["metrics"]["runs_stopped"] == 1


def test_kai_semantics_give_a_rayservice_kai_s_default_priority() -> None:
    svc = {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "s", "namespace": "a", "labels": {"kai.scheduler/queue": "a"}},
        "spec": {"rayClusterConfig": ray_cluster("x", "a", workers=1, gpus=1)["spec"]},
    }
    data = {"nodes": [{"name": "n", "gpus": 4}], "queues": [queue("a", 4)], "workloads": [{"manifest": svc}]}
    assert _run(data, KAI_RAY)["workloads"]["a/s"]["priority_class"] == "inference"
    assert _run(data, KAI)["workloads"]["a/s"]["priority_class"] == "train"


def test_without_gangs_a_partial_gang_holds_gpus_a_small_job_could_use() -> None:
    data = {
        "nodes": [{"name": "n", "count": 4, "gpus": 8}],
        "queues": [queue("a")],
        "workloads": [
            {"manifest": ray_cluster("one", "a", workers=3, gpus=8), "at": 0, "duration": 600},
            {"manifest": ray_cluster("two", "a", workers=3, gpus=8), "at": 0, "duration": 600},
            {"manifest": ray_cluster("small", "a", workers=1, gpus=8), "at": 1, "duration": 600},
        ],
    }
    gang = _run(data, KAI_RAY)
    done = {k: w["completed_at"] for k, w in gang["workloads"].items()}
    assert done == {"team/one": 600.0, "team/two": 1200.0, "team/small": 601.0}
    assert gang["metrics"]["partial_gang_gpu_hours"] == 0
    pods = _run(data, NO_GANG)
    two = pods["workloads"]["team/two"]
    first = next(e for e in pods["events"] if e["workload"] == "team/two")
    assert first["t"] == 0 and 0 < first["gpus"] < 24  # part of the gang is placed and holds GPUs ...
    assert two["first_running_at"] == 600.0  # ... but only runs once the rest fits
    assert pods["workloads"]["team/small"]["first_running_at"] > 1.0  # while the small job waits for them
    assert pods["metrics"]["partial_gang_gpu_hours"] == round(first["gpus"] * 600 / 3600, 4)

"""One scenario under several scheduling policies, and the numbers that set them side by side.

The row of each policy is computed from that run's own JSON document, so the table ``kai-ray demo`` prints and the
``comparison`` section of ``--json`` are the same numbers the per-run documents hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kai_ray.sim.engine import SimResult
from kai_ray.sim.policy import POLICIES, Policy
from kai_ray.sim.run import simulate
from kai_ray.sim.run_metrics import result_document
from kai_ray.sim.scenario import Scenario


@dataclass
class Run:
    policy: Policy
    result: SimResult
    doc: dict[str, Any]


def run_policies(scn: Scenario, source: str, names: list[str] | None = None) -> list[Run]:
    extra = {"description": scn.description} if scn.description else {}
    runs = []
    for name in names or list(POLICIES):
        policy = POLICIES[name]
        res = simulate(scn, policy)
        doc = result_document(res, source, {**extra, "policy": policy.name})
        runs.append(Run(policy, res, doc))
    return runs


def services(doc: dict[str, Any]) -> list[str]:
    """Workloads that serve (RayServices): they have no duration and run to the end."""
    return [k for k, w in doc["workloads"].items() if w["kind"] == "RayService"]


def training(doc: dict[str, Any]) -> list[str]:
    """Workloads with work to finish (a duration): jobs, sweeps, training clusters."""
    return [k for k, w in doc["workloads"].items() if w["duration_seconds"] is not None]


def row(run: Run) -> dict[str, Any]:
    doc, m = run.doc, run.doc["metrics"]
    wl = doc["workloads"]
    done = [wl[k]["completed_at"] for k in training(doc)]
    return {
        "policy": run.policy.name,
        "title": run.policy.title,
        "summary": run.policy.summary,
        "useful_gpu_rate": m["useful_gpu_rate"],
        "gpu_allocation_rate": m["gpu_allocation_rate"],
        "lost_gpu_hours": m["lost_gpu_hours"],
        "partial_gang_gpu_hours": m["partial_gang_gpu_hours"],
        "service_serving_after_seconds": {k: wl[k]["queueing_delay_seconds"] for k in services(doc)},
        "preempted_pods": m["preempted_pods"],
        "reclaimed_pods": m["reclaimed_pods"],
        "outcome_pods": m["outcome_pods"],
        "runs_stopped": m["runs_stopped"],
        "training_completed_at": {k: wl[k]["completed_at"] for k in training(doc)},
        "training_jct_seconds": {k: wl[k]["jct_seconds"] for k in training(doc)},
        "all_training_done_at": max(done) if done and all(t is not None for t in done) else None,
        "idle_while_fitting_seconds": m["idle_while_fitting_seconds"],
        "end_seconds": m["end_seconds"],
    }

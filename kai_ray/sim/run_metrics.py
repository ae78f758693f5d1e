"""Numbers from a simulation run, and the JSON document ``kai-ray simulate --json`` prints.

Definitions (also in ``docs/simulator.md``):

* **JCT** (job completion time) of a workload with a ``duration``: ``completed_at - arrived_at``. ``avg_jct`` is the
  mean over completed workloads; ``p99_jct`` the nearest-rank 99th percentile (the value at rank ceil(0.99 n) of the
  sorted JCTs; with fewer than 100 jobs that is the largest).
* **Queueing delay**: ``first_running_at - arrived_at`` (arrival to the first time the whole gang minimum ran),
  averaged over workloads that ever ran. ``avg_pending_seconds`` also counts time spent pending again after a
  preemption.
* **GPU allocation rate**: time integral of allocated GPUs (fractions counted as fractions, pods still terminating
  included) over ``total GPUs x (end - start)``, from the first arrival to the end of the simulation.
* **Unallocated-GPU fragmentation**: at each instant, the share of unallocated GPU capacity that lies on nodes where
  some GPU is already allocated (including idle parts of shared GPUs), so a job needing whole nodes cannot use it;
  0 while nothing is free. Reported as its time average over the same window.
* **Evictions are counted in pods** everywhere a person reads them (the demo's table and story, the plots, the
  Workloads table): ``preempted_pods``, ``reclaimed_pods``, ``other_evicted_pods`` (consolidation, stale gang) and
  ``outcome_pods`` (by what became of the victim: ``shrink``, ``restart``, ``suspend``, ``stop``). One cycle's
  evictions of one workload by one action are one *event*; the ``*_events`` keys and ``outcomes`` count those.
* **Runs stopped** (``runs_stopped``, ``stopped_at``): times a workload lost its running gang to evictions. Evictions
  the run survived (elastic shrinks) are ``shrink_events``.
* **Wasted GPU-hours**: GPU time that did no useful work because of preemption: GPUs held while paying the restart
  cost, work lost since the last checkpoint (x the gang's GPUs), GPUs held by evicted pods while terminating, and
  GPUs held by what is left of a broken gang until it runs again or is evicted. ``lost_gpu_hours`` is the part
  evictions caused; ``partial_gang_gpu_hours`` the part held by gangs below their minimum that had never run (only
  a scheduler without gangs leaves those).
* **Useful GPU rate**: like the allocation rate, counting only GPUs of running workloads past their restart cost.
* **Idle windows**: spans longer than one scheduling period in which GPUs are free while workloads wait for GPUs,
  with each waiting workload's next step (the pods its gang minimum lacks, else one elastic pod), whether it would
  fit on the free capacity, and the core's pending reason (e.g. ``NonPreemptibleOverQuota``).
  ``idle_while_fitting_seconds`` sums the windows in which some waiting step fits.
"""

from __future__ import annotations

import math
from typing import Any

from kai_ray.sim.engine import SimResult
from kai_ray.sim.fair_share_usage import usage_document
from kai_ray.sim.workloads import COMPLETED, WorkloadBase

EVICTIONS = ("preempt", "reclaim", "evict")  # event types that take pods from a workload


def nearest_rank(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def compute_metrics(res: SimResult) -> dict[str, Any]:
    arrived = [w for w in res.workloads if w.job is not None]
    done = [w for w in arrived if w.state == COMPLETED and w.completed_at is not None]
    jct = [w.completed_at - w.arrive_at for w in done if w.completed_at is not None]
    delays = [w.first_running_at - w.arrive_at for w in arrived if w.first_running_at is not None]
    span = max(0.0, res.end - res.start)
    capacity = res.total_gpus * span
    by_type: dict[str, int] = {}
    outcomes: dict[str, int] = {}
    pods_by_type: dict[str, int] = {}
    outcome_pods: dict[str, int] = {}
    for e in res.events:
        by_type[e["type"]] = by_type.get(e["type"], 0) + 1
        if e["type"] in EVICTIONS:
            pods_by_type[e["type"]] = pods_by_type.get(e["type"], 0) + e["pods"]
        if "outcome" in e:
            outcomes[e["outcome"]] = outcomes.get(e["outcome"], 0) + 1
            outcome_pods[e["outcome"]] = outcome_pods.get(e["outcome"], 0) + e["pods"]
    return {
        "workloads": len(res.workloads),
        "arrived": len(arrived),
        "completed": len(done),
        "running_at_end": sum(1 for w in arrived if w.state == "Running"),
        "pending_at_end": sum(1 for w in arrived if w.state == "Pending"),
        "suspended": sum(1 for w in res.workloads if w.state == "Suspended"),  # spec.suspend true as written
        "avg_jct_seconds": _r(_mean(jct)),
        "p99_jct_seconds": _r(nearest_rank(jct, 0.99)),
        "avg_queueing_delay_seconds": _r(_mean(delays)),
        "avg_pending_seconds": _r(_mean([w.pending_seconds for w in arrived])),
        "gpu_allocation_rate": _r(res.alloc_gpu_seconds / capacity if capacity > 0 else 0.0, 4),
        "useful_gpu_rate": _r(res.useful_gpu_seconds / capacity if capacity > 0 else 0.0, 4),
        "gpu_fragmentation": _r(res.frag_gpu_seconds / span if span > 0 else 0.0, 4),
        "runs_stopped": sum(w.preemptions for w in res.workloads),
        "evicted_pods": sum(w.evicted_pods for w in res.workloads),
        "preempted_pods": pods_by_type.get("preempt", 0),
        "reclaimed_pods": pods_by_type.get("reclaim", 0),
        "other_evicted_pods": pods_by_type.get("evict", 0),
        "outcome_pods": outcome_pods,
        "shrink_events": sum(w.shrinks for w in res.workloads),
        "preempt_events": by_type.get("preempt", 0),
        "reclaim_events": by_type.get("reclaim", 0),
        "evict_events": by_type.get("evict", 0),
        "wasted_gpu_hours": _r(sum(w.wasted_gpu_seconds for w in res.workloads) / 3600.0, 4),
        "lost_gpu_hours": _r(sum(w.wasted_gpu_seconds - w.partial_gpu_seconds for w in res.workloads) / 3600.0, 4),
        "partial_gang_gpu_hours": _r(sum(w.partial_gpu_seconds for w in res.workloads) / 3600.0, 4),
        # work lost to evictions alone (since the checkpoint / busy phase); GPUs held by half-started gangs
        "work_lost_gpu_hours": _r(sum(w.work_lost_gpu_seconds for w in res.workloads) / 3600.0, 4),
        "half_started_gpu_hours": _r(sum(w.stuck_gpu_seconds for w in res.workloads) / 3600.0, 4),
        "idle_while_fitting_seconds": _r(sum(x["to"] - x["from"] for x in res.idle_windows if x["fits"])),
        "outcomes": outcomes,
        "total_gpus": res.total_gpus,
        "start_seconds": _r(res.start),
        "end_seconds": _r(res.end),
    }


def workload_doc(w: WorkloadBase) -> dict[str, Any]:
    arrived = w.job is not None
    return {
        "kind": w.kind,
        "queue": w.queue,
        "priority_class": w.priority_class,
        "priority": w.job.priority if w.job is not None else None,
        "preemptible": w.job.preemptible if w.job is not None else None,
        "podgroup": w.job.name if w.job is not None else None,
        "state": w.state,
        "arrived_at": _r(w.arrive_at) if arrived else None,
        "first_running_at": _r(w.first_running_at),
        "completed_at": _r(w.completed_at),
        "jct_seconds": _r(w.completed_at - w.arrive_at) if w.completed_at is not None else None,
        "queueing_delay_seconds": _r(w.first_running_at - w.arrive_at) if w.first_running_at is not None else None,
        "pending_seconds": _r(w.pending_seconds),
        "runs_stopped": w.preemptions,
        "stopped_at": [_r(x) for x in w.preempted_at],
        "shrink_events": w.shrinks,
        "restarts": w.restarts,
        "evicted_pods": w.evicted_pods,
        "evicted_pods_by": {},  # action (preempt, reclaim, evict) -> pods; filled from the events
        "pending_reason": w.pending_reason if w.state == "Pending" else None,
        "pending_message": w.pending_message if w.state == "Pending" else None,
        "last_pending_reason": w.last_pending_reason,
        "pending_reasons": [{"t": _r(t), "reason": r, "message": m} for t, r, m in w.pending_log],
        "duration_seconds": w.duration,
        "work_done_seconds": _r(w.done),
        "gang_gpus": w.gang_gpus,
        "gang": w.gang_summary(),
        "wasted_gpu_hours": _r(w.wasted_gpu_seconds / 3600.0, 4),
        "lost_gpu_hours": _r((w.wasted_gpu_seconds - w.partial_gpu_seconds) / 3600.0, 4),
        "useful_gpu_hours": _r(w.useful_gpu_seconds / 3600.0, 4),
        "work_lost_gpu_hours": _r(w.work_lost_gpu_seconds / 3600.0, 4),
        "half_started_gpu_hours": _r(w.stuck_gpu_seconds / 3600.0, 4),
        **(
            {
                "upgrade_of": w.upgrade_of,
                "time_to_serve_seconds": _r(w.served_at - w.arrive_at) if w.served_at else None,
            }
            if w.upgrade_of is not None
            else {}
        ),
    }


def result_document(res: SimResult, source: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    workloads = {w.key: workload_doc(w) for w in res.workloads}
    for e in res.events:
        if e["type"] in EVICTIONS and e["workload"] in workloads:
            by = workloads[e["workload"]]["evicted_pods_by"]
            by[e["type"]] = by.get(e["type"], 0) + e["pods"]
    return {
        "source": source,
        **(extra or {}),
        "cluster": {
            "nodes": res.nodes,
            "gpus": res.total_gpus,
            "leaf_queues": res.queues,
            "gpu_quotas": res.gpu_quotas,
        },
        "workloads": workloads,
        "events": [{k: (_r(v) if k == "t" else v) for k, v in e.items()} for e in res.events],
        "metrics": compute_metrics(res),
        "stats": {
            "cycles": res.cycles,
            "core_seconds": round(res.cycle_seconds, 3),
            "wall_seconds": round(res.wall_seconds, 3),
        },
        "scale_steps": [
            {"t": _r(t), "workload": key, "group": grp, "replicas": n, "pods_removed": removed, "gpus_removed": gpus}
            for t, key, grp, n, removed, gpus in res.scales
        ],
        "idle_windows": [{**x, "from": _r(x["from"]), "to": _r(x["to"])} for x in res.idle_windows],
        "errors": res.errors,
        "findings": res.findings,
        **({"usage": usage_document(res.usage, res.start, res.end)} if res.usage is not None else {}),
    }

"""The consolidation action: repack running preemptible pods so a pending preemptible gang fits.

KAI (``actions/consolidation``): only when neither placement strategy is ``spread``; only preemptible pending jobs
and preemptible victims (any queue, any priority); accepted only if EVERY victim can be placed again elsewhere, so
nobody loses their run, they only restart. Kubernetes cannot move a pod: victims are evicted and their controllers
re-create them; the room for the copies is held in this cycle (``Evict.moved_to``) so later actions do not take
it. kai-ray caps the pods moved for one job at ``max_consolidation_preemptees`` (-1: no cap).
"""

from __future__ import annotations

import numpy as np

from kai_ray.scheduler.decisions import Action, Reason
from kai_ray.scheduler.pending import record_eviction_failure, search_for_pending
from kai_ray.scheduler.session import EPS, GPU, JobInfo, Session
from kai_ray.scheduler.solver import JobSolver, Unit, victim_jobs
from kai_ray.scheduler.tasks import tasks_to_allocate


def consolidation_action(ses: Session) -> None:
    cfg = ses.cfg
    if cfg.placement_gpu == "spread" or cfg.placement_cpu == "spread" or cfg.max_consolidation_preemptees == 0:
        return
    victims = [v for v in ses.jobs if v.preemptible and v.n_active > 0 and v.invalid is None and v.queue >= 0]
    search_for_pending(
        ses,
        Action.CONSOLIDATION,
        lambda job, budget: consolidate_for(ses, job, budget, victims),
        nothing_found="cannot repack",
        per_queue=False,
        preemptible_only=True,
    )


def available_gpus(ses: Session) -> float:
    """Idle and releasing GPUs of ready nodes, shared GPUs' free shares included (KAI's getSumOfAvailableGPUs)."""
    total = float((np.maximum(ses.free[GPU], 0.0) + ses.rel[GPU])[ses.ready].sum())
    for n in np.flatnonzero(ses.ready).tolist():
        for used, rel in ses.groups[n].values():
            if rel < used - EPS:
                total += max(0.0, 1.0 - used + rel)
    return total


def consolidate_for(
    ses: Session, job: JobInfo, budget: list[int] | None = None, candidates: list[JobInfo] | None = None
) -> bool:
    tasks = tasks_to_allocate(ses, job)
    if not tasks:
        return False
    need = sum(ses.p_req[p][0] for p in tasks)
    if need > EPS and available_gpus(ses) + EPS < need:
        record_eviction_failure(job, "consolidation", "not enough idle GPUs in the cluster to repack for it")
        return False  # moving pods cannot create capacity that does not exist
    pool = candidates if candidates is not None else ses.jobs
    victims = [
        v for v in pool if v.idx != job.idx and v.preemptible and v.n_active > 0 and v.invalid is None and v.queue >= 0
    ]
    limit = ses.cfg.max_consolidation_preemptees

    def validator(units: list[Unit], moved: set[int]) -> str | None:
        pods = [p for u in units for p in u.pods]
        if any(p not in moved for p in pods):
            return "some victims could not be placed again elsewhere"
        if limit >= 0 and len(pods) > limit:
            return f"would move {len(pods)} pods, more than max_consolidation_preemptees={limit}"
        return None

    solver = JobSolver(
        ses, job, victim_jobs(ses, victims), Action.CONSOLIDATION, Reason.CONSOLIDATED, validator, budget=budget
    )
    if solver.solve():
        job.fail_reason = None
        return True
    record_eviction_failure(job, "consolidation", "running pods cannot be repacked to make room")
    return False

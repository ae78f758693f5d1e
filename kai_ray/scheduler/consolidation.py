"""The consolidation action: repack running preemptible pods so a pending preemptible gang fits.

KAI (``actions/consolidation``): only when neither placement strategy is ``spread``; only preemptible pending jobs
and preemptible victims (any queue, any priority); at most ``max_consolidation_preemptees`` pods move; accepted
only if EVERY evicted pod can be placed again elsewhere on idle resources (so nobody loses their run, they only
restart). Kubernetes cannot move a pod: victims are evicted and their controllers re-create them; the room for
the copies is reserved in this cycle so later actions do not take it.
"""

from __future__ import annotations

import numpy as np

from kai_ray.scheduler.allocation import _choose_group, _choose_node, _fit_mask, gang_shape, quota_request
from kai_ray.scheduler.decisions import Action, Reason
from kai_ray.scheduler.gang import tasks_to_allocate
from kai_ray.scheduler.pending import pending_jobs_in_order, record_eviction_failure
from kai_ray.scheduler.session import EPS, JobInfo, Session
from kai_ray.scheduler.victims import Solver, Unit, build_units


def consolidation_action(ses: Session) -> None:
    cfg = ses.cfg
    if cfg.placement_gpu == "spread" or cfg.placement_cpu == "spread" or cfg.max_consolidation_preemptees == 0:
        return
    failed: dict[object, JobInfo] = {}
    for job in pending_jobs_in_order(ses, Action.CONSOLIDATION, preemptible_only=True):
        key = gang_shape(ses, job, tasks_to_allocate(ses, job))
        rep = failed.get(key)
        if rep is not None:
            why = rep.fail_details.get("consolidation", "cannot repack")
            record_eviction_failure(job, "consolidation", f"{why} (as for {rep.key}, same shape)")
            continue
        if not consolidate_for(ses, job):
            failed[key] = job


def _reserve_elsewhere(ses: Session, p: int) -> bool:
    base = ses.masks.mask(ses.pods[p]).copy()
    base[ses.p_node[p]] = False
    fit = _fit_mask(ses, p, base, future=False)
    if not fit.any():
        return False
    node = _choose_node(ses, p, fit)
    group = _choose_group(ses, p, node, False) if (ses.p_frac[p] or ses.p_gpumem[p]) else None
    ses.reserve(p, node, group)
    return True


def consolidate_for(ses: Session, job: JobInfo) -> bool:
    tasks = tasks_to_allocate(ses, job)
    if not tasks:
        return False
    need = quota_request(ses, tasks)
    idle = np.maximum(ses.free, 0.0)[:, ses.ready].sum(axis=1)
    if any(idle[r] + EPS * max(1.0, need[r]) < need[r] for r in range(3)):
        record_eviction_failure(job, "consolidation", "not enough idle resources in the cluster to repack for it")
        return False  # moving pods cannot create capacity that does not exist
    victims = [
        v
        for v in ses.jobs
        if v.idx != job.idx and v.preemptible and v.n_active > 0 and v.invalid is None and v.queue >= 0
    ]
    units = [u for u in build_units(ses, victims, lambda _j: ()) if u.core]
    if not units:
        return False
    limit = ses.cfg.max_consolidation_preemptees

    def validator(chosen: list[Unit]) -> bool:
        pods = [p for u in chosen for p in u.pods]
        if limit >= 0 and len(pods) > limit:
            return False
        return all(_reserve_elsewhere(ses, p) for p in pods)

    solver = Solver(ses, job, units, Action.CONSOLIDATION, Reason.CONSOLIDATED, validator=validator)
    if solver.solve():
        job.fail_reason = None
        return True
    record_eviction_failure(job, "consolidation", "running pods cannot be repacked to make room")
    return False

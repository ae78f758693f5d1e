"""The reclaim action: a queue under its fair share takes resources back from other queues' preemptible jobs.

Victims come from every other leaf queue whose diverging ancestor passes KAI's victim filter, are preemptible,
running, and past their reclaim min-runtime (else only elastic surplus). The scenario search (:mod:`solver`) takes
them least deserving first, re-ranking the victim queues as their shares shrink; a scenario must pass
:func:`reclaimable.validate` (KAI's strategies and the saturation anti-ping-pong rule), where victims that were
re-placed elsewhere (consolidating reclaim, KAI's default) cost nothing.
"""

from __future__ import annotations

from kai_ray.scheduler.allocation import in_quota_request, quota_request, upgrade_surge_of
from kai_ray.scheduler.decisions import Action, Reason
from kai_ray.scheduler.minruntime import protected, reclaim_min_runtime
from kai_ray.scheduler.pending import record_eviction_failure, search_for_pending
from kai_ray.scheduler.reclaimable import QueueState, can_reclaim, validate, victim_queue_allowed
from kai_ray.scheduler.session import JobInfo, Session
from kai_ray.scheduler.solver import JobSolver, Unit, split_victim_chunks, victim_jobs
from kai_ray.scheduler.tasks import tasks_to_allocate


def reclaim_action(ses: Session) -> None:
    active = [v for v in ses.jobs if v.preemptible and v.n_active > 0 and v.invalid is None and v.queue >= 0]
    search_for_pending(
        ses,
        Action.RECLAIM,
        lambda job, budget: reclaim_for(ses, job, active, budget),
        nothing_found="no victims",
        per_queue=True,
    )


def reclaim_for(
    ses: Session, job: JobInfo, candidates: list[JobInfo] | None = None, budget: list[int] | None = None
) -> bool:
    tasks = tasks_to_allocate(ses, job)
    if not tasks:
        return False
    req = quota_request(ses, tasks)
    # in quota: a non-preemptible job, a semi-preemptible job's core; never a RayService upgrade surge
    np_req = in_quota_request(ses, job, tasks) if upgrade_surge_of(ses, job) is None else None
    if job.semi and np_req is not None and not any(np_req):
        np_req = None  # only burst pods: nothing of it is charged in quota
    in_quota_free = np_req is None
    why = can_reclaim(ses, job.queue, req, in_quota_free, np_req)
    if why is not None:
        record_eviction_failure(job, "reclaim", why)
        return False
    st = QueueState(ses)
    victims: list[JobInfo] = []
    surplus_only: set[int] = set()
    allowed: dict[int, bool] = {}
    for v in ses.jobs if candidates is None else candidates:
        if v.queue < 0 or v.queue == job.queue or not v.preemptible or v.n_active == 0 or v.invalid is not None:
            continue
        ok = allowed.get(v.queue)
        if ok is None:
            ok = allowed[v.queue] = victim_queue_allowed(ses, st, job.queue, v.queue, req)
        if not ok:
            continue
        if protected(ses, v, reclaim_min_runtime(ses, job, v)):
            surplus_only.add(v.idx)
        victims.append(v)
    if not victims:
        record_eviction_failure(job, "reclaim", "no other queue has reclaimable preemptible jobs")
        return False
    consolidating = ses.cfg.allow_consolidating_reclaim

    def validator(units: list[Unit], moved: set[int]) -> str | None:
        chunks = split_victim_chunks(ses, units, moved if consolidating else set())
        return validate(ses, st, job.queue, req, in_quota_free, chunks, np_req)

    solver = JobSolver(
        ses,
        job,
        victim_jobs(ses, victims, surplus_only),
        Action.RECLAIM,
        Reason.RECLAIMED,
        validator=validator,
        budget=budget,
    )
    if solver.solve():
        job.fail_reason = None
        return True
    record_eviction_failure(job, "reclaim", solver.failure or "no victim set makes room")
    return False

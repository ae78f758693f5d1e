"""The reclaim action: a queue under its fair share takes resources back from other queues' preemptible jobs.

Victims come from every other leaf queue whose diverging ancestor passes KAI's victim filter, are preemptible,
running, and past their reclaim min-runtime (else only elastic surplus). Victim queues are ranked most
over-served first (over fair share, lower queue priority, larger dominant share), then KAI's reversed job order.
The chosen set must pass :func:`reclaimable.validate` (KAI's strategies and the saturation anti-ping-pong rule).
"""

from __future__ import annotations

from kai_ray.scheduler.allocation import gang_shape, quota_request
from kai_ray.scheduler.decisions import Action, Reason
from kai_ray.scheduler.gang import tasks_to_allocate
from kai_ray.scheduler.minruntime import protected, reclaim_min_runtime
from kai_ray.scheduler.ordering import QueueView
from kai_ray.scheduler.pending import pending_jobs_in_order, record_eviction_failure
from kai_ray.scheduler.reclaimable import QueueState, can_reclaim, validate, victim_queue_allowed
from kai_ray.scheduler.session import JobInfo, Session
from kai_ray.scheduler.victims import Solver, Unit, build_units


def victim_chunks(ses: Session, u: Unit) -> list[tuple[float, float, float]]:
    """KAI's splitVictimTasks: a gang's core is costed as one block, elastic pods one by one."""
    if u.core:
        return [u.total]
    return [ses.p_req[p] for p in u.pods]


def reclaim_action(ses: Session) -> None:
    active = [v for v in ses.jobs if v.preemptible and v.n_active > 0 and v.invalid is None and v.queue >= 0]
    failed: dict[object, JobInfo] = {}
    for job in pending_jobs_in_order(ses, Action.RECLAIM):
        tasks = tasks_to_allocate(ses, job)
        key = (job.queue, job.preemptible, gang_shape(ses, job, tasks))
        rep = failed.get(key)
        if rep is not None:
            why = rep.fail_details.get("reclaim", "no victims")
            record_eviction_failure(job, "reclaim", f"{why} (as for {rep.key}, same shape)")
            continue
        if not reclaim_for(ses, job, active):
            failed[key] = job


def reclaim_for(ses: Session, job: JobInfo, candidates: list[JobInfo] | None = None) -> bool:
    tasks = tasks_to_allocate(ses, job)
    if not tasks:
        return False
    req = quota_request(ses, tasks)
    why = can_reclaim(ses, job.queue, req, job.preemptible)
    if why is not None:
        record_eviction_failure(job, "reclaim", why)
        return False
    st = QueueState(ses)
    view = QueueView(ses)
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

    def rank(v: JobInfo) -> tuple[object, ...]:
        q = v.queue
        node = ses.tree.nodes[q]
        return (0 if view.over_utilized(q) else 1, node.priority, -view.drf(q), -node.created_at, node.name)

    units = build_units(ses, victims, rank, surplus_only)

    def chunks(chosen: list[Unit]) -> list[tuple[int, tuple[float, float, float]]]:
        out: list[tuple[int, tuple[float, float, float]]] = []
        for u in sorted(chosen, key=lambda u: u.key):
            out.extend((u.job.queue, res) for res in victim_chunks(ses, u))
        return out

    def validator(chosen: list[Unit]) -> bool:
        reason = validate(ses, st, job.queue, req, job.preemptible, chunks(chosen))
        if reason is not None:
            solver.failure = reason
        return reason is None

    solver = Solver(ses, job, units, Action.RECLAIM, Reason.RECLAIMED, validator=validator)
    if solver.solve():
        job.fail_reason = None
        return True
    record_eviction_failure(job, "reclaim", solver.failure or "no victim set makes room")
    return False

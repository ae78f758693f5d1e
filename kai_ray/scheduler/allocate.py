"""The allocate action: pending jobs in queue/job order, each placed all-or-nothing in its own statement.

A job that still has pods to place after a successful step (elastic growth beyond its minimum) goes back into the
order, so growth happens one pod at a time, interleaved with other jobs and queues, as in KAI.
"""

from __future__ import annotations

from kai_ray.scheduler.allocation import allocate_job
from kai_ray.scheduler.gang import has_tasks_to_allocate
from kai_ray.scheduler.ordering import JobsOrderByQueues
from kai_ray.scheduler.session import Session


def allocate_action(ses: Session) -> None:
    order = JobsOrderByQueues(ses)
    for job in ses.jobs:
        if job.invalid is not None or job.queue < 0 or not job.ready:
            continue
        if not job.has_pending(ses):
            continue
        order.push(job)
    attempts = 0
    while not order.empty():
        nxt = order.pop()
        if nxt is None:
            break
        job = nxt
        attempts += 1
        cp = ses.checkpoint()
        job.touched = True
        ok, _ = allocate_job(ses, job)
        if ok:
            job.fail_reason = None
            if has_tasks_to_allocate(ses, job):
                order.push(job)
        else:
            ses.rollback(cp)
    ses.stats["allocate_attempts"] = ses.stats.get("allocate_attempts", 0) + attempts

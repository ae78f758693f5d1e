"""The allocate action: pending jobs in queue/job order, each placed all-or-nothing in its own statement.

A job that still has pods to place after a successful step (elastic growth beyond its minimum) goes back into the
order, so growth happens one pod at a time, interleaved with other jobs and queues, as in KAI.

Placement only consumes resources during this action, so a step that failed to fit fails again for any job of the
same shape later in the action; such jobs reuse the first failure's explanation instead of searching again (per
queue for quota and limit failures).
"""

from __future__ import annotations

from kai_ray.scheduler.allocation import FIT_REASONS, allocate_job, gang_shape
from kai_ray.scheduler.ordering import JobsOrderByQueues
from kai_ray.scheduler.session import JobInfo, Session
from kai_ray.scheduler.tasks import has_tasks_to_allocate, tasks_to_allocate


def allocate_action(ses: Session) -> None:
    order = JobsOrderByQueues(ses)
    for job in ses.pending_at_open:
        if job.invalid is not None or job.queue < 0 or not job.ready:
            continue
        if not job.has_pending(ses):
            continue
        order.push(job)
    attempts = 0
    failed: dict[object, JobInfo] = {}
    while not order.empty():
        nxt = order.pop()
        if nxt is None:
            break
        job = nxt
        job.touched = True
        shape = gang_shape(ses, job, tasks_to_allocate(ses, job))
        quota_key = (job.queue, job.preemptible, shape) if not job.semi else (job.idx, shape)  # a core: per job
        rep = failed.get(shape) or failed.get(quota_key)
        if rep is not None and rep.fail_reason is not None:
            job.fail(rep.fail_reason, f"{rep.fail_message} (as for {rep.key}, same shape)", dict(rep.fail_details))
            continue
        attempts += 1
        cp = ses.stmt.checkpoint()
        ok, _ = allocate_job(ses, job)
        if ok:
            job.fail_reason = None
            if has_tasks_to_allocate(ses, job):
                order.push(job)
        else:
            ses.stmt.rollback(cp)
            if job.fail_reason in FIT_REASONS:
                failed[shape] = job
            elif job.fail_reason is not None:
                failed[quota_key] = job
    ses.stats["allocate_attempts"] = ses.stats.get("allocate_attempts", 0) + attempts

"""Pending-job iteration shared by the eviction actions, and how their failures join the job's explanation."""

from __future__ import annotations

from collections.abc import Iterator

from kai_ray.scheduler.decisions import Action, Reason
from kai_ray.scheduler.minruntime import preemption_delay, within_preemption_delay
from kai_ray.scheduler.ordering import JobsOrderByQueues
from kai_ray.scheduler.session import JobInfo, Session


def pending_jobs_in_order(ses: Session, action: Action, preemptible_only: bool = False) -> Iterator[JobInfo]:
    """Jobs with pods left to place, in KAI's queue/job order; jobs inside their preemption delay are skipped."""
    order = JobsOrderByQueues(ses)
    for job in ses.jobs:
        if job.invalid is not None or job.queue < 0 or not job.ready or not job.has_pending(ses):
            continue
        if preemptible_only and not job.preemptible:
            continue
        if within_preemption_delay(ses, job):
            if job.fail_reason in (None, Reason.GANG_DOES_NOT_FIT) and not job.min_satisfied():
                base = job.fail_message
                details = dict(job.fail_details)
                details["preemptionDelaySeconds"] = preemption_delay(ses, job)
                job.fail(
                    Reason.PREEMPTION_DELAY_NOT_ELAPSED,
                    f"within its preemption delay ({preemption_delay(ses, job):g}s), so it may not evict "
                    f"others yet; {base}",
                    details,
                )
            continue
        order.push(job)
    while not order.empty():
        nxt = order.pop()
        if nxt is None:
            break
        if nxt.has_pending(ses):
            yield nxt


def record_eviction_failure(job: JobInfo, action: str, why: str) -> None:
    if job.fail_reason is None:
        return
    details = dict(job.fail_details)
    details[action] = why
    msg = job.fail_message
    job.fail(job.fail_reason, f"{msg}; {action}: {why}", details)

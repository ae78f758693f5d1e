"""Pending-job iteration shared by the eviction actions, and how their failures join the job's explanation."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from kai_ray.scheduler.decisions import Action, Reason
from kai_ray.scheduler.minruntime import preemption_delay, within_preemption_delay
from kai_ray.scheduler.ordering import JobsOrderByQueues
from kai_ray.scheduler.placement import signature
from kai_ray.scheduler.session import PENDING, JobInfo, Session


def pending_jobs_in_order(ses: Session, action: Action, preemptible_only: bool = False) -> Iterator[JobInfo]:
    """Jobs with pods left to place, in KAI's queue/job order; jobs inside their preemption delay are skipped."""
    order = JobsOrderByQueues(ses)
    for job in ses.pending_at_open:
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


def search_for_pending(
    ses: Session,
    action: Action,
    attempt: Callable[[JobInfo, list[int]], bool],
    *,
    nothing_found: str,
    per_queue: bool,
    preemptible_only: bool = False,
) -> None:
    """The loop every eviction action shares: pending jobs in order, one victim-search budget for the action, and
    a job no easier than one that already failed (per queue, for actions whose victims are the job's own queue's)
    is skipped with that failure in its explanation, so a saturated cluster costs one search per kind of job."""
    name = action.value
    failed: dict[int, FailedJobs] = {}
    budget = [ses.cfg.max_scenarios_per_action]
    for job in pending_jobs_in_order(ses, action, preemptible_only=preemptible_only):
        if budget[0] <= 0:
            record_eviction_failure(job, name, "the victim search budget of this cycle is spent")
            continue
        seen = failed.setdefault(job.queue if per_queue else -1, FailedJobs(ses))
        rep = seen.not_easier_than(job)
        if rep is not None:
            why = rep.fail_details.get(name, nothing_found)
            record_eviction_failure(job, name, f"{why} (as for {rep.key}, which is no harder)")
            continue
        if not attempt(job, budget):
            seen.record(job)


def record_eviction_failure(job: JobInfo, action: str, why: str) -> None:
    if job.fail_reason is None:
        return
    details = dict(job.fail_details)
    details[action] = why
    msg = job.fail_message
    job.fail(job.fail_reason, f"{msg}; {action}: {why}", details)


Vec = tuple[float, float, float]


def _le(a: Vec, b: Vec) -> bool:
    return a[0] <= b[0] + 1e-9 and a[1] <= b[1] + 1e-9 and a[2] <= b[2] + 1e-9


class FailedJobs:
    """KAI's scheduling signatures (``MinimalJobRepresentatives``): per set of scheduling constraints, the smallest
    job an eviction action failed for. A later job with the same constraints is tried only if it is easier (fewer
    pending pods, or smaller pods), so a saturated cluster with thousands of pending pods costs one search per kind
    of job, not one per job."""

    def __init__(self, ses: Session) -> None:
        self.ses = ses
        self.reps: dict[object, tuple[JobInfo, list[Vec]]] = {}

    def _key(self, job: JobInfo) -> tuple[object, list[Vec]]:
        ses = self.ses
        st = ses.p_status
        pending = [p for p in job.pods if st[p] == PENDING and not ses.pods[p].gated]
        sig = (
            job.spec.topology,
            tuple(sorted({(signature(ses.pods[p]), repr(getattr(ses.p_set[p], "topology", None))) for p in pending})),
        )
        return sig, sorted(ses.p_req[p] for p in pending)

    def not_easier_than(self, job: JobInfo) -> JobInfo | None:
        """The failed job that ``job`` is no easier than (skip it), or None (try it)."""
        sig, mine = self._key(job)
        rep = self.reps.get(sig)
        if rep is None:
            return None
        other, theirs = rep
        if not mine or not theirs:
            return other
        if len(theirs) > len(mine):
            return None
        for i, r in enumerate(mine):
            if i >= len(theirs):
                return other
            if _le(r, theirs[i]):
                if _le(theirs[i], r):
                    continue
                return None
        return other

    def record(self, job: JobInfo) -> None:
        sig, mine = self._key(job)
        rep = self.reps.get(sig)
        if rep is not None:
            theirs = rep[1]
            if not mine or not theirs or len(mine) > len(theirs):
                return
            if not all(_le(a, b) for a, b in zip(mine, theirs, strict=False)):
                return
        self.reps[sig] = (job, mine)

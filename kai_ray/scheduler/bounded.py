"""Bounded waits (kai-ray, Ray-native): no Ray workload holds GPUs half-started, waits unseen, or runs without end.

* ``kai-ray.io/ready-timeout`` (``RayNativeFacts.ready_timeout``, else ``SchedulerConfig.default_ready_timeout``;
  off by default): a gang whose pods are bound but not all Ready that long after it was bound is evicted whole, and
  the adapter requeues it with ``backoff_until``. KAI's stale-gang eviction covers only gangs whose pods *died*; an
  image that never pulls or a Ray head that never joins keeps a gang bound, unready and holding GPUs forever.
* ``kai-ray.io/max-runtime``: a gang admitted that long (earlier runs included, ``admitted_seconds``) is evicted
  whole and never placed again; the adapter suspends its RayJob (Kueue's maximum execution time).
* ``kai-ray.io/max-pending-time``: a pending gang past it keeps its blocking reason; its status says so
  (``details.maxPendingExceeded``) and the adapter raises a condition and Event. With
  ``kai-ray.io/max-pending-action`` the core decides to stop it instead (reason ``MaxPendingTimeExceeded``,
  ``details.maxPendingAction``, the blocking reason kept in ``details.blockingReason``) and emits a
  :class:`~kai_ray.scheduler.decisions.StopPending` until the action's record is read back; the adapter acts once per
  wait: ``suspend`` sets ``spec.suspend`` (lifting it is a new wait, counted from its pods' creation), ``fail`` also
  marks the gang failed, never placed again (Kueue's deactivated Workload).

Pure functions of the snapshot; ``hold`` runs when the session opens, ``evict_overdue`` with stale-gang eviction,
``annotate`` on the finished result.
"""

from __future__ import annotations

from kai_ray import constants as c
from kai_ray.durations import span
from kai_ray.scheduler.allocation import upgrade_surge_of
from kai_ray.scheduler.decisions import Action, CycleResult, JobStatus, Reason, StopPending
from kai_ray.scheduler.session import ACTIVE, EvictInfo, JobInfo, Session


def hold(ses: Session) -> None:
    """Pending gangs that must not be placed now: inside their ready-timeout backoff, or past their max-runtime."""
    for job in ses.jobs:
        facts = job.spec.raynative
        if facts is None or job.n_active > 0 or job.invalid is not None:
            continue
        if facts.backoff_until is not None and ses.now < facts.backoff_until:
            job.invalid = (
                Reason.READY_TIMEOUT_BACKOFF,
                f"evicted after its ready-timeout; placed again in {span(facts.backoff_until - ses.now)}",
            )
        elif facts.max_pending_failed:
            job.invalid = (
                Reason.MAX_PENDING_TIME_EXCEEDED,
                f"marked failed: pending beyond its max-pending-time {span(facts.max_pending_time or 0.0)} "
                f"({c.MAX_PENDING_ACTION}: fail); not placed again: delete and re-create the Ray object to retry",
            )
        elif facts.max_runtime is not None and (facts.admitted_seconds or 0.0) >= facts.max_runtime:
            job.invalid = (
                Reason.MAX_RUNTIME_EXCEEDED,
                f"admitted {span(facts.admitted_seconds or 0.0)}, its max-runtime "
                f"{span(facts.max_runtime)}: stopped, not placed again",
            )


def _ready_timeout(ses: Session, job: JobInfo) -> float | None:
    facts = job.spec.raynative
    if facts is not None and facts.ready_timeout is not None:
        return facts.ready_timeout if facts.ready_timeout > 0 else None
    return ses.cfg.default_ready_timeout


def evict_overdue(ses: Session) -> None:
    """Evict whole the running gangs past their ready-timeout or max-runtime."""
    st = ses.p_status
    default_timeout = ses.cfg.default_ready_timeout
    for job in ses.jobs:
        if job.n_active == 0 or not job.min_satisfied():
            continue
        facts = job.spec.raynative
        if facts is None and default_timeout is None:
            continue  # neither a ready-timeout nor a max-runtime applies
        active = [p for p in job.pods if st[p] in ACTIVE]
        start = job.spec.last_start
        msg = reason = None
        timeout = _ready_timeout(ses, job)
        bound = facts.bound_since if facts is not None and facts.bound_since is not None else start
        if timeout is not None and bound is not None and ses.now - bound >= timeout:
            unready = sum(1 for p in active if ses.pods[p].ready is False)
            if unready:
                reason = Reason.READY_TIMEOUT
                msg = (
                    f"gang {job.key} bound {span(ses.now - bound)} ago but {unready} of {len(active)} pods "
                    f"are not Ready (ready-timeout {span(timeout)}); evicting it whole, requeued after "
                    f"{span(ses.cfg.ready_timeout_backoff)}"
                )
        if reason is None and facts is not None and facts.max_runtime is not None and start is not None:
            admitted = (facts.admitted_seconds or 0.0) + max(0.0, ses.now - start)
            if admitted >= facts.max_runtime:
                reason = Reason.MAX_RUNTIME
                msg = (
                    f"gang {job.key} admitted {span(admitted)}, its max-runtime {span(facts.max_runtime)}: stopping it"
                )
        if reason is None or msg is None:
            continue
        info = EvictInfo(Action.STALE_GANG_EVICTION, reason, None, msg, False, True)
        for p in active:
            ses.stmt.evict(p, info)


def annotate(ses: Session, res: CycleResult) -> None:
    """Statuses of pending Ray-native gangs: a RayService upgrade surge that cannot start says what would help;
    a gang past its max-pending-time says so (the blocking reason stays either way)."""
    for job in ses.jobs:
        facts = job.spec.raynative
        if facts is None:
            continue
        status = res.jobs.get(job.key)
        if status is None or status.scheduled or status.reason is Reason.MAX_PENDING_TIME_EXCEEDED:
            continue
        active = upgrade_surge_of(ses, job)
        if active is not None:
            status = JobStatus(
                job.key,
                False,
                status.reason,
                f"RayService upgrade surge beside {active.key} (may exceed its queue's quota up to the limit, and "
                f"preempt lower-priority work) cannot start: {status.message}; would help: a higher queue limit, "
                "lower-priority work in the queue, or upgradeStrategy None (in-place)",
                {**status.details, "upgradeSurgeOf": active.key},
            )
            res.jobs[job.key] = status
        if facts.max_pending_time is None:
            continue
        since = pending_since(ses, job)
        waited = ses.now - since
        if waited < facts.max_pending_time:
            continue
        details = dict(status.details)
        details.update(maxPendingExceeded=True, pendingSeconds=waited, maxPendingTimeSeconds=facts.max_pending_time)
        beyond = f"pending {span(waited)}, beyond its max-pending-time {span(facts.max_pending_time)}"
        action = facts.max_pending_action
        if action is None:
            res.jobs[job.key] = JobStatus(job.key, False, status.reason, f"{status.message}; {beyond}", details)
            continue
        what = f"its {job.spec.kind}" if job.spec.kind else "it"
        verb = f"suspending {what}" if action == "suspend" else f"marking it failed and suspending {what}"
        details.update(maxPendingAction=action, pendingSince=since, blockingReason=status.reason.value)
        if facts.max_pending_acted is not None and facts.max_pending_acted >= since:
            details["maxPendingActed"] = True
            verb = "suspended" if action == "suspend" else "marked failed"
            if facts.max_pending_refused is not None:
                verb = f"not suspended, reporting only: {facts.max_pending_refused}"
        else:
            res.stop_pending.append(StopPending(job.key, action, since, waited, facts.max_pending_time))
        message = (
            f"{beyond}: {verb} ({c.MAX_PENDING_ACTION}: {action}); blocked by {status.reason.value}: {status.message}"
        )
        res.jobs[job.key] = JobStatus(job.key, False, Reason.MAX_PENDING_TIME_EXCEEDED, message, details)


def pending_since(ses: Session, job: JobInfo) -> float:
    """When the gang's current wait began: its PodGroup's creation or last eviction, or, when all its pods are newer
    (a suspended Ray object resumed, KubeRay created them again), the oldest of its pods."""
    facts = job.spec.raynative
    since = facts.pending_since if facts is not None and facts.pending_since is not None else job.created_at
    if job.pods:
        since = max(since, min(ses.pods[p].created_at for p in job.pods))
    return since

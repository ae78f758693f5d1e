"""What the kai-ray operators tell the scheduler about a Ray workload, as the simulated world would report it.

Why: with ``EngineOptions.ray_facts`` the core sees what a live cluster's operators write on each PodGroup and pod
(Ray's busy/idle answer per node, the run's last checkpoint, pod readiness, the cluster a RayService upgrade
replaces). The simulator knows the truth of each workload, so it derives those reports from it here, at snapshot time.
"""

from __future__ import annotations

import math

from kai_ray.scheduler.decisions import Evict, Reason
from kai_ray.scheduler.snapshot import Job, PodPhase, RayActivity, RayNativeFacts
from kai_ray.sim.workloads import RUNNING, WorkloadBase


def report_ray_facts(w: WorkloadBase, t: float, checkpoint_interval: float, replaced: WorkloadBase | None) -> None:
    """Write onto ``w``'s job and pods what the operators would put in the snapshot at ``t``. ``checkpoint_interval``
    is the run's default (a workload's own wins); ``replaced`` is the active workload a RayService upgrade replaces."""
    job = w.job
    if job is None:
        return
    facts = job.raynative if job.raynative is not None else RayNativeFacts()
    facts.upgrade_of = replaced.job.key if replaced is not None and replaced.job is not None else None
    facts.last_checkpoint = None
    running = w.state == RUNNING and job.last_start is not None
    activity: RayActivity | None = None
    if running and not w.stuck:
        assert job.last_start is not None
        interval = w.checkpoint_interval if w.checkpoint_interval is not None else checkpoint_interval
        if interval > 0 and w.rate > 0:
            done = w.done + max(0.0, (t - w.last_update) - w.warmup_left) * w.rate
            since = (done - math.floor(done / interval + 1e-9) * interval) / w.rate
            facts.last_checkpoint = t - since
        phase = w.busy_phase(t)
        if phase is None or phase > 0 or w.activity is None:
            busy_since = t - phase if phase is not None else job.last_start
            activity = RayActivity(observed_at=t, busy_since=busy_since)
        else:
            busy, idle = w.activity
            idle_for = (t - job.last_start) % (busy + idle) - busy
            activity = RayActivity(observed_at=t, idle_seconds=max(idle_for, 1e-3))
    for pod in job.pods:
        if pod.phase is PodPhase.RUNNING:
            pod.ray_activity = activity
            pod.ready = not w.stuck or pod.is_ray_head
    job.raynative = facts


def on_bounded_wait(active: dict[str, WorkloadBase]) -> bool:
    """A running gang on a bounded-wait clock (half-started, or with a max-runtime): cycles must go on."""
    return any(
        w.stuck
        or (
            w.state == RUNNING
            and w.job is not None
            and w.job.raynative is not None
            and w.job.raynative.max_runtime is not None
        )
        for w in active.values()
    )


def note_evictions(job: Job, evictions: list[Evict], t: float, ready_timeout_backoff: float) -> None:
    """What the operators record when the core evicts ``job``'s pods: a ready-timeout eviction starts a backoff,
    and a whole gang evicted under a max-runtime banks the time it ran, so the next admission gets only the rest."""
    if any(e.reason is Reason.READY_TIMEOUT for e in evictions):
        backoff = job.raynative if job.raynative is not None else RayNativeFacts()
        backoff.backoff_until = t + ready_timeout_backoff
        job.raynative = backoff
    limit = job.raynative
    whole = any(e.whole_gang for e in evictions)
    if whole and limit is not None and limit.max_runtime is not None and job.last_start is not None:
        limit.admitted_seconds = (limit.admitted_seconds or 0.0) + (t - job.last_start)

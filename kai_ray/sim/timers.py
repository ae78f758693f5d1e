"""When a time-based rule can next change the scheduler core's answer, so the engine can skip idle ticks until then.

Why: the engine runs a cycle only when something changed, but some of the core's rules ripen with time alone (min
runtimes, preemption delay, stale-gang grace, a fair-share usage refresh, Ray's ready-timeout, backoff and
max-runtime). Each is a known instant; the earliest future one is when the next cycle can differ from the last.
"""

from __future__ import annotations

from kai_ray.scheduler.snapshot import PodPhase, Queue, SchedulerConfig
from kai_ray.sim.fair_share_usage import SimUsage
from kai_ray.sim.workloads import RUNNING, WorkloadBase


class TimeRules:
    """The core's time-based rules for one cluster's queues and config."""

    def __init__(self, config: SchedulerConfig, queues: list[Queue], ray_facts: bool) -> None:
        self.config = config
        self._ray_facts = ray_facts
        self._queue_by_name = {q.name: q for q in queues}
        self._min_runtimes_possible = bool(
            config.default_preempt_min_runtime
            or config.default_reclaim_min_runtime
            or any(q.preempt_min_runtime or q.reclaim_min_runtime for q in queues)
        )

    def next_wake(
        self,
        t: float,
        with_pending: dict[str, WorkloadBase],
        stale: dict[str, WorkloadBase],
        active: dict[str, WorkloadBase],
        usage: SimUsage | None,
    ) -> float | None:
        """The earliest future instant at which a time-based rule could change the core's answer."""
        cfg = self.config
        best: float | None = None

        def consider(x: float | None) -> None:
            nonlocal best
            if x is not None and x > t and (best is None or x < best):
                best = x

        for w in with_pending.values():
            job = w.job
            assert job is not None
            delay = job.preemption_delay if job.preemption_delay is not None else cfg.default_preemption_delay
            if delay:
                consider(job.created_at + delay)
        for w in stale.values():
            job = w.job
            assert job is not None
            grace = job.staleness_grace if job.staleness_grace is not None else cfg.default_staleness_grace
            if job.stale_since is not None and grace >= 0:
                consider(job.stale_since + grace)
        if usage is not None:
            consider(usage.next_refresh(t))  # a new usage can move fair shares: reclaim may become possible
        if self._ray_facts:
            for w in active.values():
                facts = w.job.raynative if w.job is not None else None
                if w.stuck and w.job is not None and w.job.last_start is not None:
                    timeout = facts.ready_timeout if facts is not None and facts.ready_timeout else None
                    timeout = timeout or cfg.default_ready_timeout
                    if timeout:
                        consider(w.job.last_start + timeout)
                if facts is not None and facts.backoff_until is not None:
                    consider(facts.backoff_until)
                start = w.job.last_start if w.job is not None and w.state == RUNNING else None
                if start is not None and facts is not None and facts.max_runtime is not None:
                    consider(start + facts.max_runtime - (facts.admitted_seconds or 0.0))
        if self._min_runtimes_possible:
            for w in active.values():
                job = w.job
                if job is None or w.state != RUNNING or job.last_start is None:
                    continue
                for v in self._min_runtimes(job.queue):
                    consider(job.last_start + v)
        return best

    def _min_runtimes(self, queue: str) -> set[float]:
        out = {self.config.default_preempt_min_runtime, self.config.default_reclaim_min_runtime}
        q = self._queue_by_name.get(queue)
        seen = 0
        while q is not None and seen < 64:
            for v in (q.preempt_min_runtime, q.reclaim_min_runtime):
                if v:
                    out.add(v)
            q = self._queue_by_name.get(q.parent) if q.parent else None
            seen += 1
        return {v for v in out if v and v > 0}


def update_stale(touched: dict[str, WorkloadBase], stale: dict[str, WorkloadBase], t: float) -> None:
    """Start or stop each touched workload's stale-gang clock (pods running, gang not): the grace counts from it."""
    for key, w in touched.items():
        job = w.job
        assert job is not None
        active = any(p.phase is PodPhase.RUNNING for p in job.pods)
        if active and w.state != RUNNING:
            if job.stale_since is None:
                job.stale_since = t
            stale[key] = w
        else:
            job.stale_since = None
            stale.pop(key, None)

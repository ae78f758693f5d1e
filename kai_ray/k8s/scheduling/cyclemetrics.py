"""A scheduling cycle's own metrics: how long each phase took, what is pending and in flight (KAI's names, where KAI
has the metric). Recorded after every cycle, leader or follower, apart from what the cycle decided."""

from __future__ import annotations

from kai_ray.k8s.base.metrics import SchedulerMetrics
from kai_ray.k8s.scheduling.entries import SnapshotView
from kai_ray.scheduler.decisions import CycleResult


def record_cycle(
    m: SchedulerMetrics,
    view: SnapshotView,
    result: CycleResult,
    marks: tuple[float, float, float, float, float],
    inflight: int,
) -> None:
    """The cycle's own metrics; ``marks``: ``perf_counter`` at its start, after the snapshot, after the core,
    after dispatch and at its end; ``inflight``: bindings sent and not yet confirmed."""
    t0, t1, t2, t3, t4 = marks
    m.cycles.inc()
    m.core_seconds.observe(t2 - t1)
    m.cycle_seconds.observe(t4 - t0)
    for phase, dt in (("snapshot", t1 - t0), ("core", t2 - t1), ("dispatch", t3 - t2), ("report", t4 - t3)):
        m.phase_seconds.labels(phase).inc(dt)
    opened = result.stats.get("open_seconds", 0.0)
    acted = sum(result.stats.get(f"{a}_seconds", 0.0) for a in view.snapshot.config.actions)
    for phase, dt in (
        ("snapshot", t1 - t0),
        ("session_open", opened),
        ("actions", acted),
        ("dispatch", t3 - t2),
        ("report", t4 - t3),
    ):
        m.phase_duration.labels(phase).observe(dt)
    m.pending_pods.set(max(0, view.pending - len(result.binds)))
    m.inflight_binds.set(inflight)
    m.e2e_latency.set(1000 * (t4 - t0))
    m.open_session_latency.set(1000 * opened)
    for action in view.snapshot.config.actions:
        took = result.stats.get(f"{action}_seconds")
        if took is not None:
            m.action_latency.labels(action).set(1000 * took)

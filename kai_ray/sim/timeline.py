"""What a run leaves behind for the report: its event log, allocation samples, findings and time integrals.

Why apart from the engine: recording never changes what the world does next. Keeping it here lets the engine read as
the world's rules alone, and lets the report's inputs be checked in one place.
"""

from __future__ import annotations

from typing import Any

from kai_ray.scheduler.decisions import Action, Bind, Evict, Reason
from kai_ray.scheduler.snapshot import Pod, PodPhase
from kai_ray.sim.cluster import Cluster
from kai_ray.sim.workloads import RUNNING, WorkloadBase

Samples = list[tuple[float, dict[str, float]]]


def gpus_held(w: WorkloadBase) -> float:
    """The GPUs of ``w``'s running pods: what it holds, whether or not it does work on them."""
    assert w.job is not None
    return sum(p.request.gpu for p in w.job.pods if p.phase is PodPhase.RUNNING)


def eviction_outcome(w: WorkloadBase, ray_aware: bool, suspend_kinds: tuple[str, ...]) -> str:
    """What an eviction did to its workload (called with the victims already gone, before the transition):
    ``shrink`` (the run goes on with fewer workers), ``restart`` (Ray-unaware: the run restarts from its
    checkpoint on the pods left), ``suspend`` (kai-ray suspends the owner of a lost gang until re-admitted),
    ``stop`` (the gang is lost; its pods are recreated and wait) or ``cleanup`` (the workload was not running)."""
    if w.state != RUNNING:
        return "cleanup"
    if w.min_satisfied():
        return "shrink" if ray_aware else "restart"
    return "suspend" if ray_aware and w.kind in suspend_kinds else "stop"


class Timeline:
    """The run's record, appended to as simulated time moves; only ever read back once the run is over."""

    def __init__(self, start: float, max_findings: int, track_idle: bool) -> None:
        self.events: list[dict[str, Any]] = []
        self.samples: Samples = []  # (t, allocated GPUs per leaf queue) after each change
        self.held_samples: Samples = []  # (t, GPUs per workload held without doing work); with track_idle
        # (t, workload, group, replicas, pods removed, GPUs removed)
        self.scales: list[tuple[float, str, str, int, int, float]] = []
        self.findings: dict[str, None] = {}
        self.alloc_integral = 0.0
        self.frag_integral = 0.0
        self.last_t = start
        self._max_findings = max_findings
        self._track_idle = track_idle

    def event(self, t: float, typ: str, w: WorkloadBase, reason: str, message: str, **extra: Any) -> None:
        self.events.append({"t": t, "type": typ, "workload": w.key, "reason": reason, "message": message, **extra})

    def finding(self, text: str) -> None:
        if len(self.findings) < self._max_findings:
            self.findings[text] = None

    def integrate(self, t: float, cluster: Cluster) -> None:
        """Add the time since the last instant to the allocation and fragmentation integrals."""
        dt = t - self.last_t
        if dt > 0:
            self.alloc_integral += cluster.allocated_gpus * dt
            self.frag_integral += cluster.fragmentation() * dt
            self.last_t = t

    def sample(self, t: float, queue_alloc: dict[str, float], active: dict[str, WorkloadBase]) -> None:
        snap = {q: round(v, 9) for q, v in queue_alloc.items() if abs(v) > 1e-9}
        _append_sample(self.samples, t, snap)
        if self._track_idle:
            held: dict[str, float] = {}
            for w in active.values():
                if w.job is None or (w.state == RUNNING and w.warmup_left - (t - w.last_update) <= 1e-9):
                    continue
                gpus = gpus_held(w)
                if gpus > 0:
                    held[w.key] = round(gpus, 9)
            _append_sample(self.held_samples, t, held)

    def cycle_events(
        self,
        evicted: dict[str, list[tuple[Pod, Evict]]],
        binds: dict[str, list[Bind]],
        active: dict[str, WorkloadBase],
        pods: dict[str, tuple[WorkloadBase, Pod]],
        t: float,
        ray_aware: bool,
        suspend_kinds: tuple[str, ...],
        record_binds: bool,
    ) -> None:
        """One event per evicted workload and action, then (with ``record_binds``) one per workload that got pods."""
        for key, items in evicted.items():
            w = active[key]
            by_action: dict[Action, list[Evict]] = {}
            for _, e in items:
                by_action.setdefault(e.action, []).append(e)
            for action, evs in by_action.items():
                typ = {Action.PREEMPT: "preempt", Action.RECLAIM: "reclaim"}.get(action, "evict")
                first = evs[0]
                preemptor = None
                if first.preemptor is not None and first.preemptor in active:
                    preemptor = active[first.preemptor].key
                elif first.preemptor is not None:
                    preemptor = first.preemptor
                self.event(
                    t,
                    typ,
                    w,
                    first.reason.value,
                    first.message,
                    pods=len(evs),
                    pod_names=[e.pod.split("/", 1)[-1] for e in evs[:10]],
                    gpus=round(sum(_req_gpu(e.pod, items) for e in evs), 6),
                    action=action.value,
                    preemptor=preemptor,
                    elastic=all(e.elastic for e in evs),
                    whole_gang=any(e.whole_gang for e in evs),
                    outcome=eviction_outcome(w, ray_aware, suspend_kinds),
                )
        if not record_binds:
            return
        for key, bs in binds.items():
            w = active[key]
            reasons = {b.reason for b in bs}
            reason = Reason.SCHEDULED if Reason.SCHEDULED in reasons else sorted(reasons, key=lambda r: r.value)[0]
            nodes = sorted({b.node for b in bs})
            self.event(
                t,
                "bind",
                w,
                reason.value,
                f"{len(bs)} pod(s) bound to {', '.join(nodes)}",
                pods=len(bs),
                gpus=round(sum(_pod_gpu(pods, b.pod) for b in bs), 6),
                nodes=nodes,
            )


def _append_sample(samples: Samples, t: float, snap: dict[str, float]) -> None:
    if samples and samples[-1][0] == t:
        samples[-1] = (t, snap)
    elif not samples or samples[-1][1] != snap:
        samples.append((t, snap))


def _req_gpu(uid: str, items: list[tuple[Pod, Evict]]) -> float:
    for pod, _ in items:
        if pod.uid == uid:
            return pod.request.gpu
    return 0.0


def _pod_gpu(pods: dict[str, tuple[WorkloadBase, Pod]], uid: str) -> float:
    owner = pods.get(uid)
    return owner[1].request.gpu if owner else 0.0

"""The simulation engine: simulated time, an event queue, and the real scheduler core run on a period.

Why event-driven with a scheduling period: KAI runs a cycle every ``--schedule-period`` (1 s); simulating every
tick of a week-long trace would cost hours, and an idle tick cannot change anything. So the engine keeps KAI's grid
(cycles only ever run at multiples of the period) but skips ticks when nothing changed since the last cycle and no
time-based rule (min runtimes, preemption delay, stale-gang grace) can have ripened. Same inputs, same outputs:
events are ordered by (time, kind, sequence), never by wall clock or hash order.

The world plays every controller around the scheduler: a bind makes a pod Running on its node, an eviction
deletes the pod (after ``termination_grace``) and KubeRay recreates it Pending; a workload runs while its gang
minimum runs, loses its progress since the last checkpoint when the gang is lost, and pays ``restart_cost`` on
each restart.
"""

from __future__ import annotations

import gc
import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kai_ray.bridge_dra import DraCatalog
from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.decisions import Action, Bind, CycleResult, Evict, Reason
from kai_ray.scheduler.device_ledger import Claim
from kai_ray.scheduler.incremental import IncrementalState
from kai_ray.scheduler.snapshot import (
    ZERO,
    Node,
    Pod,
    PodPhase,
    Queue,
    RayActivity,
    RayNativeFacts,
    Resources,
    SchedulerConfig,
    Snapshot,
    Topology,
)
from kai_ray.sim.cluster import Cluster
from kai_ray.sim.fair_share_usage import SimUsage, UsageRecord
from kai_ray.sim.workloads import COMPLETED, PENDING, RUNNING, SUSPENDED, RayWorkload, WorkloadBase

# event kinds, in the order they are handled at the same instant
COMPLETE, RELEASE, ARRIVE, SCALE, AUTOSCALE, CYCLE, WARM = range(7)


@dataclass
class EngineOptions:
    schedule_period: float = 1.0
    restart_cost: float = 60.0
    checkpoint_interval: float = 0.0
    autoscaler_period: float = 10.0
    termination_grace: float = 0.0
    elastic_speedup: str = "linear"
    until: float | None = None
    record_bind_events: bool = True
    max_findings: int = 50
    max_cycles: int = 1_000_000  # a bound on the loop: a scheduler that never settles stops the run with an error
    # Ray-aware evictions (kai-ray): elastic victims shrink their worker group and the run goes on; whole gangs of
    # these kinds are suspended. False (KAI, a plain scheduler): KubeRay recreates every evicted pod, and a running
    # job that loses a pod restarts from its last checkpoint.
    ray_aware: bool = True
    suspend_kinds: tuple[str, ...] = ("RayJob",)  # kai-ray's --suspend-kinds default
    track_idle: bool = False  # record windows where GPUs idle while workloads wait for GPUs
    # report what Ray knows to the scheduler as the operators do: each running Ray node's busy/idle state
    # (Pod.ray_activity), each run's last checkpoint, pod readiness, a RayService upgrade's active cluster
    ray_facts: bool = False


@dataclass
class SimResult:
    """Everything a run produced; :mod:`kai_ray.sim.run_metrics` turns it into numbers and JSON."""

    workloads: list[WorkloadBase]
    events: list[dict[str, Any]]
    samples: list[tuple[float, dict[str, float]]]  # (t, allocated GPUs per leaf queue) after each change
    total_gpus: float
    start: float
    end: float
    alloc_gpu_seconds: float
    frag_gpu_seconds: float  # integral of the fragmentation ratio over time
    queues: list[str]
    cycles: int
    cycle_seconds: float
    wall_seconds: float
    errors: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    nodes: int = 0
    scales: list[tuple[float, str, str, int, int, float]] = field(default_factory=list)
    idle_windows: list[dict[str, Any]] = field(default_factory=list)
    useful_gpu_seconds: float = 0.0
    gpu_quotas: dict[str, float] = field(default_factory=dict)  # leaf queue -> GPU quota (unlimited ones left out)
    # (t, GPUs per workload held without doing work: restart cost, a gang below its minimum); with track_idle
    held_samples: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    usage: UsageRecord | None = None  # time-based fair share: per-cycle fair share, allocation and usage


def _tick(t: float, period: float, strictly_after: bool = False) -> float:
    k = math.floor(t / period + 1e-9) + 1 if strictly_after else math.ceil(t / period - 1e-9)
    return round(k * period, 9)


class Engine:
    """An in-memory cluster over simulated time. Add workloads, then :meth:`run`."""

    def __init__(
        self,
        nodes: list[Node],
        queues: list[Queue],
        config: SchedulerConfig | None = None,
        options: EngineOptions | None = None,
        topologies: list[Topology] | None = None,
    ) -> None:
        self.nodes = nodes
        self.queues = queues
        self.config = config or SchedulerConfig()
        self.opt = options or EngineOptions()
        self.topologies = topologies or []
        self.cluster = Cluster(nodes)
        self.dra: DraCatalog | None = None  # DRA devices and claim templates (kai_ray.sim.run sets it)
        self.claims: dict[str, Claim] = {}  # live claims made for pods, with the allocation of each bound one
        parents = {q.parent for q in queues if q.parent}
        self.leaf_queues = [q.name for q in queues if q.name not in parents]
        self._queue_by_name = {q.name: q for q in queues}
        self.workloads: list[WorkloadBase] = []
        self.active: dict[str, WorkloadBase] = {}  # by job key, arrived and not completed
        self.with_pending: dict[str, WorkloadBase] = {}  # active workloads with a Pending pod
        # pending workloads the core found bigger than every eligible node: nodes never change here, so nothing but
        # a new cycle for someone else will look at them again
        self.hopeless: set[str] = set()
        self.stale: dict[str, WorkloadBase] = {}
        self.pods: dict[str, tuple[WorkloadBase, Pod]] = {}  # pod uid -> owner, pod (Running or Releasing)
        self.events: list[dict[str, Any]] = []
        # (t, workload, group, replicas, pods removed, GPUs removed)
        self.scales: list[tuple[float, str, str, int, int, float]] = []
        self.samples: list[tuple[float, dict[str, float]]] = []
        self.queue_alloc: dict[str, float] = {}
        self.errors: list[str] = []
        self.findings: dict[str, None] = {}
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self._cycle_at: float | None = None
        self._last_cycle: float | None = None
        self._dirty = False
        self._last_t = 0.0
        self.alloc_integral = 0.0
        self.frag_integral = 0.0
        self.cycles = 0
        self.cycle_seconds = 0.0
        self.now = 0.0
        self._autoscale_armed: set[int] = set()
        self._evicted_now: set[str] = set()
        self._timers_possible = bool(
            self.config.default_preempt_min_runtime
            or self.config.default_reclaim_min_runtime
            or any(q.preempt_min_runtime or q.reclaim_min_runtime for q in queues)
        )
        self.progress: Callable[[float, int, int], None] | None = None
        self._completed = 0
        self.idle_windows: list[dict[str, Any]] = []
        self._idle_open: dict[str, Any] | None = None
        self.held_samples: list[tuple[float, dict[str, float]]] = []
        # time-based fair share (config.usage_params): allocations per leaf queue feed the usage ledger
        self.usage: SimUsage | None = None
        if self.config.usage_params is not None:
            self.usage = SimUsage(self.config.usage_params, self.config.k_value, queues, nodes)
        self.queue_res: dict[str, Resources] = {}
        # the incremental session: what one cycle built and the next keeps, told of every PodGroup an event
        # touches (the nodes and queues never change here); None builds every cycle's session from scratch
        self.state: IncrementalState | None = IncrementalState()

    # ------------------------------------------------------------------ setup
    def add(self, w: WorkloadBase) -> None:
        self.workloads.append(w)
        self._push(w.arrive_at, ARRIVE, w)

    def _push(self, t: float, kind: int, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, kind, self._seq, payload))

    def _want_cycle(self, t: float, strictly_after: bool = False) -> None:
        at = _tick(t, self.opt.schedule_period, strictly_after)
        if self._cycle_at is not None and self._cycle_at <= at:
            return
        self._cycle_at = at
        self._push(at, CYCLE, at)

    # ------------------------------------------------------------------ metrics bookkeeping
    def _integrate(self, t: float) -> None:
        dt = t - self._last_t
        if dt > 0:
            self.alloc_integral += self.cluster.allocated_gpus * dt
            self.frag_integral += self.cluster.fragmentation() * dt
            self._last_t = t

    def _sample(self, t: float) -> None:
        snap = {q: round(v, 9) for q, v in self.queue_alloc.items() if abs(v) > 1e-9}
        self._append_sample(self.samples, t, snap)
        if self.opt.track_idle:
            held: dict[str, float] = {}
            for w in self.active.values():
                if w.job is None or (w.state == RUNNING and w.warmup_left - (t - w.last_update) <= 1e-9):
                    continue
                gpus = self._gpus_held(w)
                if gpus > 0:
                    held[w.key] = round(gpus, 9)
            self._append_sample(self.held_samples, t, held)

    @staticmethod
    def _append_sample(samples: list[tuple[float, dict[str, float]]], t: float, snap: dict[str, float]) -> None:
        if samples and samples[-1][0] == t:
            samples[-1] = (t, snap)
        elif not samples or samples[-1][1] != snap:
            samples.append((t, snap))

    def _gpus_held(self, w: WorkloadBase) -> float:
        assert w.job is not None
        return sum(p.request.gpu for p in w.job.pods if p.phase is PodPhase.RUNNING)

    # ------------------------------------------------------------------ pods on nodes
    def _bind(self, w: WorkloadBase, pod: Pod, node: str, group: str | None, t: float) -> None:
        pod.gpu_group = self.cluster.bind(pod, node, group)
        pod.node = node
        pod.phase = PodPhase.RUNNING
        pod.start_time = t
        self.pods[pod.uid] = (w, pod)
        self.queue_alloc[w.queue] = self.queue_alloc.get(w.queue, 0.0) + pod.request.gpu
        self.queue_res[w.queue] = self.queue_res.get(w.queue, ZERO) + pod.request

    def _unbind(self, w: WorkloadBase, pod: Pod) -> None:
        assert pod.node is not None
        self.cluster.unbind(pod, pod.node, pod.gpu_group)
        self.pods.pop(pod.uid, None)
        self.queue_alloc[w.queue] = self.queue_alloc.get(w.queue, 0.0) - pod.request.gpu
        self.queue_res[w.queue] = self.queue_res.get(w.queue, ZERO) - pod.request

    def _refresh_pending(self, w: WorkloadBase) -> None:
        assert w.job is not None
        key = w.job.key
        if w.state != COMPLETED and any(p.phase is PodPhase.PENDING for p in w.job.pods):
            self.with_pending[key] = w
        else:
            self.with_pending.pop(key, None)
            self.hopeless.discard(key)

    def _can_progress(self) -> bool:
        return len(self.with_pending) > len(self.hopeless) or self._stuck()

    # ------------------------------------------------------------------ the loop
    @property
    def drained(self) -> bool:
        """No event is left: the run is over, and ``now`` is the time of its last event."""
        return not self._heap

    def run(self) -> SimResult:
        """Run to the end (or ``until``). The world's long-lived objects are frozen out of the cyclic GC while it
        runs: the core creates and drops many objects per cycle, and full collections would rescan them all."""
        gc.collect()
        gc.freeze()
        try:
            return self._run()
        finally:
            gc.unfreeze()

    def _run(self) -> SimResult:
        wall0 = time.perf_counter()
        first = min((w.arrive_at for w in self.workloads), default=0.0)
        self._last_t = first
        until = self.opt.until
        while self._heap:
            t, kind, _, payload = self._heap[0]
            if self._obsolete(kind, payload):
                heapq.heappop(self._heap)  # a superseded completion or cycle: time does not move for it
                continue
            if until is not None and t > until:
                break
            if self.cycles >= self.opt.max_cycles:
                self.errors.append(f"t={t:g}: stopped after {self.cycles} scheduling cycles (max_cycles)")
                break
            self._integrate(t)
            self.now = t
            while self._heap and self._heap[0][0] == t:
                _, kind, _, payload = heapq.heappop(self._heap)
                if kind == ARRIVE:
                    self._arrive(payload, t)
                elif kind == COMPLETE:
                    w, version = payload
                    if version == w.version and w.state == RUNNING:
                        self._complete(w, t)
                elif kind == RELEASE:
                    self._release(payload, t)
                elif kind == AUTOSCALE:
                    self._autoscale(payload, t)
                elif kind == SCALE:
                    self._scale(payload, t)
                elif kind == CYCLE and payload == self._cycle_at:
                    self._cycle_at = None
                    self._cycle(t)
            self._sample(t)
            if self.usage is not None:
                self.usage.observe(t, self.queue_res)
            if self._dirty and self._can_progress():
                self._want_cycle(t, strictly_after=self._last_cycle == t)
            self._dirty = False
            if self.opt.track_idle:
                self._idle_check(t)
        end = self.now
        if until is not None:
            end = max(end, until) if not self._heap else until
            self._integrate(end)
        if self.opt.track_idle:
            self._idle_close(end)
        for w in self.workloads:
            if w.state == RUNNING:
                w.advance(end, self._gpus_held(w))
            w.close(end)
        return SimResult(
            workloads=self.workloads,
            events=self.events,
            samples=self.samples,
            total_gpus=self.cluster.total_gpus,
            start=first,
            end=end,
            alloc_gpu_seconds=self.alloc_integral,
            frag_gpu_seconds=self.frag_integral,
            queues=self.leaf_queues,
            cycles=self.cycles,
            cycle_seconds=self.cycle_seconds,
            wall_seconds=time.perf_counter() - wall0,
            errors=self.errors,
            findings=list(self.findings),
            nodes=len(self.nodes),
            scales=self.scales,
            idle_windows=self.idle_windows,
            useful_gpu_seconds=sum(w.useful_gpu_seconds for w in self.workloads),
            held_samples=self.held_samples,
            gpu_quotas={q.name: q.quota.gpu for q in self.queues if q.name in self.leaf_queues and q.quota.gpu >= 0},
            usage=self.usage.close(end) if self.usage is not None else None,
        )

    def _obsolete(self, kind: int, payload: Any) -> bool:
        if kind in (COMPLETE, WARM):
            w, version = payload
            return bool(version != w.version or w.state != RUNNING)
        return kind == CYCLE and payload != self._cycle_at

    # ------------------------------------------------------------------ handlers
    def _changed(self, w: WorkloadBase) -> None:
        """Tell the incremental session that ``w``'s PodGroup or pods changed (or that it is gone)."""
        if self.state is not None and w.job is not None:
            self.state.job_changed(w.job.key)

    def _arrive(self, w: WorkloadBase, t: float) -> None:
        if isinstance(w, RayWorkload) and w.user_suspended:
            w.set_state(t, SUSPENDED)
            message = f"{w.kind} {w.key}: spec.suspend is true: KubeRay creates no pods until it is resumed"
            self._event(t, "suspended", w, "Suspended", message)
            return
        job = w.create(t)
        self._changed(w)
        w.last_update = t
        w.set_state(t, PENDING)
        self.active[job.key] = w
        self._refresh_pending(w)
        self._dirty = True
        for problem in getattr(w, "problems", []):
            self._finding(f"{w.key}: {problem}")

    def _complete(self, w: WorkloadBase, t: float) -> None:
        assert w.job is not None
        self._changed(w)
        w.advance(t, self._gpus_held(w))
        for pod in list(w.job.pods):
            if pod.phase in (PodPhase.RUNNING, PodPhase.RELEASING):
                self._unbind(w, pod)
        w.job.pods = []
        w.completed_at = t
        w.set_state(t, COMPLETED)
        w.version += 1
        del self.active[w.job.key]
        self.with_pending.pop(w.job.key, None)
        self.hopeless.discard(w.job.key)
        self.stale.pop(w.job.key, None)
        self._completed += 1
        self._event(t, "complete", w, "Completed", f"{w.kind} {w.key} finished its work")
        self._dirty = True
        if self.progress is not None:
            self.progress(t, self._completed, len(self.workloads))

    def _release(self, payload: tuple[WorkloadBase, Pod], t: float) -> None:
        w, pod = payload
        if pod.phase is PodPhase.RELEASING:
            self._changed(w)
            w.advance(t, self._gpus_held(w))
            self._unbind(w, pod)
            assert w.job is not None
            if pod in w.job.pods:
                w.job.pods.remove(pod)
            pod.phase = PodPhase.FAILED
            self._dirty = True

    def add_scale(self, w: RayWorkload, at: float, group: str, replicas: int) -> None:
        """A scripted replica change of one worker group at ``at`` (Ray Serve autoscaling, a user's edit)."""
        w.scripted = True
        self._push(at, SCALE, (w, group, replicas))

    def _scale(self, payload: tuple[RayWorkload, str, int], t: float) -> None:
        w, group, replicas = payload
        if w.state in (COMPLETED, SUSPENDED):
            return
        if w.job is not None:
            w.advance(t, self._gpus_held(w))
        removed = w.scale_to(t, group, replicas)
        self._changed(w)
        gpus = sum(p.request.gpu for p in removed)
        for pod in removed:
            self._unbind(w, pod)
            pod.phase = PodPhase.SUCCEEDED
        if w.job is not None:
            if removed:
                self._transition(w, t)
            self._refresh_pending(w)
            self._dirty = True
            self.scales.append((t, w.key, group, replicas, len(removed), gpus))

    def _autoscale(self, w: WorkloadBase, t: float) -> None:
        self._autoscale_armed.discard(id(w))
        if w.state == COMPLETED or w.job is None:
            return
        if isinstance(w, RayWorkload) and w.autoscale(t):
            self._changed(w)
            self._refresh_pending(w)
            self._dirty = True
        self._arm_autoscaler(w, t)

    def _arm_autoscaler(self, w: WorkloadBase, t: float) -> None:
        if not isinstance(w, RayWorkload) or not w.autoscaling or id(w) in self._autoscale_armed:
            return
        if w.state == RUNNING and w.wants_more():
            self._autoscale_armed.add(id(w))
            self._push(t + self.opt.autoscaler_period, AUTOSCALE, w)

    def _finding(self, text: str) -> None:
        if len(self.findings) < self.opt.max_findings:
            self.findings[text] = None

    def _event(self, t: float, typ: str, w: WorkloadBase, reason: str, message: str, **extra: Any) -> None:
        self.events.append({"t": t, "type": typ, "workload": w.key, "reason": reason, "message": message, **extra})

    # ------------------------------------------------------------------ one scheduling cycle
    def _stuck(self) -> bool:
        """A running gang on a bounded-wait clock (half-started, or with a max-runtime): cycles must go on."""
        return self.opt.ray_facts and any(
            w.stuck
            or (
                w.state == RUNNING
                and w.job is not None
                and w.job.raynative is not None
                and w.job.raynative.max_runtime is not None
            )
            for w in self.active.values()
        )

    def _cycle(self, t: float) -> None:
        if not self.with_pending and not self._stuck():
            return
        snap = self.snapshot(t)
        self._last_cycle = t
        t0 = time.perf_counter()
        res = run_cycle(snap, self.state)
        self.cycle_seconds += time.perf_counter() - t0
        self.cycles += 1
        for f in res.findings:
            self._finding(f"{f.kind} {f.name} {f.field}: {f.message}".replace("  ", " "))
        touched = self._apply(res, t)
        if self.usage is not None:
            self.usage.after_cycle(t, res)
        self._after_cycle(res, touched, t)

    def snapshot(self, t: float) -> Snapshot:
        """The world as the scheduler core sees it at ``t``: every node and queue, every arrived, unfinished job."""
        if self.opt.ray_facts:
            for w in self.active.values():
                self._report_ray_facts(w, t)
                self._changed(w)  # Ray's answers and each run's checkpoint move with time
        jobs = [w.job for w in self.active.values() if w.job is not None]
        return Snapshot(
            nodes=self.nodes,
            queues=self.queues,
            jobs=jobs,
            now=t,
            topologies=self.topologies,
            config=self.config,
            usage=self.usage.for_cycle(t) if self.usage is not None else None,
            devices=self.dra.devices if self.dra is not None else [],
            claims=self._live_claims() if self.dra is not None else [],
        )

    def _live_claims(self) -> list[Claim]:
        """The claims of the pods that exist (a claim made from a template goes with its pod, releasing its devices);
        a new pod's claims are made from its template, unallocated."""
        live: dict[str, Claim] = {}
        for w in self.active.values():
            if w.job is None or not isinstance(w, RayWorkload):
                continue
            for pod in w.job.pods:
                if not pod.claims or pod.phase in (PodPhase.SUCCEEDED, PodPhase.FAILED):
                    continue
                for key, requests in w.claim_requests(pod).items():
                    live[key] = self.claims.get(key) or Claim(key=key, requests=requests)
        self.claims = live
        return list(live.values())

    def _active_workload(self, key: str) -> WorkloadBase | None:
        return next((w for w in self.active.values() if w.key == key), None)

    def _report_ray_facts(self, w: WorkloadBase, t: float) -> None:
        """What the operators would put in the snapshot for ``w`` at ``t``: Ray's busy/idle answer per running pod,
        the time of the run's last checkpoint, its pods' readiness, the active cluster a RayService upgrade replaces."""
        job = w.job
        if job is None:
            return
        facts = job.raynative if job.raynative is not None else RayNativeFacts()
        old = self._active_workload(w.upgrade_of) if w.upgrade_of is not None and w.served_at is None else None
        facts.upgrade_of = old.job.key if old is not None and old.job is not None else None
        facts.last_checkpoint = None
        running = w.state == RUNNING and job.last_start is not None
        activity: RayActivity | None = None
        if running and not w.stuck:
            assert job.last_start is not None
            interval = w.checkpoint_interval if w.checkpoint_interval is not None else self.opt.checkpoint_interval
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

    def _apply(self, res: CycleResult, t: float) -> dict[str, WorkloadBase]:
        touched: dict[str, WorkloadBase] = {}
        evicted: dict[str, list[tuple[Pod, Evict]]] = {}
        for e in res.evictions:
            owner = self.pods.get(e.pod)
            if owner is None or owner[1].phase is not PodPhase.RUNNING:
                self.errors.append(f"t={t:g}: eviction of {e.pod} ({e.job}), which is not running")
                continue
            w, pod = owner
            assert w.job is not None
            w.advance(t, self._gpus_held(w))
            evicted.setdefault(w.job.key, []).append((pod, e))
            touched[w.job.key] = w
            if self.opt.termination_grace > 0:
                pod.phase = PodPhase.RELEASING
                w.wasted_gpu_seconds += pod.request.gpu * self.opt.termination_grace
                self._push(t + self.opt.termination_grace, RELEASE, (w, pod))
            else:
                self._unbind(w, pod)
                w.job.pods.remove(pod)
                pod.phase = PodPhase.FAILED
        binds: dict[str, list[Bind]] = {}
        for b in res.binds:
            owner_w = self.active.get(b.job)
            pod_obj = next((p for p in owner_w.job.pods if p.uid == b.pod), None) if owner_w and owner_w.job else None
            if owner_w is None or pod_obj is None or pod_obj.phase is not PodPhase.PENDING:
                self.errors.append(f"t={t:g}: bind of {b.pod} ({b.job}), which is not a pending pod")
                continue
            why = self.cluster.fits(pod_obj, b.node, b.gpu_group)
            if why is not None:
                if not b.pipelined:
                    self.errors.append(f"t={t:g}: bind of {b.pod} to {b.node} rejected: {why}")
                continue
            owner_w.advance(t, self._gpus_held(owner_w))
            self._bind(owner_w, pod_obj, b.node, b.gpu_group, t)
            for alloc in b.claims:  # the adapter's part of DRA: write the claim's allocation before binding
                claim = self.claims.get(alloc.claim)
                if claim is not None and claim.allocation is None:
                    per: dict[str, tuple[str, ...]] = {}
                    for req, dev in alloc.devices:
                        per[req] = (*per.get(req, ()), dev)
                    claim.allocation = per
            binds.setdefault(b.job, []).append(b)
            touched[b.job] = owner_w
        self._record(evicted, binds, t)
        self._evicted_now = set(evicted)
        for key, items in evicted.items():
            job = touched[key].job
            if job is None:
                continue
            if any(e.reason is Reason.READY_TIMEOUT for _, e in items):
                backoff = job.raynative if job.raynative is not None else RayNativeFacts()
                backoff.backoff_until = t + self.config.ready_timeout_backoff
                job.raynative = backoff
            limit = job.raynative
            whole = any(e.whole_gang for _, e in items)
            if whole and limit is not None and limit.max_runtime is not None and job.last_start is not None:
                limit.admitted_seconds = (limit.admitted_seconds or 0.0) + (t - job.last_start)  # as the operator
        for key, items in evicted.items():
            w = touched[key]
            w.evicted_pods += len(items)
            w.replace_evicted(t, [(pod, e.elastic and self.opt.ray_aware) for pod, e in items])
        for w in touched.values():  # pods bound, evicted or recreated; start, stale and backoff times follow
            self._changed(w)
        return touched

    def _record(self, evicted: dict[str, list[tuple[Pod, Evict]]], binds: dict[str, list[Bind]], t: float) -> None:
        for key, items in evicted.items():
            w = self.active[key]
            by_action: dict[Action, list[Evict]] = {}
            for _, e in items:
                by_action.setdefault(e.action, []).append(e)
            for action, evs in by_action.items():
                typ = {Action.PREEMPT: "preempt", Action.RECLAIM: "reclaim"}.get(action, "evict")
                first = evs[0]
                outcome = self._outcome(w)
                preemptor = None
                if first.preemptor is not None and first.preemptor in self.active:
                    preemptor = self.active[first.preemptor].key
                elif first.preemptor is not None:
                    preemptor = first.preemptor
                self._event(
                    t,
                    typ,
                    w,
                    first.reason.value,
                    first.message,
                    pods=len(evs),
                    pod_names=[e.pod.split("/", 1)[-1] for e in evs[:10]],
                    gpus=round(sum(self._req_gpu(e.pod, items) for e in evs), 6),
                    action=action.value,
                    preemptor=preemptor,
                    elastic=all(e.elastic for e in evs),
                    whole_gang=any(e.whole_gang for e in evs),
                    outcome=outcome,
                )
        if not self.opt.record_bind_events:
            return
        for key, bs in binds.items():
            w = self.active[key]
            reasons = {b.reason for b in bs}
            reason = Reason.SCHEDULED if Reason.SCHEDULED in reasons else sorted(reasons, key=lambda r: r.value)[0]
            nodes = sorted({b.node for b in bs})
            self._event(
                t,
                "bind",
                w,
                reason.value,
                f"{len(bs)} pod(s) bound to {', '.join(nodes)}",
                pods=len(bs),
                gpus=round(sum(self._pod_gpu(w, b.pod) for b in bs), 6),
                nodes=nodes,
            )

    def _outcome(self, w: WorkloadBase) -> str:
        """What an eviction did to its workload (called with the victims already gone, before the transition):
        ``shrink`` (the run goes on with fewer workers), ``restart`` (Ray-unaware: the run restarts from its
        checkpoint on the pods left), ``suspend`` (kai-ray suspends the owner of a lost gang until re-admitted),
        ``stop`` (the gang is lost; its pods are recreated and wait) or ``cleanup`` (the workload was not running)."""
        if w.state != RUNNING:
            return "cleanup"
        if w.min_satisfied():
            return "shrink" if self.opt.ray_aware else "restart"
        return "suspend" if self.opt.ray_aware and w.kind in self.opt.suspend_kinds else "stop"

    @staticmethod
    def _req_gpu(uid: str, items: list[tuple[Pod, Evict]]) -> float:
        for pod, _ in items:
            if pod.uid == uid:
                return pod.request.gpu
        return 0.0

    def _pod_gpu(self, w: WorkloadBase, uid: str) -> float:
        owner = self.pods.get(uid)
        return owner[1].request.gpu if owner else 0.0

    def _after_cycle(self, res: CycleResult, touched: dict[str, WorkloadBase], t: float) -> None:
        changed = bool(touched)
        for key, w in touched.items():
            survived = key in self._evicted_now and w.state == RUNNING and w.min_satisfied()
            if survived and not self.opt.ray_aware:
                w.restart_in_place(t, self.opt.checkpoint_interval)
            self._transition(w, t)
            self._refresh_pending(w)
            if survived and self.opt.ray_aware:
                w.shrinks += 1
        for key, w in list(self.with_pending.items()):
            st = res.jobs.get(key)
            if st is None:
                continue
            if w.state == PENDING:
                if not st.scheduled:
                    if not w.pending_log or w.pending_log[-1][1] != st.reason.value:
                        w.pending_log.append((t, st.reason.value, st.message))
                    w.pending_reason = st.reason.value
                    w.pending_message = st.message
                    w.last_pending_reason = st.reason.value
                if st.reason is Reason.NEVER_FITS and not w.running_pods_any():
                    self.hopeless.add(key)
                else:
                    self.hopeless.discard(key)
            else:
                w.pending_reason = None
                w.pending_message = None
        for w in touched.values():
            if w.state != PENDING:
                w.pending_reason = None
                w.pending_message = None
        self._update_stale(touched, t)
        # Another cycle next tick only if this one can have left work for it: evictions (victims gone, pods
        # recreated) or a job that got pods and still has pending ones (elastic growth goes on). Otherwise the
        # next cycle would see exactly what this one saw, minus the room it just used.
        followup = bool(self._evicted_now) or any(key in self.with_pending for key in touched)
        if changed and followup and self._can_progress():
            self._want_cycle(t, strictly_after=True)
        elif self._can_progress():
            wake = self._next_timer(t)
            if wake is not None:
                self._want_cycle(wake, strictly_after=True)

    # ------------------------------------------------------------------ idle GPUs while workloads wait
    def _idle_check(self, t: float) -> None:
        """Open, extend or close an idle window: GPUs are free while workloads wait for GPUs. For each waiting
        workload: the GPUs of its next step (the pods its gang minimum lacks, else one elastic pod) and whether
        that step would fit on the free capacity as it stands."""
        waiting: dict[str, tuple[float, bool]] = {}
        if self.cluster.free_gpus > 1e-9:
            for w in self.with_pending.values():
                if w.state == COMPLETED or w.job is None:
                    continue
                step = w.missing_pods()
                need = sum(p.request.gpu for p in step)
                if need > 0:
                    waiting[w.key] = (need, self.cluster.fits_all(step))
        cur = self._idle_open
        if cur is not None and cur["waiting"] != waiting:
            self._idle_close(t)
            cur = None
        if waiting and cur is None:
            reasons = {w.key: w.pending_reason for w in self.with_pending.values() if w.key in waiting}
            self._idle_open = {"from": t, "idle_gpus": self.cluster.free_gpus, "waiting": waiting, "reasons": reasons}
        elif cur is not None:
            cur["idle_gpus"] = max(cur["idle_gpus"], self.cluster.free_gpus)

    def idle_latency(self) -> float:
        """Idle spans no longer than this are latency, not idleness: elastic growth takes a cycle per step, a
        pipelined bind waits a cycle for its victims, and the Ray autoscaler asks for a worker per period."""
        return max(2 * self.opt.schedule_period, self.opt.autoscaler_period)

    def _idle_close(self, t: float) -> None:
        cur, self._idle_open = self._idle_open, None
        if cur is None or t - cur["from"] <= self.idle_latency() + 1e-9:
            return  # the scheduler's and the autoscaler's own latency, not an idle window
        self.idle_windows.append(
            {
                "from": cur["from"],
                "to": t,
                "idle_gpus": round(cur["idle_gpus"], 6),
                "fits": any(fits for _, fits in cur["waiting"].values()),
                "waiting": [
                    {"workload": k, "needs_gpus": need, "fits": fits, "pending_reason": cur["reasons"].get(k)}
                    for k, (need, fits) in sorted(cur["waiting"].items())
                ],
            }
        )

    def _transition(self, w: WorkloadBase, t: float) -> None:
        """After binds/evictions: start, restart, lose the gang, or change speed; (re)schedule completion."""
        assert w.job is not None
        sat = w.min_satisfied()
        if w.state == RUNNING and not sat:
            w.preemptions += 1
            w.preempted_at.append(t)
            w.lose_work(self.opt.checkpoint_interval, t)
            w.rate = 0.0
            w.set_state(t, PENDING)
            w.version += 1
        elif w.state == PENDING and sat:
            if w.first_running_at is None:
                w.first_running_at = t
            else:
                w.restarts += 1
                w.warmup_left = w.restart_cost
            w.job.last_start = t
            w.set_state(t, RUNNING)
            if w.startup_failures > 0:  # this placement never turns Ready: it holds its GPUs and does nothing
                w.startup_failures -= 1
                w.stuck = True
            elif w.upgrade_of is not None and w.served_at is None:
                w.served_at = t  # the new cluster serves: KubeRay switches traffic and deletes the old one
                old = self._active_workload(w.upgrade_of)
                if old is not None:
                    self._complete(old, t)
        if w.state == RUNNING:
            new_rate = w.worker_rate() if self.opt.elastic_speedup == "linear" else 1.0
            w.rate = new_rate
            w.version += 1
            eta = w.eta(t)
            if eta is not None:
                self._push(eta, COMPLETE, (w, w.version))
            if self.opt.track_idle and w.warmup_left > 0:
                self._push(t + w.warmup_left, WARM, (w, w.version))  # a sample when the restart cost is paid
            self._arm_autoscaler(w, t)

    def _update_stale(self, touched: dict[str, WorkloadBase], t: float) -> None:
        for key, w in touched.items():
            job = w.job
            assert job is not None
            active = any(p.phase is PodPhase.RUNNING for p in job.pods)
            if active and w.state != RUNNING:
                if job.stale_since is None:
                    job.stale_since = t
                self.stale[key] = w
            else:
                job.stale_since = None
                self.stale.pop(key, None)

    def _next_timer(self, t: float) -> float | None:
        """The earliest future instant at which a time-based rule could change the core's answer."""
        cfg = self.config
        best: float | None = None

        def consider(x: float | None) -> None:
            nonlocal best
            if x is not None and x > t and (best is None or x < best):
                best = x

        for w in self.with_pending.values():
            job = w.job
            assert job is not None
            delay = job.preemption_delay if job.preemption_delay is not None else cfg.default_preemption_delay
            if delay:
                consider(job.created_at + delay)
        for w in self.stale.values():
            job = w.job
            assert job is not None
            grace = job.staleness_grace if job.staleness_grace is not None else cfg.default_staleness_grace
            if job.stale_since is not None and grace >= 0:
                consider(job.stale_since + grace)
        if self.usage is not None:
            consider(self.usage.next_refresh(t))  # a new usage can move fair shares: reclaim may become possible
        if self.opt.ray_facts:
            for w in self.active.values():
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
        if self._timers_possible:
            for w in self.active.values():
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

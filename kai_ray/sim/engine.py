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

The engine holds those rules; what does not decide what happens next lives beside it, so each reads as one job:
the clock (:mod:`~kai_ray.sim.event_queue`), the record (:mod:`~kai_ray.sim.timeline`,
:mod:`~kai_ray.sim.idle_windows`), when a time-based rule ripens (:mod:`~kai_ray.sim.timers`), why workloads wait
(:mod:`~kai_ray.sim.pending_reasons`) and what the operators and adapters report (:mod:`~kai_ray.sim.ray_facts`,
:mod:`~kai_ray.sim.simulated_claims`).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.decisions import Bind, CycleResult, Evict
from kai_ray.scheduler.device_ledger import Claim
from kai_ray.scheduler.incremental import IncrementalState
from kai_ray.scheduler.snapshot import (
    ZERO,
    Node,
    Pod,
    PodPhase,
    Queue,
    Resources,
    SchedulerConfig,
    Snapshot,
    Topology,
)
from kai_ray.sim.cluster import Cluster
from kai_ray.sim.event_queue import ARRIVE, AUTOSCALE, COMPLETE, CYCLE, RELEASE, SCALE, WARM, EventQueue
from kai_ray.sim.fair_share_usage import SimUsage, UsageRecord
from kai_ray.sim.idle_windows import IdleWindows
from kai_ray.sim.pending_reasons import note_pending_reasons
from kai_ray.sim.ray_facts import note_evictions, on_bounded_wait, report_ray_facts
from kai_ray.sim.simulated_claims import live_claims, write_allocations
from kai_ray.sim.timeline import Timeline, gpus_held
from kai_ray.sim.timers import TimeRules, update_stale
from kai_ray.sim.workloads import COMPLETED, PENDING, RUNNING, SUSPENDED, WorkloadBase

if TYPE_CHECKING:  # the engine asks workloads through WorkloadBase: a trace replay never imports Ray or DRA
    from kai_ray.bridge_dra import DraCatalog
    from kai_ray.sim.ray_workload import RayWorkload


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
        self.workloads: list[WorkloadBase] = []
        self.active: dict[str, WorkloadBase] = {}  # by job key, arrived and not completed
        self.with_pending: dict[str, WorkloadBase] = {}  # active workloads with a Pending pod
        # pending workloads the core found bigger than every eligible node: nodes never change here, so nothing but
        # a new cycle for someone else will look at them again
        self.hopeless: set[str] = set()
        self.stale: dict[str, WorkloadBase] = {}
        self.pods: dict[str, tuple[WorkloadBase, Pod]] = {}  # pod uid -> owner, pod (Running or Releasing)
        self.timeline = Timeline(0.0, self.opt.max_findings, self.opt.track_idle)
        self.queue_alloc: dict[str, float] = {}
        self.errors: list[str] = []
        self.event_queue = EventQueue(self.opt.schedule_period)
        self._last_cycle: float | None = None
        self._dirty = False
        self.cycles = 0
        self.cycle_seconds = 0.0
        self.now = 0.0
        self._autoscale_armed: set[int] = set()
        self._evicted_now: set[str] = set()
        self.time_rules = TimeRules(self.config, queues, self.opt.ray_facts)
        self.progress: Callable[[float, int, int], None] | None = None
        self._completed = 0
        self.idle = IdleWindows(self.idle_latency())
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
        self.event_queue.push(w.arrive_at, ARRIVE, w)

    @property
    def findings(self) -> dict[str, None]:
        """Findings so far, in order, as dict keys (a finding reported twice is kept once)."""
        return self.timeline.findings

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
        return not self.event_queue

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
        self.timeline.last_t = first
        until = self.opt.until
        while (t := self.event_queue.next_time()) is not None:
            if until is not None and t > until:
                break
            if self.cycles >= self.opt.max_cycles:
                self.errors.append(f"t={t:g}: stopped after {self.cycles} scheduling cycles (max_cycles)")
                break
            self.timeline.integrate(t, self.cluster)
            self.now = t
            while (ev := self.event_queue.pop_at(t)) is not None:
                kind, payload = ev
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
                elif kind == CYCLE and self.event_queue.take_cycle(payload):
                    self._cycle(t)
            self.timeline.sample(t, self.queue_alloc, self.active)
            if self.usage is not None:
                self.usage.observe(t, self.queue_res)
            if self._dirty and self._can_progress():
                self.event_queue.want_cycle(t, strictly_after=self._last_cycle == t)
            self._dirty = False
            if self.opt.track_idle:
                self.idle.check(t, self.cluster, self.with_pending)
        end = self.now
        if until is not None:
            end = max(end, until) if not self.event_queue else until
            self.timeline.integrate(end, self.cluster)
        if self.opt.track_idle:
            self.idle.close(end)
        for w in self.workloads:
            if w.state == RUNNING:
                w.advance(end, gpus_held(w))
            w.close(end)
        return SimResult(
            workloads=self.workloads,
            events=self.timeline.events,
            samples=self.timeline.samples,
            total_gpus=self.cluster.total_gpus,
            start=first,
            end=end,
            alloc_gpu_seconds=self.timeline.alloc_integral,
            frag_gpu_seconds=self.timeline.frag_integral,
            queues=self.leaf_queues,
            cycles=self.cycles,
            cycle_seconds=self.cycle_seconds,
            wall_seconds=time.perf_counter() - wall0,
            errors=self.errors,
            findings=list(self.findings),
            nodes=len(self.nodes),
            scales=self.timeline.scales,
            idle_windows=self.idle.windows,
            useful_gpu_seconds=sum(w.useful_gpu_seconds for w in self.workloads),
            held_samples=self.timeline.held_samples,
            gpu_quotas={q.name: q.quota.gpu for q in self.queues if q.name in self.leaf_queues and q.quota.gpu >= 0},
            usage=self.usage.close(end) if self.usage is not None else None,
        )

    # ------------------------------------------------------------------ handlers
    def _changed(self, w: WorkloadBase) -> None:
        """Tell the incremental session that ``w``'s PodGroup or pods changed (or that it is gone)."""
        if self.state is not None and w.job is not None:
            self.state.job_changed(w.job.key)

    def _arrive(self, w: WorkloadBase, t: float) -> None:
        if w.user_suspended:
            w.set_state(t, SUSPENDED)
            message = f"{w.kind} {w.key}: spec.suspend is true: KubeRay creates no pods until it is resumed"
            self.timeline.event(t, "suspended", w, "Suspended", message)
            return
        job = w.create(t)
        self._changed(w)
        w.last_update = t
        w.set_state(t, PENDING)
        self.active[job.key] = w
        self._refresh_pending(w)
        self._dirty = True
        for problem in getattr(w, "problems", []):
            self.timeline.finding(f"{w.key}: {problem}")

    def _complete(self, w: WorkloadBase, t: float) -> None:
        assert w.job is not None
        self._changed(w)
        w.advance(t, gpus_held(w))
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
        self.timeline.event(t, "complete", w, "Completed", f"{w.kind} {w.key} finished its work")
        self._dirty = True
        if self.progress is not None:
            self.progress(t, self._completed, len(self.workloads))

    def _release(self, payload: tuple[WorkloadBase, Pod], t: float) -> None:
        w, pod = payload
        if pod.phase is PodPhase.RELEASING:
            self._changed(w)
            w.advance(t, gpus_held(w))
            self._unbind(w, pod)
            assert w.job is not None
            if pod in w.job.pods:
                w.job.pods.remove(pod)
            pod.phase = PodPhase.FAILED
            self._dirty = True

    def add_scale(self, w: RayWorkload, at: float, group: str, replicas: int) -> None:
        """A scripted replica change of one worker group at ``at`` (Ray Serve autoscaling, a user's edit)."""
        w.scripted = True
        self.event_queue.push(at, SCALE, (w, group, replicas))

    def _scale(self, payload: tuple[RayWorkload, str, int], t: float) -> None:
        w, group, replicas = payload
        if w.state in (COMPLETED, SUSPENDED):
            return
        if w.job is not None:
            w.advance(t, gpus_held(w))
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
            self.timeline.scales.append((t, w.key, group, replicas, len(removed), gpus))

    def _autoscale(self, w: WorkloadBase, t: float) -> None:
        self._autoscale_armed.discard(id(w))
        if w.state == COMPLETED or w.job is None:
            return
        if w.autoscale(t):
            self._changed(w)
            self._refresh_pending(w)
            self._dirty = True
        self._arm_autoscaler(w, t)

    def _arm_autoscaler(self, w: WorkloadBase, t: float) -> None:
        if not w.autoscaling or id(w) in self._autoscale_armed:
            return
        if w.state == RUNNING and w.wants_more():
            self._autoscale_armed.add(id(w))
            self.event_queue.push(t + self.opt.autoscaler_period, AUTOSCALE, w)

    # ------------------------------------------------------------------ one scheduling cycle
    def _stuck(self) -> bool:
        return self.opt.ray_facts and on_bounded_wait(self.active)

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
            self.timeline.finding(f"{f.kind} {f.name} {f.field}: {f.message}".replace("  ", " "))
        touched = self._apply(res, t)
        if self.usage is not None:
            self.usage.after_cycle(t, res)
        self._after_cycle(res, touched, t)

    def snapshot(self, t: float) -> Snapshot:
        """The world as the scheduler core sees it at ``t``: every node and queue, every arrived, unfinished job."""
        if self.opt.ray_facts:
            for w in self.active.values():
                old = self._active_workload(w.upgrade_of) if w.upgrade_of is not None and w.served_at is None else None
                report_ray_facts(w, t, self.opt.checkpoint_interval, old)
                self._changed(w)  # Ray's answers and each run's checkpoint move with time
        jobs = [w.job for w in self.active.values() if w.job is not None]
        if self.dra is not None:
            self.claims = live_claims(self.active, self.claims)
        return Snapshot(
            nodes=self.nodes,
            queues=self.queues,
            jobs=jobs,
            now=t,
            topologies=self.topologies,
            config=self.config,
            usage=self.usage.for_cycle(t) if self.usage is not None else None,
            devices=self.dra.devices if self.dra is not None else [],
            claims=list(self.claims.values()) if self.dra is not None else [],
        )

    def _active_workload(self, key: str) -> WorkloadBase | None:
        return next((w for w in self.active.values() if w.key == key), None)

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
            w.advance(t, gpus_held(w))
            evicted.setdefault(w.job.key, []).append((pod, e))
            touched[w.job.key] = w
            if self.opt.termination_grace > 0:
                pod.phase = PodPhase.RELEASING
                w.wasted_gpu_seconds += pod.request.gpu * self.opt.termination_grace
                self.event_queue.push(t + self.opt.termination_grace, RELEASE, (w, pod))
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
            owner_w.advance(t, gpus_held(owner_w))
            self._bind(owner_w, pod_obj, b.node, b.gpu_group, t)
            write_allocations(b, self.claims)
            binds.setdefault(b.job, []).append(b)
            touched[b.job] = owner_w
        self.timeline.cycle_events(
            evicted,
            binds,
            self.active,
            self.pods,
            t,
            self.opt.ray_aware,
            self.opt.suspend_kinds,
            self.opt.record_bind_events,
        )
        self._evicted_now = set(evicted)
        for key, items in evicted.items():
            job = touched[key].job
            if job is not None:
                note_evictions(job, [e for _, e in items], t, self.config.ready_timeout_backoff)
        for key, items in evicted.items():
            w = touched[key]
            w.evicted_pods += len(items)
            w.replace_evicted(t, [(pod, e.elastic and self.opt.ray_aware) for pod, e in items])
        for w in touched.values():  # pods bound, evicted or recreated; start, stale and backoff times follow
            self._changed(w)
        return touched

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
        note_pending_reasons(res, self.with_pending, touched, self.hopeless, t)
        update_stale(touched, self.stale, t)
        # Another cycle next tick only if this one can have left work for it: evictions (victims gone, pods
        # recreated) or a job that got pods and still has pending ones (elastic growth goes on). Otherwise the
        # next cycle would see exactly what this one saw, minus the room it just used.
        followup = bool(self._evicted_now) or any(key in self.with_pending for key in touched)
        if changed and followup and self._can_progress():
            self.event_queue.want_cycle(t, strictly_after=True)
        elif self._can_progress():
            wake = self.time_rules.next_wake(t, self.with_pending, self.stale, self.active, self.usage)
            if wake is not None:
                self.event_queue.want_cycle(wake, strictly_after=True)

    def idle_latency(self) -> float:
        """Idle spans no longer than this are latency, not idleness: elastic growth takes a cycle per step, a
        pipelined bind waits a cycle for its victims, and the Ray autoscaler asks for a worker per period."""
        return max(2 * self.opt.schedule_period, self.opt.autoscaler_period)

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
                self.event_queue.push(eta, COMPLETE, (w, w.version))
            if self.opt.track_idle and w.warmup_left > 0:
                self.event_queue.push(t + w.warmup_left, WARM, (w, w.version))  # a sample when the restart cost is paid
            self._arm_autoscaler(w, t)

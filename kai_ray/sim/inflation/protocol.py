"""The FGD paper's *workload inflation* protocol, run through the real scheduler core.

Why a protocol of its own rather than the trace replay: replayed by its timestamps, ``cluster-trace-gpu-v2023``
never contends (about 1% of GPUs in use at once), so it says nothing about placement. "Beware of Fragmentation"
(Weng et al., USENIX ATC'23) measures placement by ignoring the times instead. What it does, as its simulator
(``hkust-adsl/kubernetes-scheduler-simulator``) does it, and what we do:

* every row of the pod list, whatever its phase, sorted by name and shuffled with the seed;
* extra rows resampled with replacement (uniformly from the list) and appended, until the next one would take the
  arrived GPU request over ``factor`` x the cluster's GPU capacity (below the list's own request: the shuffled
  list is cut at the same point instead);
* pods placed one after another in that order, never removed; a pod that does not fit is dropped;
* the metric is the share of the cluster's GPUs left unallocated as the arrived request grows, a fractional pod
  counting its fraction (the simulator's ``used_gpu_milli`` over ``total_gpus``; arrived request counts dropped
  pods too).

How it runs on our core: all pods go to one unlimited queue with one priority, each its own single-pod gang created
at its arrival index, so allocate takes them in arrival order and a pod that does not fit is simply left pending.
Arrivals are cut into batches (default 1% of GPU capacity, and always at each 10% of arrived request); each batch is
one :func:`run_cycle` over the whole cluster, so the other actions (consolidation above all) run too. Binds are
applied (pipelined ones too: nothing is ever releasing), consolidation moves put the pod on ``Evict.moved_to``
(its shared GPU: ``Evict.moved_group``); any other eviction puts the pod back to pending for one more cycle
(counted). Whatever is still pending after its cycle is dropped. With ``actions=("allocate",)`` this is exactly
the paper's pod-by-pod placement.

The cluster's books are kept by :class:`kai_ray.sim.cluster.Cluster`, which accepts a bind only if the pod really
fits, so a core that overcommits shows up as an error instead of a better number.
"""

from __future__ import annotations

import gc
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.decisions import Action
from kai_ray.scheduler.snapshot import Job, Node, Pod, PodPhase, SchedulerConfig, Snapshot
from kai_ray.sim.cluster import EPS, Cluster
from kai_ray.sim.trace import (
    TRACE_NAMESPACE,
    TRACE_QUEUE,
    TraceError,
    TracePod,
    _rows,
    pod_shape,
    pod_template,
    trace_queues,
)

SHAPE_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")  # all the multigpu lists carry
DATA_ENV = "KAI_RAY_ALIBABA_DATA"
DEFAULT_NODES = "openb_node_list_gpu_node.csv"
DEFAULT_PODS = "openb_pod_list_default.csv"
PRIORITY = 50

# Published means over 10 seeds at 130% (100% where given), GPU node list, from the FGD authors'
# experiments/analysis/expected_results/analysis_allo_discrete.csv (see the shared data README).
PUBLISHED: dict[str, dict[str, dict[int, float]]] = {
    "openb_pod_list_default": {
        "Random": {100: 13.70, 130: 12.53},
        "Dot-product": {100: 9.38, 130: 9.15},
        "GPU-Clustering": {100: 8.35, 130: 8.12},
        "GPU-Packing": {100: 8.22, 130: 8.00},
        "Best-fit": {100: 7.14, 130: 6.92},
        "FGD": {100: 4.77, 130: 4.61},
    },
    "openb_pod_list_gpushare100": {"Best-fit": {130: 14.99}, "FGD": {130: 13.10}},
    "openb_pod_list_multigpu50": {"Best-fit": {130: 4.26}, "FGD": {130: 2.82}},
}


class InflationError(ValueError):
    """Bad protocol input (a factor, a batch size, a placement name); one line naming the option."""


def known_placements() -> tuple[str, ...]:
    """The placement policies the core accepts (one list, the core's)."""
    from kai_ray.scheduler.allocation import PLACEMENT_POLICIES

    return tuple(PLACEMENT_POLICIES)


def check_placement(name: str, option: str = "--placement") -> None:
    known = known_placements()
    if name not in known:
        raise InflationError(f"{option}: {name!r} is not a known placement policy ({', '.join(known)})")


def data_dir() -> Path:
    """Where the shared Alibaba files live: ``$KAI_RAY_ALIBABA_DATA``, else ``../shared/data/alibaba-v2023``
    beside the repository (where CI and the team keep it)."""
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3].parent / "shared" / "data" / "alibaba-v2023"


def read_pod_list(path: str | Path) -> list[TracePod]:
    """Every row of a pod list, whatever its phase: the 11-column lists and the 5-column multigpu ones alike
    (a missing ``gpu_spec`` means any GPU model; times are not read, the protocol ignores them)."""
    path = Path(path)
    pods: list[TracePod] = []
    seen: set[str] = set()
    for line, row in _rows(path, SHAPE_COLUMNS):
        tp = pod_shape(path, line, row, seen)
        if tp.num_gpu > 1 and tp.gpu_milli not in (0, 1000):
            raise TraceError(f"{path}: line {line}: gpu_milli: {tp.gpu_milli} with {tp.num_gpu} GPUs (only one "
                             "GPU can be shared)")  # fmt: skip
        pods.append(tp)
    if not pods:
        raise TraceError(f"{path}: no pods")
    return pods


def gpu_request(tp: TracePod) -> float:
    """GPUs the pod asks for, a fraction counting as its fraction (what it adds to the arrived request)."""
    if tp.num_gpu == 1 and 0 < tp.gpu_milli < 1000:
        return tp.gpu_milli / 1000.0
    return float(tp.num_gpu)


def arrivals(pods: Sequence[TracePod], capacity: float, factor: float, seed: int) -> tuple[list[TracePod], int]:
    """The arrival order: the list shuffled with ``seed``, then rows resampled with replacement, until the next pod
    would take the arrived GPU request over ``factor`` x ``capacity``. Returns the order and how many of it are
    resampled copies (named ``<name>-clone-<i>``)."""
    rng = random.Random(seed)
    order = sorted(pods, key=lambda p: p.name)
    rng.shuffle(order)
    target = factor * capacity + EPS
    out: list[TracePod] = []
    arrived = 0.0
    for tp in order:
        g = gpu_request(tp)
        if arrived + g > target:
            return out, 0
        arrived += g
        out.append(tp)
    if not any(gpu_request(p) > 0 for p in order):
        return out, 0  # no GPU pod: resampling could never reach the target
    clones = 0
    while True:
        tp = order[rng.randrange(len(order))]
        g = gpu_request(tp)
        if arrived + g > target:
            return out, clones
        arrived += g
        out.append(replace(tp, name=f"{tp.name}-clone-{clones}"))
        clones += 1


@dataclass(frozen=True)
class InflationSpec:
    factor: float = 1.3
    seed: int = 0
    placement: str = "binpack"
    actions: tuple[str, ...] | None = None  # None: the scheduler's default (all five)
    batch: float = 0.01  # share of cluster GPU capacity that arrives per scheduling cycle

    def validate(self) -> None:
        if not (self.factor > 0 and math.isfinite(self.factor)):
            raise InflationError(f"--inflate: must be a positive number, got {self.factor}")
        if not (0 < self.batch <= 1):
            raise InflationError(f"--batch: must be in (0, 1] (a share of GPU capacity), got {self.batch}")
        check_placement(self.placement)
        if self.actions is not None:
            from kai_ray.scheduler.cycle import ACTIONS

            if not self.actions:
                raise InflationError("--actions: give at least one action")
            for a in self.actions:
                if a not in ACTIONS:
                    raise InflationError(f"--actions: {a!r} is not an action ({', '.join(ACTIONS)})")

    def config(self) -> SchedulerConfig:
        cfg = SchedulerConfig(placement_gpu=self.placement, placement_cpu=self.placement)
        if self.actions is not None:
            cfg.actions = tuple(self.actions)
        return cfg


@dataclass
class InflationResult:
    spec: InflationSpec
    capacity_gpus: float
    listed: int  # rows in the pod list
    arrived: int
    resampled: int
    arrived_gpus: float = 0.0
    placed: int = 0
    dropped: int = 0
    dropped_gpus: float = 0.0
    moves: int = 0  # consolidation moves applied
    evictions: int = 0  # other evictions: the pod went back to pending
    evicted_dropped: int = 0  # ... and found no place again
    cycles: int = 0
    core_cpu_seconds: float = 0.0
    cpu_seconds: float = 0.0
    wall_seconds: float = 0.0
    curve: list[tuple[float, float]] = field(default_factory=list)  # (arrived %, unallocated %) after each cycle
    marks: list[tuple[int, float, float]] = field(default_factory=list)  # (mark %, arrived %, unallocated %)
    errors: list[str] = field(default_factory=list)

    @property
    def unallocated_pct(self) -> float:
        return self.curve[-1][1] if self.curve else 100.0

    def document(self) -> dict[str, Any]:
        s = self.spec
        return {
            "placement": s.placement,
            "seed": s.seed,
            "factor": s.factor,
            "actions": list(s.actions) if s.actions is not None else list(SchedulerConfig().actions),
            "batch": s.batch,
            "capacity_gpus": self.capacity_gpus,
            "listed": self.listed,
            "arrived": self.arrived,
            "resampled": self.resampled,
            "arrived_gpus": round(self.arrived_gpus, 3),
            "placed": self.placed,
            "dropped": self.dropped,
            "dropped_gpus": round(self.dropped_gpus, 3),
            "moves": self.moves,
            "evictions": self.evictions,
            "evicted_dropped": self.evicted_dropped,
            "cycles": self.cycles,
            "unallocated_pct": round(self.unallocated_pct, 3),
            "marks": [
                {"mark_pct": m, "arrived_pct": round(a, 3), "unallocated_pct": round(u, 3)} for m, a, u in self.marks
            ],
            "curve": [[round(a, 3), round(u, 3)] for a, u in self.curve],
            "cpu_seconds": round(self.cpu_seconds, 3),
            "core_cpu_seconds": round(self.core_cpu_seconds, 3),
            "wall_seconds": round(self.wall_seconds, 3),
            "errors": self.errors[:20],
        }


Progress = Callable[[int, int], None]  # (pods arrived so far, pods arriving in all)


def batches(
    order: Sequence[TracePod], capacity: float, batch: float, factor: float
) -> list[tuple[int, int, tuple[int, ...]]]:
    """Cut the arrival order into ``(start, end, marks)`` slices: a slice ends once it brought ``batch`` x capacity
    of GPU request, or at the pod that takes the arrived request to the next 10% of capacity (``marks``: the
    percentages it reached, several for a big pod on a small cluster). The last slice ends the run and also carries
    the final mark (``factor`` as a percentage: the run stops within one pod of it)."""
    out: list[tuple[int, int, tuple[int, ...]]] = []
    step = batch * capacity
    start = 0
    acc = arrived = 0.0
    next_mark = 10
    for i, tp in enumerate(order):
        g = gpu_request(tp)
        acc += g
        arrived += g
        marks: list[int] = []
        while arrived + EPS >= next_mark / 100.0 * capacity:
            marks.append(next_mark)
            next_mark += 10
        if marks or acc + EPS >= step:
            out.append((start, i + 1, tuple(marks)))
            start, acc = i + 1, 0.0
    if start < len(order):
        out.append((start, len(order), ()))
    final = round(factor * 100)
    if out and final not in out[-1][2] and final >= next_mark - 10:
        s, e, marks_ = out[-1]
        out[-1] = (s, e, (*marks_, final))
    return out


class InflationRun:
    """One protocol run: arrival order in, the unallocated-GPU curve out."""

    def __init__(self, nodes: list[Node], pods: Sequence[TracePod], spec: InflationSpec) -> None:
        spec.validate()
        self.spec = spec
        self.nodes = nodes
        self.cluster = Cluster(nodes)
        self.capacity = self.cluster.total_gpus
        if self.capacity <= 0:
            raise InflationError("--nodes: the node list has no GPUs (the protocol inflates to a share of GPUs)")
        self.order, resampled = arrivals(pods, self.capacity, spec.factor, spec.seed)
        self.config = spec.config()
        self.queues = trace_queues()
        self.running: dict[str, Job] = {}  # by pod uid
        self.evicted: set[str] = set()  # pods that were evicted (not moved) at some point
        self.dropped: list[Pod] = []
        self.result = InflationResult(spec, self.capacity, len(pods), len(self.order), resampled)

    def _job(self, tp: TracePod, index: int) -> Job:
        pod = pod_template(tp)
        pod.created_at = float(index)
        return Job(
            namespace=TRACE_NAMESPACE,
            name=tp.name,
            queue=TRACE_QUEUE,
            priority=PRIORITY,
            priority_class="train",
            created_at=float(index),
            uid=pod.uid,
            pods=[pod],
        )

    def run(self, progress: Progress | None = None) -> InflationResult:
        """The long-lived books are frozen out of the cyclic GC while it runs (as the engine does): each cycle
        creates and drops many objects, and full collections would rescan the whole cluster every time."""
        gc.collect()
        gc.freeze()
        try:
            return self._run(progress)
        finally:
            gc.unfreeze()

    def _run(self, progress: Progress | None) -> InflationResult:
        res = self.result
        c0, t0 = time.process_time(), time.perf_counter()
        total = len(self.order)
        back: list[Job] = []  # evicted pods, pending again for one more cycle
        cuts = batches(self.order, self.capacity, self.spec.batch, self.spec.factor)
        for n, (start, end, marks) in enumerate(cuts):
            arriving = [self._job(self.order[i], i) for i in range(start, end)]
            res.arrived_gpus += sum(j.pods[0].request.gpu for j in arriving)
            back = self._cycle(back + arriving, float(end))  # the clock: pods arrived so far (creation = index)
            if back and n == len(cuts) - 1:
                for job in self._cycle(back, end + 0.5):  # the last evicted pods get their one more cycle too
                    res.evicted_dropped += 1
                    self._drop(job)
                back = []
            arrived_pct = 100.0 * res.arrived_gpus / self.capacity
            unalloc_pct = 100.0 * (1.0 - self.cluster.allocated_gpus / self.capacity)
            res.curve.append((arrived_pct, unalloc_pct))
            res.marks.extend((m, arrived_pct, unalloc_pct) for m in marks)
            if progress is not None:
                progress(end, total)
        res.cpu_seconds = time.process_time() - c0
        res.wall_seconds = time.perf_counter() - t0
        return res

    def _drop(self, job: Job) -> None:
        self.dropped.append(job.pods[0])
        self.result.dropped += 1
        self.result.dropped_gpus += job.pods[0].request.gpu

    def _cycle(self, pending: list[Job], now: float) -> list[Job]:
        """One scheduling cycle over the whole cluster; returns evicted pods to offer again next cycle."""
        res = self.result
        snap = Snapshot(
            nodes=self.nodes,
            queues=self.queues,
            jobs=[*self.running.values(), *pending],
            now=now,
            config=self.config,
        )
        out = run_cycle(snap)
        res.cycles += 1
        res.core_cpu_seconds += out.stats.get("cycle_cpu_seconds", 0.0)
        for f in out.findings:
            if "internal error" in f.message:
                res.errors.append(f"cycle {res.cycles}: {f.message.splitlines()[0]}")
        waiting = {j.pods[0].uid: j for j in pending}
        again = {j.pods[0].uid for j in pending if j.pods[0].uid in self.evicted}
        moved: list[tuple[Job, str, str | None]] = []
        back: list[Job] = []
        for e in out.evictions:
            job = self.running.pop(e.pod, None)
            if job is None:
                res.errors.append(f"cycle {res.cycles}: eviction of {e.pod}, which is not running")
                continue
            pod = job.pods[0]
            assert pod.node is not None
            self.cluster.unbind(pod, pod.node, pod.gpu_group)
            pod.node, pod.gpu_group, pod.phase = None, None, PodPhase.PENDING
            if e.moved_to is not None and e.action is Action.CONSOLIDATION:
                moved.append((job, e.moved_to, e.moved_group))
            else:
                res.evictions += 1
                back.append(job)
        for b in out.binds:
            job = waiting.pop(b.pod, None)
            if job is None:
                res.errors.append(f"cycle {res.cycles}: bind of {b.pod}, which is not pending")
                continue
            if not self._bind(job, b.node, b.gpu_group, now):
                waiting[b.pod] = job
            elif b.pod not in again:
                res.placed += 1
        for job, node, group in moved:
            if self._bind(job, node, group, now):
                res.moves += 1
            else:
                back.append(job)
        for uid, job in waiting.items():
            if uid in again:
                res.evicted_dropped += 1
            self._drop(job)
        self.evicted.update(j.pods[0].uid for j in back)
        return back

    def _bind(self, job: Job, node: str, group: str | None, now: float) -> bool:
        pod = job.pods[0]
        why = self.cluster.fits(pod, node, group)
        if why is not None:
            self.result.errors.append(f"cycle {self.result.cycles}: {pod.uid} on {node} rejected: {why}")
            return False
        pod.gpu_group = self.cluster.bind(pod, node, group)
        pod.node, pod.phase, pod.start_time = node, PodPhase.RUNNING, now
        self.running[pod.uid] = job
        return True


def run_inflation(
    nodes: list[Node], pods: Sequence[TracePod], spec: InflationSpec, progress: Progress | None = None
) -> InflationResult:
    return InflationRun(nodes, pods, spec).run(progress)

"""Synthetic clusters for ``kai-ray bench core``: allocate throughput and preemption latency of the core.

Why synthetic and not recorded: the targets are about scale (thousands of nodes, tens of thousands of pods) and
must be reproducible on any machine; the generator is deterministic (seeded) so two runs measure the same work.
"""

from __future__ import annotations

import gc
import random
import resource
import time
from dataclasses import dataclass, replace
from typing import Any

from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.incremental import IncrementalState
from kai_ray.scheduler.snapshot import (
    Job,
    Node,
    Pod,
    PodPhase,
    Preemptibility,
    Queue,
    Resources,
    SchedulerConfig,
    Snapshot,
)

GIB = 2.0**30


@dataclass
class CoreBenchSpec:
    nodes: int = 5000
    gpus_per_node: int = 8
    jobs: int = 5000  # pending gangs
    gang: int = 8  # pods per gang, one GPU each
    running_pods: int = 0  # single-GPU running pods placed before the cycle
    queues: int = 4
    seed: int = 0


def _nodes(n: int, gpus: int) -> list[Node]:
    return [
        Node(
            f"node-{i:05d}",
            Resources(float(gpus), 128_000.0, 1024 * GIB),
            max_pods=110,
            labels={"topology.kubernetes.io/zone": f"zone-{i % 4}", "rack": f"rack-{i // 16}"},
        )
        for i in range(n)
    ]


def _queues(k: int) -> list[Queue]:
    out = [Queue("bench", quota=Resources(-1, -1, -1))]
    out += [Queue(f"bench-{i}", parent="bench", quota=Resources(0, -1, -1)) for i in range(k)]
    return out


def _running_pod(key: str, node: str) -> Pod:
    """One running single-GPU pod of job ``bench/<key>``: the load both benchmarks fill nodes with."""
    return Pod(
        f"bench/{key}-0",
        f"{key}-0",
        "bench",
        f"bench/{key}",
        Resources(1, 1000, 4 * GIB),
        phase=PodPhase.RUNNING,
        node=node,
        start_time=0.0,
    )


def allocate_snapshot(spec: CoreBenchSpec) -> Snapshot:
    rnd = random.Random(spec.seed)
    nodes = _nodes(spec.nodes, spec.gpus_per_node)
    jobs: list[Job] = []
    # running single-GPU pods, packed node by node
    cap = spec.gpus_per_node
    for i in range(spec.running_pods):
        node = nodes[(i // cap) % len(nodes)].name if cap else nodes[0].name
        key = f"run-{i:06d}"
        pod = _running_pod(key, node)
        jobs.append(
            Job("bench", key, f"bench-{i % spec.queues}", priority=50, min_member=1, pods=[pod], created_at=float(i))
        )
    for j in range(spec.jobs):
        key = f"gang-{j:06d}"
        pods = [
            Pod(
                f"bench/{key}-{k}",
                f"{key}-{k}",
                "bench",
                f"bench/{key}",
                Resources(1, 2000, 8 * GIB),
                is_ray_head=(k == 0),
            )
            for k in range(spec.gang)
        ]
        jobs.append(
            Job(
                "bench",
                key,
                f"bench-{rnd.randrange(spec.queues)}",
                priority=50,
                min_member=spec.gang,
                pods=pods,
                created_at=1e6 + j,
            )
        )
    return Snapshot(nodes, _queues(spec.queues), jobs, now=2e6, config=SchedulerConfig())


def preemption_snapshot(
    nodes: int = 500, gpus_per_node: int = 8, running_jobs: int = 4000, gang: int = 8, gpus_per_pod: int = 1
) -> Snapshot:
    """A full cluster of single-GPU training jobs; one non-preemptible inference gang arrives in the same queue."""
    ns = _nodes(nodes, gpus_per_node)
    jobs: list[Job] = []
    for i in range(running_jobs):
        node = ns[(i // gpus_per_node) % nodes].name
        key = f"train-{i:05d}"
        pod = _running_pod(key, node)
        jobs.append(
            Job(
                "bench",
                key,
                "team",
                priority=50,
                priority_class="train",
                min_member=1,
                pods=[pod],
                created_at=float(i),
                kind="RayJob",
            )
        )
    svc = "inference"
    pods = [
        Pod(f"bench/{svc}-{k}", f"{svc}-{k}", "bench", f"bench/{svc}", Resources(gpus_per_pod, 4000, 32 * GIB))
        for k in range(gang)
    ]
    jobs.append(
        Job(
            "bench",
            svc,
            "team",
            priority=125,
            priority_class="inference",
            preemptibility=Preemptibility.NON_PREEMPTIBLE,
            min_member=gang,
            pods=pods,
            created_at=1e6,
            kind="RayService",
        )
    )
    queues = [Queue("team", quota=Resources(float(nodes * gpus_per_node), -1, -1))]
    return Snapshot(ns, queues, jobs, now=2e6)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_allocate_bench(spec: CoreBenchSpec) -> dict[str, Any]:
    t0 = time.perf_counter()
    snap = allocate_snapshot(spec)
    build = time.perf_counter() - t0
    gc.collect()
    t1 = time.perf_counter()
    res = run_cycle(snap)
    cycle = time.perf_counter() - t1
    binds = len(res.binds)
    alloc = res.stats.get("allocate_seconds", cycle)
    return {
        "benchmark": "allocate",
        "nodes": spec.nodes,
        "gpus_per_node": spec.gpus_per_node,
        "pending_jobs": spec.jobs,
        "gang": spec.gang,
        "pending_pods": spec.jobs * spec.gang,
        "running_pods": spec.running_pods,
        "binds": binds,
        "pods_per_second": binds / cycle if cycle > 0 else 0.0,
        "allocate_pods_per_second": binds / alloc if alloc > 0 else 0.0,
        "cycle_seconds": cycle,
        "cycle_cpu_seconds": res.stats.get("cycle_cpu_seconds", 0.0),
        "open_seconds": res.stats.get("open_seconds", 0.0),
        "allocate_seconds": alloc,
        "snapshot_build_seconds": build,
        "peak_rss_mb": peak_rss_mb(),
        "internal_errors": [f.message for f in res.findings if f.kind == "Cycle"],
    }


def run_preemption_bench(
    nodes: int = 500, gpus_per_node: int = 8, running_jobs: int = 4000, gang: int = 8, gpus_per_pod: int = 1
) -> dict[str, Any]:
    snap = preemption_snapshot(nodes, gpus_per_node, running_jobs, gang, gpus_per_pod)
    gc.collect()
    t1 = time.perf_counter()
    res = run_cycle(snap)
    cycle = time.perf_counter() - t1
    status = res.jobs.get("bench/inference")
    return {
        "benchmark": "preemption",
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "running_jobs": running_jobs,
        "gang": gang,
        "gpus_per_pod": gpus_per_pod,
        "decision_seconds": cycle,
        "cycle_seconds": cycle,
        "cycle_cpu_seconds": res.stats.get("cycle_cpu_seconds", 0.0),
        "open_seconds": res.stats.get("open_seconds", 0.0),
        "preempt_seconds": res.stats.get("preempt_seconds", 0.0),
        "evictions": len(res.evictions),
        "binds": len(res.binds),
        "preemptor_scheduled": bool(status and status.scheduled),
        "peak_rss_mb": peak_rss_mb(),
        "internal_errors": [f.message for f in res.findings if f.kind == "Cycle"],
    }


def _bench_result(name: str, snap: Snapshot, action: str, **extra: Any) -> dict[str, Any]:
    gc.collect()
    t1 = time.perf_counter()
    res = run_cycle(snap)
    cycle = time.perf_counter() - t1
    pending = [j.key for j in snap.jobs if any(p.phase is PodPhase.PENDING for p in j.pods)]
    placed = sum(1 for k in pending if res.jobs.get(k) is not None and res.jobs[k].scheduled)
    return {
        "benchmark": name,
        "nodes": len(snap.nodes),
        **extra,
        "pending_jobs": len(pending),
        "placed_jobs": placed,
        "binds": len(res.binds),
        "evictions": len(res.evictions),
        "moved": sum(1 for e in res.evictions if e.moved_to),
        "decision_seconds": res.stats.get(f"{action}_seconds", 0.0),
        "decision_cpu_seconds": res.stats.get(f"{action}_cpu_seconds", 0.0),
        "cycle_seconds": cycle,
        "cycle_cpu_seconds": res.stats.get("cycle_cpu_seconds", 0.0),
        "open_seconds": res.stats.get("open_seconds", 0.0),
        "peak_rss_mb": peak_rss_mb(),
        "internal_errors": [f.message for f in res.findings if f.kind == "Cycle"],
    }


def consolidation_snapshot(nodes: int = 500, gpus_per_node: int = 8, pending: int = 20, seed: int = 0) -> Snapshot:
    """A fragmented cluster: every node runs 1-, 2- and 4-GPU training pods and keeps one to three GPUs idle, so
    whole-node jobs fit only if running pods are repacked."""
    rnd = random.Random(seed)
    ns = _nodes(nodes, gpus_per_node)
    jobs: list[Job] = []
    k = 0
    for node in ns:
        free = rnd.randint(1, 3)
        left = gpus_per_node - free
        while left > 0:
            size = min(left, rnd.choice((1, 1, 2, 4)))
            key = f"train-{k:06d}"
            pod = Pod(f"bench/{key}-0", f"{key}-0", "bench", f"bench/{key}", Resources(size, 1000 * size, 4 * GIB))
            pod.phase, pod.node, pod.start_time = PodPhase.RUNNING, node.name, 0.0
            jobs.append(Job("bench", key, "bench-0", priority=50, pods=[pod], created_at=float(k)))
            k += 1
            left -= size
    for j in range(pending):
        key = f"whole-{j:04d}"
        pod = Pod(f"bench/{key}-0", f"{key}-0", "bench", f"bench/{key}", Resources(gpus_per_node, 8000, 32 * GIB))
        jobs.append(Job("bench", key, "bench-1", priority=50, pods=[pod], created_at=1e6 + j))
    return Snapshot(ns, _queues(2), jobs, now=2e6, config=SchedulerConfig())


def run_consolidation_bench(nodes: int = 500, gpus_per_node: int = 8, pending: int = 20) -> dict[str, Any]:
    snap = consolidation_snapshot(nodes, gpus_per_node, pending)
    return _bench_result("consolidation", snap, "consolidation", gpus_per_node=gpus_per_node)


def reclaim_snapshot(nodes: int = 500, gpus_per_node: int = 8, queues: int = 50, seed: int = 0) -> Snapshot:
    """A full cluster shared by ``queues`` leaf queues of equal quota: half run far over their quota with single-GPU
    jobs, the other half run a little and each has a pending 4 x 1-GPU gang it is entitled to reclaim."""
    rnd = random.Random(seed)
    ns = _nodes(nodes, gpus_per_node)
    total = nodes * gpus_per_node
    quota = total // queues
    qs = [Queue("bench", quota=Resources(-1, -1, -1))]
    qs += [Queue(f"team-{i:02d}", parent="bench", quota=Resources(float(quota), -1, -1)) for i in range(queues)]
    under = queues // 2
    small = max(1, quota // 4)
    share = [small] * under + [0] * (queues - under)
    rest = total - small * under
    for i in range(under, queues):
        share[i] = rest // (queues - under) + (1 if i - under < rest % (queues - under) else 0)
    slots = [n.name for n in ns for _ in range(gpus_per_node)]
    rnd.shuffle(slots)
    jobs: list[Job] = []
    k = 0
    for i, n in enumerate(share):
        for _ in range(n):
            key = f"run-{k:06d}"
            jobs.append(
                Job("bench", key, f"team-{i:02d}", priority=50, pods=[_running_pod(key, slots[k])], created_at=float(k))
            )
            k += 1
    for i in range(under):
        key = f"claim-{i:02d}"
        pods = [
            Pod(f"bench/{key}-{j}", f"{key}-{j}", "bench", f"bench/{key}", Resources(1, 1000, 4 * GIB))
            for j in range(4)
        ]
        jobs.append(Job("bench", key, f"team-{i:02d}", priority=50, min_member=4, pods=pods, created_at=1e6 + i))
    return Snapshot(ns, qs, jobs, now=2e6, config=SchedulerConfig())


def run_reclaim_bench(nodes: int = 500, gpus_per_node: int = 8, queues: int = 50) -> dict[str, Any]:
    snap = reclaim_snapshot(nodes, gpus_per_node, queues)
    return _bench_result("reclaim", snap, "reclaim", gpus_per_node=gpus_per_node, queues=queues)


@dataclass
class ChurnSpec:
    """A steady stream: ``arrivals`` gangs of ``gang`` single-GPU pods arrive each cycle and as many running gangs
    complete, on a cluster ``fill`` full at the start, for ``duration`` seconds or ``max_cycles`` cycles."""

    nodes: int = 5000
    gpus_per_node: int = 8
    gang: int = 8
    arrivals: int = 50
    fill: float = 0.9
    duration: float = 60.0
    max_cycles: int = 100
    queues: int = 4
    seed: int = 0


def _percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (0 for no values): what a p99 over a run of cycles means."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def _gang(key: str, queue: str, size: int, created: float) -> Job:
    pods = [
        Pod(f"bench/{key}-{k}", f"{key}-{k}", "bench", f"bench/{key}", Resources(1, 2000, 8 * GIB), created_at=created)
        for k in range(size)
    ]
    return Job("bench", key, queue, priority=50, min_member=size, pods=pods, created_at=created)


def run_churn_bench(spec: ChurnSpec) -> dict[str, Any]:
    """Cycles of the core under a steady arrival and completion stream, as the operator runs them: each cycle gets
    a new snapshot in which the jobs that did not change are the same objects (as the operator's cache keeps them)
    and the ones that did are new; the binds of a cycle are running in the next. Like the operator, it keeps an
    incremental session across cycles and tells it which PodGroups completed or were bound. Reports the cycle's
    length and its parts (session open, actions) as p50/p99 over the run, and pods and gangs bound per second of
    core time."""
    rnd = random.Random(spec.seed)
    nodes = _nodes(spec.nodes, spec.gpus_per_node)
    queues = [Queue("bench", quota=Resources(-1, -1, -1))]
    queues += [Queue(f"bench-{i}", parent="bench", quota=Resources(-1, -1, -1)) for i in range(spec.queues)]
    jobs: dict[str, Job] = {}
    running: list[str] = []  # oldest first: the order they complete in
    slots = [n.name for n in nodes for _ in range(spec.gpus_per_node)]
    seq = 0
    for start in range(0, int(len(slots) * spec.fill) - spec.gang + 1, spec.gang):
        job = _gang(f"run-{seq:07d}", f"bench-{rnd.randrange(spec.queues)}", spec.gang, float(seq))
        for pod, node in zip(job.pods, slots[start : start + spec.gang], strict=True):
            pod.phase, pod.node, pod.start_time = PodPhase.RUNNING, node, 0.0
        jobs[job.key] = job
        running.append(job.key)
        seq += 1
    cycles: list[float] = []
    opens: list[float] = []
    actions: list[float] = []
    binds = gangs = completed = 0
    internal: list[str] = []
    now = 1e6
    config = SchedulerConfig()
    state = IncrementalState()
    t_end = time.perf_counter() + spec.duration
    gc.collect()
    while len(cycles) < spec.max_cycles and time.perf_counter() < t_end:
        for _ in range(min(spec.arrivals, len(running))):  # completions
            done = running.pop(0)
            del jobs[done]
            state.job_changed(done)
            completed += 1
        for _ in range(spec.arrivals):  # arrivals
            job = _gang(f"new-{seq:07d}", f"bench-{rnd.randrange(spec.queues)}", spec.gang, now)
            jobs[job.key] = job
            seq += 1
        now += 1.0
        snap = Snapshot(nodes, queues, list(jobs.values()), now=now, config=config)
        t0 = time.perf_counter()
        res = run_cycle(snap, state)
        cycles.append(time.perf_counter() - t0)
        opens.append(res.stats.get("open_seconds", 0.0))
        actions.append(sum(res.stats.get(f"{a}_seconds", 0.0) for a in config.actions))
        internal += [f.message for f in res.findings if f.kind == "Cycle"]
        placed: dict[str, dict[str, str]] = {}
        for b in res.binds:
            if not b.pipelined:
                placed.setdefault(b.job, {})[b.pod] = b.node
        for key, where in placed.items():
            old = jobs.get(key)
            if old is None:
                continue
            pods = [
                replace(p, phase=PodPhase.RUNNING, node=where[p.uid], start_time=now) if p.uid in where else p
                for p in old.pods
            ]
            jobs[key] = replace(old, pods=pods)
            state.job_changed(key)
            binds += len(where)
            if all(p.node for p in pods):
                gangs += 1
                running.append(key)
    core = sum(cycles)
    pending = sum(1 for j in jobs.values() if any(p.node is None for p in j.pods))
    return {
        "benchmark": "churn",
        "nodes": spec.nodes,
        "gpus_per_node": spec.gpus_per_node,
        "gang": spec.gang,
        "arrivals_per_cycle": spec.arrivals,
        "jobs": len(jobs),
        "cycles": len(cycles),
        "cycle_p50_seconds": _percentile(cycles, 0.5),
        "cycle_p99_seconds": _percentile(cycles, 0.99),
        "open_p50_seconds": _percentile(opens, 0.5),
        "open_p99_seconds": _percentile(opens, 0.99),
        "actions_p50_seconds": _percentile(actions, 0.5),
        "actions_p99_seconds": _percentile(actions, 0.99),
        "pods_bound": binds,
        "gangs_bound": gangs,
        "gangs_completed": completed,
        "pending_gangs_at_end": pending,
        "pods_per_second": binds / core if core > 0 else 0.0,
        "gangs_per_second": gangs / core if core > 0 else 0.0,
        "peak_rss_mb": peak_rss_mb(),
        "internal_errors": internal[:5],
    }

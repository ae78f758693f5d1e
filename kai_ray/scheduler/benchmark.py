"""Synthetic clusters for ``kai-ray bench core``: allocate throughput and preemption latency of the core.

Why synthetic and not recorded: the targets are about scale (thousands of nodes, tens of thousands of pods) and
must be reproducible on any machine; the generator is deterministic (seeded) so two runs measure the same work.
"""

from __future__ import annotations

import gc
import random
import resource
import time
from dataclasses import dataclass
from typing import Any

from kai_ray.scheduler.cycle import run_cycle
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

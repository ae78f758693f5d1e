"""A small cluster for the build, session and statement tests: two queues under one parent, two 8-GPU nodes."""

from __future__ import annotations

from kai_ray.scheduler.snapshot import Job, Node, Pod, PodPhase, Queue, Resources, Snapshot

NOW = 1000.0


def pod(
    key: str,
    i: int,
    gpus: float = 1.0,
    node: str | None = None,
    phase: PodPhase = PodPhase.PENDING,
    fraction: float | None = None,
    extended: dict[str, float] | None = None,
) -> Pod:
    ns, name = key.split("/")
    return Pod(
        f"{name}-{i}",
        f"{name}-{i}",
        ns,
        key,
        Resources(gpus, 1000, 1e9),
        phase=phase,
        node=node,
        gpu_fraction=fraction,
        extended=extended or {},
    )


def job(key: str, queue: str, pods: list[Pod], min_member: int = 1, priority: int = 50) -> Job:
    ns, name = key.split("/")
    return Job(ns, name, queue, priority=priority, min_member=min_member, pods=pods, uid=key)


def snapshot(*jobs: Job, nodes: list[Node] | None = None) -> Snapshot:
    queues = [
        Queue("root", quota=Resources(-1, -1, -1)),
        Queue("a", parent="root", quota=Resources(8, -1, -1)),
        Queue("b", parent="root", quota=Resources(8, -1, -1)),
    ]
    if nodes is None:
        nodes = [Node("n0", Resources(8, 64000, 512e9)), Node("n1", Resources(8, 64000, 512e9))]
    return Snapshot(nodes, queues, list(jobs), now=NOW)

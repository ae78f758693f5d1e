"""What an operator looks at: the queue tree with its numbers, and the pending workloads in the scheduler's order.

Pure, like the rest of the core: a snapshot (what exists now) and what the last cycle said (per queue: fair share,
allocated, requested; per job: a :class:`Verdict`) in, rows out. The Kubernetes adapter reads the last cycle from
the Queue and PodGroup status the scheduler wrote, the simulator adapter from a cycle at the chosen simulated time;
the CLI renders the rows (``kai-ray queues``, ``kai-ray pending``).

The pending order is the allocate action's own: the same hierarchical queue order (fair share, priority, DRF, age)
and job order (priority, elastic state, age), popped until empty as if no job could be placed. A job placed by the
next cycle changes its queue's share and so the order after it; the positions are where each job stands now.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kai_ray.scheduler.cycle import open_session
from kai_ray.scheduler.decisions import CycleResult, QueueStatus
from kai_ray.scheduler.ordering import JobsOrderByQueues
from kai_ray.scheduler.snapshot import PodPhase, Resources, Snapshot

NOT_CONSIDERED = "NotYetConsidered"


def _vec(r: Resources) -> dict[str, float]:
    return {"gpu": r.gpu, "cpu": r.cpu, "memory": r.memory}


@dataclass(frozen=True)
class Verdict:
    """The last cycle's word on a job. ``reason`` is a string: on a cluster it is whatever the scheduler wrote."""

    scheduled: bool
    reason: str
    message: str


@dataclass
class LastCycle:
    """What the last scheduling cycle reported: queue numbers and per-job verdicts."""

    queues: Mapping[str, QueueStatus] = field(default_factory=dict)
    jobs: Mapping[str, Verdict] = field(default_factory=dict)

    @classmethod
    def of(cls, result: CycleResult) -> LastCycle:
        verdicts = {k: Verdict(v.scheduled, v.reason.value, v.message) for k, v in result.jobs.items()}
        return cls(dict(result.queues), verdicts)


@dataclass
class QueueRow:
    """One queue of the tree. Resource maps are in core units (GPUs, millicores, bytes); -1 is unlimited. ``None``
    where the last cycle said nothing (a queue the scheduler has not reported on yet)."""

    name: str
    parent: str | None
    depth: int
    priority: int
    quota: dict[str, float]
    limit: dict[str, float]
    weight: dict[str, float]
    fair_share: dict[str, float] | None
    allocated: dict[str, float] | None
    requested: dict[str, float] | None
    pending_podgroups: int  # this queue's and its descendants': gangs not running, as ``pending`` lists them
    pending_pods: int  # the pods of those gangs that wait for a node
    running_podgroups: int
    # normalised historical usage (time-based fair share: a share of the cluster over the usage window); None: the
    # feature is off or the scheduler has not reported it
    usage: dict[str, float] | None = None
    display_name: str = ""
    children: list[str] = field(default_factory=list)
    elastic_pending_pods: int = 0  # pods waiting beside a running gang (elastic workers): not pending gangs


@dataclass
class PendingRow:
    """One pending workload: where it stands in the scheduler's order and why the last cycle did not place it."""

    position: int | None  # 1-based, across the cluster; None: the scheduler does not try it (see reason)
    queue_position: int | None  # 1-based, within its queue
    queue: str
    namespace: str
    name: str  # the PodGroup
    owner: str  # Kind/name the PodGroup was made for, when known
    priority_class: str
    priority: int
    pending_pods: int
    min_member: int
    requested: dict[str, float]  # of its pending pods
    age_seconds: float  # since the PodGroup was created
    reason: str
    message: str


def pending_order(snapshot: Snapshot) -> list[str]:
    """Job keys in the order the next allocate action pops them (only jobs it would try: valid, ready, with pods
    left to place, in an existing leaf queue)."""
    ses = open_session(snapshot)
    order = JobsOrderByQueues(ses)
    for job in ses.jobs:
        if job.invalid is None and job.queue >= 0 and job.ready and job.has_pending(ses):
            order.push(job)
    keys: list[str] = []
    while not order.empty():
        popped = order.pop()
        if popped is None:
            break
        keys.append(popped.key)
    return keys


def _pending_jobs(snapshot: Snapshot, result: LastCycle) -> dict[str, tuple[int, Resources]]:
    """Jobs whose gang is not running (the last verdict says not scheduled, or there is none yet) and that have
    pods waiting: key -> (pending pods, their requests)."""
    out: dict[str, tuple[int, Resources]] = {}
    for job in snapshot.jobs:
        waiting = [p for p in job.pods if p.phase is PodPhase.PENDING]
        verdict = result.jobs.get(job.key)
        if not waiting or (verdict is not None and verdict.scheduled):
            continue
        total = Resources()
        for p in waiting:
            total = total + p.request
        out[job.key] = (len(waiting), total)
    return out


def _ancestry(snapshot: Snapshot) -> dict[str, list[str]]:
    """Each queue's chain from itself up to its root (a cycle or a missing parent ends the chain)."""
    parent = {q.name: q.parent for q in snapshot.queues}
    out: dict[str, list[str]] = {}
    for name in parent:
        chain: list[str] = []
        q: str | None = name
        while q is not None and q in parent and q not in chain:
            chain.append(q)
            q = parent[q]
        out[name] = chain
    return out


def queue_rows(snapshot: Snapshot, result: LastCycle, display_names: dict[str, str] | None = None) -> list[QueueRow]:
    """The queue tree, depth first (roots and siblings by name), with the last cycle's numbers and pending counts."""
    names = display_names or {}
    chains = _ancestry(snapshot)
    pending = _pending_jobs(snapshot, result)
    groups: dict[str, int] = {}
    pods: dict[str, int] = {}
    running: dict[str, int] = {}
    elastic: dict[str, int] = {}
    for job in snapshot.jobs:
        verdict = result.jobs.get(job.key)
        gang_runs = verdict is not None and verdict.scheduled
        waiting = sum(1 for p in job.pods if p.phase is PodPhase.PENDING)
        for name in chains.get(job.queue, []):
            if job.key in pending:
                groups[name] = groups.get(name, 0) + 1
                pods[name] = pods.get(name, 0) + waiting
            else:
                elastic[name] = elastic.get(name, 0) + waiting
            running[name] = running.get(name, 0) + int(gang_runs)
    by_name = {q.name: q for q in snapshot.queues}
    children: dict[str | None, list[str]] = {}
    for queue in snapshot.queues:
        parent = queue.parent if queue.parent in by_name else None
        children.setdefault(parent, []).append(queue.name)
    rows: list[QueueRow] = []

    def visit(name: str, depth: int, seen: set[str]) -> None:
        if name in seen:
            return
        seen.add(name)
        q = by_name[name]
        status = result.queues.get(name)
        rows.append(
            QueueRow(
                name=name,
                parent=q.parent,
                depth=depth,
                priority=q.priority,
                quota=_vec(q.quota),
                limit=_vec(q.limit),
                weight=_vec(q.over_quota_weight),
                fair_share=dict(status.fair_share) if status is not None else None,
                allocated=dict(status.allocated) if status is not None else None,
                requested=dict(status.requested) if status is not None else None,
                pending_podgroups=groups.get(name, 0),
                pending_pods=pods.get(name, 0),
                running_podgroups=running.get(name, 0),
                usage=dict(status.usage) if status is not None and status.usage else None,
                display_name=names.get(name, ""),
                children=sorted(children.get(name, [])),
                elastic_pending_pods=elastic.get(name, 0),
            )
        )
        for child in sorted(children.get(name, [])):
            visit(child, depth + 1, seen)

    seen: set[str] = set()
    for root in sorted(children.get(None, [])):
        visit(root, 0, seen)
    for name in sorted(by_name):  # queues in a parent cycle have no root: list them flat at the end
        visit(name, 0, seen)
    return rows


def elastic_pending(snapshot: Snapshot, result: LastCycle) -> int:
    """Pods waiting beside a running gang (elastic workers above its minimum): ``pending`` lists gangs, not these."""
    pending = _pending_jobs(snapshot, result)
    return sum(
        sum(1 for p in job.pods if p.phase is PodPhase.PENDING) for job in snapshot.jobs if job.key not in pending
    )


def pending_rows(
    snapshot: Snapshot,
    result: LastCycle,
    queue: str | None = None,
    owners: dict[str, str] | None = None,
) -> list[PendingRow]:
    """Pending workloads in the order the scheduler will try them; those it will not try (invalid, not ready, in a
    missing queue) follow, with their reason. ``queue`` keeps only that queue and its descendants."""
    owners = owners or {}
    pending = _pending_jobs(snapshot, result)
    jobs = {j.key: j for j in snapshot.jobs if j.key in pending}
    chains = _ancestry(snapshot)
    ordered = [k for k in pending_order(snapshot) if k in jobs]
    rest = sorted((k for k in jobs if k not in set(ordered)), key=lambda k: (jobs[k].queue, k))
    rows: list[PendingRow] = []
    in_queue: dict[str, int] = {}
    for i, key in enumerate([*ordered, *rest]):
        job = jobs[key]
        tried = i < len(ordered)
        if tried:
            in_queue[job.queue] = in_queue.get(job.queue, 0) + 1
        if queue is not None and queue not in chains.get(job.queue, [job.queue]):
            continue
        n, req = pending[key]
        verdict = result.jobs.get(key)
        rows.append(
            PendingRow(
                position=i + 1 if tried else None,
                queue_position=in_queue[job.queue] if tried else None,
                queue=job.queue,
                namespace=job.namespace,
                name=job.name,
                owner=owners.get(key, job.kind),
                priority_class=job.priority_class,
                priority=job.priority,
                pending_pods=n,
                min_member=job.min_member,
                requested=_vec(req),
                age_seconds=max(0.0, snapshot.now - job.created_at),
                reason=verdict.reason if verdict is not None else NOT_CONSIDERED,
                message=verdict.message if verdict is not None else "no scheduling cycle has looked at it yet",
            )
        )
    return rows

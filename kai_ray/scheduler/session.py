"""The session: one cycle's mutable picture of the cluster, and the accounting that keeps it consistent.

Why the session is only state: KAI splits a cycle into the cache that builds the session's infos
(:mod:`.build` here), the session that holds and accounts them (this module) and the statement that changes them
with undo records (:mod:`.statement`). Every change of a pod's place or state goes through the statement, which
calls the accounting here (a node's free and releasing room, shared GPU groups, queue charges, gang counters), so
that node, GPU-group, queue and gang counters stay in step whatever the actions try.

Node accounting lives in numpy arrays (one row per resource) so that finding a node for a pod is a few vector
operations over all nodes rather than a Python loop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from kai_ray.scheduler.decisions import Action, Finding, Reason
from kai_ray.scheduler.device_ledger import DeviceLedger
from kai_ray.scheduler.gang import PodSet, SubGroupSet, has_surplus
from kai_ray.scheduler.nodebase import CPU, EPS, GPU, MEM, NodeBase
from kai_ray.scheduler.queues import QueueTree, build_queue_tree
from kai_ray.scheduler.semipreemptible import core_delta, open_core
from kai_ray.scheduler.snapshot import UNLIMITED, Job, Node, Pod, Snapshot

# pod states inside a session
PENDING, BOUND, ALLOCATED, PIPELINED, RELEASING, EVICTED, DONE, IGNORED, STUCK, MOVED = range(10)
ACTIVE = frozenset((BOUND, ALLOCATED, PIPELINED, MOVED))


def le(a: float, b: float) -> bool:
    """a <= b with KAI's meaning of -1 (unlimited) and a small relative tolerance."""
    if b == UNLIMITED:
        return True
    if a == UNLIMITED:
        return False
    return a <= b + EPS * max(1.0, abs(b))


class NodeGroups(dict[int, dict[str, list[float]]]):
    """The shared GPUs of each node (node -> group -> [used fraction, releasing fraction]), a node's table made
    when first asked for.

    Why not one dict per node up front: a cycle touches the shared GPUs of a few nodes, and an incremental session
    opens every second of a trace replay; at 1,500 nodes, making and freeing the empty tables was a tenth of it."""

    def __missing__(self, node: int) -> dict[str, list[float]]:
        groups: dict[str, list[float]] = {}
        self[node] = groups
        return groups


@dataclass(slots=True)
class JobInfo:
    idx: int
    spec: Job
    key: str
    queue: int  # leaf queue index, -1 when unusable
    priority: int
    preemptible: bool
    created_at: float
    uid: str
    root: SubGroupSet
    podsets: dict[str, PodSet]
    pods: list[int] = field(default_factory=list)
    n_active: int = 0
    max_total: int = 1 << 30
    invalid: tuple[Reason, str] | None = None
    ready: bool = True
    # explanation of the cycle (last word wins: actions run in KAI order)
    fail_reason: Reason | None = None
    fail_message: str = ""
    fail_details: dict[str, Any] = field(default_factory=dict)
    touched: bool = False  # got an allocation attempt this cycle
    stale_since: float | None = None  # set by stale-gang eviction when the gang is below its minimum
    n_pend: int = 0  # pods in PENDING state (maintained by allocate / rollback)
    simple: PodSet | None = None  # the only PodSet of a job without subgroups (fast paths)
    rank: int = 0  # position in (created_at, uid) order: victim ordering without string keys
    init_active: list[float] = field(default_factory=list)  # resources of active pods at session open
    init_pending: list[float] = field(default_factory=list)  # requested by pending pods (under ceilings)
    version: int = 0  # bumped on every change of its pods' states: cache key for derived data
    cache: dict[str, Any] = field(default_factory=dict)
    # kai-ray victim order among equals (:mod:`.workloss`): seconds of work an eviction would lose, and why
    risk: float = 0.0
    risk_note: str = ""
    # semi-preemptible (:mod:`.semipreemptible`): its core is non-preemptible, the rest is its preemptible burst;
    # ``core`` is what each PodSet's core (by name) charges the queue's non-preemptible allocation now
    semi: bool = False
    core: dict[str, tuple[float, float, float]] = field(default_factory=dict)

    def has_pending(self, ses: Session) -> bool:
        return self.n_pend > 0

    def elastic_state(self) -> int:
        """0 below min, 1 exactly at min, 2 above min (KAI's elastic plugin, per PodSet)."""
        ps = self.simple
        if ps is not None:
            return 0 if ps.n_active < ps.min else (1 if ps.n_active == ps.min else 2)
        at = True
        for ps in self.podsets.values():
            if ps.n_active < ps.min:
                return 0
            if ps.n_active > ps.min:
                at = False
        return 1 if at else 2

    def min_satisfied(self) -> bool:
        ps = self.simple
        if ps is not None:
            return ps.n_active >= ps.min
        return self.root.satisfied()

    def has_surplus(self) -> bool:
        ps = self.simple
        if ps is not None:
            return ps.n_active > ps.min
        return has_surplus(self.root)

    def fail(self, reason: Reason, message: str, details: dict[str, Any] | None = None) -> None:
        self.fail_reason = reason
        self.fail_message = message
        self.fail_details = details or {}


@dataclass(slots=True)
class EvictInfo:
    action: Action
    reason: Reason
    preemptor: str | None
    message: str
    elastic: bool
    whole_gang: bool


class StatementOps(Protocol):
    """The statement's operations as the actions call them (:class:`~kai_ray.scheduler.statement.Statement`).

    Why a protocol: the statement changes the session, so it is built on top of it; the session names only what
    the actions may ask of its statement."""

    @property
    def log(self) -> Sequence[object]: ...

    def checkpoint(self) -> int: ...

    def rollback(self, cp: int) -> None: ...

    def allocate(self, p: int, node: int, pipelined: bool, group: str | None = None) -> None: ...

    def evict(self, p: int, info: EvictInfo) -> None: ...

    def move(self, p: int, node: int, group: str | None) -> None: ...

    def unevict(self, p: int) -> None: ...

    def convert_to_pipelined(self, job: JobInfo, since: int) -> None: ...


class Session:
    """All state of one scheduling cycle, built by :func:`~kai_ray.scheduler.session_build.build_session` from a
    :class:`Snapshot` (never mutated) and changed by its statement (``stmt``)."""

    stmt: StatementOps  # set by the build: checkpoint, rollback, allocate, evict, move, unevict

    def __init__(self, snapshot: Snapshot, base: NodeBase) -> None:
        """An empty session over ``base``'s nodes: queues resolved, no pods yet (the build places them)."""
        self.snapshot = snapshot
        self.cfg = snapshot.config
        self.now = snapshot.now
        self.findings: list[Finding] = []
        self.tree: QueueTree = build_queue_tree(snapshot.queues)
        self.findings.extend(self.tree.findings)
        self.topologies = {t.name: t for t in snapshot.topologies}
        self.topology_trees: dict[str, Any] = {}  # built on first use by topology.tree_of
        self.xnames: list[str] = base.xnames
        self.xindex: dict[str, int] = base.xindex
        self._open_nodes(base)
        self.jobs: list[JobInfo] = []
        # the jobs with pods pending at session open, in job order: the only ones an action can find pending, as a
        # job's pending count never grows past its count at open (a rollback gives back only what the cycle took)
        self.pending_at_open: list[JobInfo] = []
        self.job_index: dict[str, int] = {}
        self.pods: list[Pod] = []
        self.p_job: list[int] = []
        self.p_set: list[PodSet | None] = []
        self.p_status: list[int] = []
        self.initial_status: list[int] = []  # p_status once the build is done (decisions are the difference)
        self.p_node: list[int] = []
        self.p_group: list[str | None] = []
        self.p_req: list[tuple[float, float, float]] = []  # queue-charge vector (gpu = GPUs or fraction)
        self.p_frac: list[float] = []  # >0: shares one GPU with others
        self.p_gpumem: list[float] = []  # >0: gpu-memory request in MiB (fraction depends on node)
        self.p_start: list[float] = []
        # extended request: (rows of xnames, amounts), None for a pod that asks for none (the common case)
        self.p_xreq: list[tuple[np.ndarray, np.ndarray] | None] = []
        self.p_mig: dict[int, float] = {}  # pods asking for MIG slices: the GPUs KAI charges their queue for them
        self.dra: DeviceLedger | None = None
        self.evict_info: dict[int, EvictInfo] = {}
        self.p_moved: dict[int, tuple[int, str | None]] = {}  # moved pod -> (node, gpu group) of its copy
        self.stats: dict[str, float] = {}
        # per pod, as JobInfo.risk (set by workloss.assess; zeros keep the eviction order as it was)
        self.p_risk: list[float] = []
        self.p_risk_note: dict[int, str] = {}

    def _open_nodes(self, base: NodeBase) -> None:
        """Take the node arrays from ``base``: shared where the cycle only reads them, copied where it writes."""
        self.node_base = base
        self.findings.extend(base.findings)
        self.nodes: list[Node] = base.nodes
        self.node_index: dict[str, int] = base.node_index
        nn = len(self.nodes)
        alloc = base.alloc
        self.alloc = alloc
        self.free = alloc.copy()  # alloc - everything on the node (bound, allocated, pipelined, releasing)
        self.rel = np.zeros((3, nn))  # held by releasing pods
        self.rel_pods = np.zeros(nn, dtype=np.int64)  # pod slots held by releasing pods
        self.pods_free = base.max_pods.copy()
        self.ready = base.ready
        self.node_arange = base.node_arange
        self.masks = base.masks
        self.gpu_mem = base.gpu_mem
        # fractional GPU sharing: node -> group -> [used fraction, releasing fraction]
        self.groups = NodeGroups()
        self.frac_room = np.zeros(nn)  # best idle room on an existing shared GPU
        self.frac_room_future = np.zeros(nn)  # same, counting releasing fractions as free
        self.frac_room_shared = np.zeros(nn)  # future room on a shared GPU that keeps a running tenant
        self.cpu_only = base.cpu_only  # KAI's resourcetype plugin: CPU-only pods prefer CPU-only nodes
        self.slot_dirty: set[int] = set()  # nodes whose per-GPU free shares changed (fragmentation model)
        self.memo: dict[str, Any] = {}  # derived data kept for the cycle (fragmentation model, victim steps)
        self.any_releasing = False
        self.min_gpu_mem = base.min_gpu_mem
        self.max_gpu_mem = base.max_gpu_mem
        self.capacity = list(base.capacity)
        self.xalloc = base.xalloc
        self.xfree = base.xalloc.copy()  # as free, for the extended resources (one row per name in xnames)
        self.xrel = np.zeros_like(base.xalloc)  # as rel

    def close(self) -> None:
        """Drop what the cycle derived and the statement, which points back at the session: with no reference cycle
        left, the session is freed by reference counting as soon as the cycle lets go of it, instead of waiting for
        the cyclic collector to scan it (after a preemption search at 5,000 nodes, 440,000 objects)."""
        self.memo.clear()
        del self.stmt

    def charged(self, p: int) -> tuple[float, float, float]:
        """What pod ``p`` charges its queue: its request, plus the GPUs of its MIG slices (KAI's GetSumGPUs)."""
        req = self.p_req[p]
        if self.p_mig:
            mig = self.p_mig.get(p)
            if mig:
                return (req[0] + mig, req[1], req[2])
        return req

    def build_queue_accounting(self) -> None:
        nq = len(self.tree.nodes)
        self.q_alloc = [[0.0, 0.0, 0.0] for _ in range(nq)]
        self.q_alloc_np = [[0.0, 0.0, 0.0] for _ in range(nq)]
        self.q_request = [[0.0, 0.0, 0.0] for _ in range(nq)]
        nodes = self.tree.nodes
        for job in self.jobs:
            if job.queue < 0:
                continue
            act, pend = job.init_active, job.init_pending
            np_ = not job.preemptible
            core = open_core(self, job.podsets.values(), ACTIVE, job.core) if job.semi else None
            a0, a1, a2 = act
            r0, r1, r2 = a0 + pend[0], a1 + pend[1], a2 + pend[2]
            for qi in nodes[job.queue].chain:
                a, r = self.q_alloc[qi], self.q_request[qi]
                a[0] += a0
                a[1] += a1
                a[2] += a2
                r[0] += r0
                r[1] += r1
                r[2] += r2
                if np_:
                    b = self.q_alloc_np[qi]
                    b[0] += a0
                    b[1] += a1
                    b[2] += a2
                elif core is not None:
                    b = self.q_alloc_np[qi]
                    b[0] += core[0]
                    b[1] += core[1]
                    b[2] += core[2]
        self.q_fair = [[0.0, 0.0, 0.0] for _ in range(nq)]

    # ------------------------------------------------------------------ node accounting
    def node_gpu_fraction(self, p: int, node: int) -> float:
        if self.p_gpumem[p]:
            mem = self.gpu_mem[node]
            return self.p_gpumem[p] / mem if mem > 0 else math.inf
        return self.p_frac[p]

    def _new_group_name(self, node: int) -> str:
        groups = self.groups[node]
        k = 0
        name = self.nodes[node].name
        while f"{name}-gpu{k}" in groups:
            k += 1
        return f"{name}-gpu{k}"

    def refresh_frac(self, node: int) -> None:
        best = 0.0
        best_f = 0.0
        for used, rel in self.groups[node].values():
            best = max(best, 1.0 - used)
            if rel < used - EPS:  # a GPU whose tenants all leave is a whole releasing GPU (counted in rel)
                best_f = max(best_f, 1.0 - used + rel)
        self.frac_room[node] = best
        self.frac_room_future[node] = best_f
        self.frac_room_shared[node] = best_f

    def _group_rel_count(self, node: int, group: str) -> int:
        used, rel = self.groups[node][group]
        return 1 if used > EPS and rel >= used - EPS else 0

    def hold_share(self, node: int, group: str | None, frac: float) -> tuple[str, bool]:
        """Add a fraction to a shared GPU (a new one when ``group`` is None or unknown); returns (group, created).

        Every change to a shared GPU's use goes through here and ``drop_share``, so a GPU whose tenants are all
        leaving stops (or starts) counting as a whole releasing GPU in ``rel`` exactly when its use changes."""
        groups = self.groups[node]
        created = False
        if group is None:
            group = self._new_group_name(node)
        if group not in groups:
            groups[group] = [0.0, 0.0]
            self.free[GPU, node] -= 1.0
            created = True
        before = self._group_rel_count(node, group)
        groups[group][0] += frac
        self.rel[GPU, node] += self._group_rel_count(node, group) - before
        self.refresh_frac(node)
        return group, created

    def drop_share(self, node: int, group: str, frac: float, created: bool) -> None:
        groups = self.groups[node]
        before = self._group_rel_count(node, group)
        groups[group][0] -= frac
        after = self._group_rel_count(node, group) if groups[group][0] > EPS else 0
        self.rel[GPU, node] += after - before
        if created or groups[group][0] <= EPS:
            del groups[group]
            self.free[GPU, node] += 1.0
        self.refresh_frac(node)

    def occupy(self, p: int, node: int, group: str | None) -> tuple[str | None, bool]:
        """Put pod ``p``'s resources on ``node``; returns (gpu group, whether the group was created)."""
        self.slot_dirty.add(node)
        g, c, m = self.p_req[p]
        free = self.free
        created = False
        frac = self.p_frac[p] if not self.p_gpumem[p] else self.node_gpu_fraction(p, node)
        if frac > 0:
            group, created = self.hold_share(node, group, frac)
        else:
            free[GPU, node] -= g
            group = None
        free[CPU, node] -= c
        free[MEM, node] -= m
        self.pods_free[node] -= 1
        x = self.p_xreq[p]
        if x is not None:
            self.xfree[x[0], node] -= x[1]
        self.p_node[p] = node
        self.p_group[p] = group
        return group, created

    def vacate(self, p: int, created: bool) -> None:
        node = self.p_node[p]
        self.slot_dirty.add(node)
        g, c, m = self.p_req[p]
        free = self.free
        group = self.p_group[p]
        if group is not None:
            self.drop_share(node, group, self.p_frac_on_node(p), created)
        else:
            free[GPU, node] += g
        free[CPU, node] += c
        free[MEM, node] += m
        self.pods_free[node] += 1
        x = self.p_xreq[p]
        if x is not None:
            self.xfree[x[0], node] += x[1]
        self.p_node[p] = -1
        self.p_group[p] = None

    def release(self, p: int, sign: float = 1.0) -> None:
        node = self.p_node[p]
        if node < 0:
            return  # running on a node the snapshot does not know: nothing to account
        group = self.p_group[p]
        g, c, m = self.p_req[p]
        if group is not None:
            before = self._group_rel_count(node, group)
            self.groups[node][group][1] += sign * self.p_frac_on_node(p)
            after = self._group_rel_count(node, group)
            self.rel[GPU, node] += after - before
            self.refresh_frac(node)
        else:
            self.rel[GPU, node] += sign * g
        self.rel[CPU, node] += sign * c
        self.rel[MEM, node] += sign * m
        self.rel_pods[node] += 1 if sign > 0 else -1
        x = self.p_xreq[p]
        if x is not None:
            self.xrel[x[0], node] += sign * x[1]
        self.any_releasing = True

    def p_frac_on_node(self, p: int) -> float:
        if self.p_gpumem[p]:
            return self.node_gpu_fraction(p, self.p_node[p])
        return self.p_frac[p]

    # ------------------------------------------------------------------ queue accounting
    def charge(self, job: JobInfo, req: tuple[float, float, float], sign: float) -> None:
        if job.queue < 0:
            return
        np_ = not job.preemptible
        for qi in self.tree.nodes[job.queue].chain:
            a = self.q_alloc[qi]
            a[0] += sign * req[0]
            a[1] += sign * req[1]
            a[2] += sign * req[2]
            if np_:
                b = self.q_alloc_np[qi]
                b[0] += sign * req[0]
                b[1] += sign * req[1]
                b[2] += sign * req[2]

    def count_active(self, job: JobInfo, p: int, sign: int) -> None:
        """Pod ``p`` starts (+1) or stops (-1) holding resources for its job: the queue chain is charged, the gang
        counters follow, and the job's derived data (cached allocation steps) is stale. Pods outside the gang tree
        (unknown subgroup, unusable request) were never counted: only the job's version moves."""
        ps = self.p_set[p]
        if ps is not None:
            self.charge(job, self.charged(p) if self.p_mig else self.p_req[p], sign)
            if job.semi and job.queue >= 0:  # its core's charge, recomputed from its pods (rollback-exact)
                d = core_delta(self, ps, ACTIVE, job.core, p, sign)
                if d is not None:
                    for qi in self.tree.nodes[job.queue].chain:
                        b = self.q_alloc_np[qi]
                        b[0], b[1], b[2] = b[0] + d[0], b[1] + d[1], b[2] + d[2]
            ps.n_active += sign
            job.n_active += sign
        job.version += 1

    def hold(self, p: int, node: int, group: str | None) -> tuple[str | None, bool]:
        """Hold room on ``node`` (and shared GPU ``group``) for a copy of pod ``p``, which keeps its own place
        (a moved victim); returns (gpu group, whether the group was created). :meth:`unhold` gives it back."""
        self.slot_dirty.add(node)
        g, c, m = self.p_req[p]
        free = self.free
        created = False
        frac = self.node_gpu_fraction(p, node) if self.p_gpumem[p] else self.p_frac[p]
        if frac > 0:
            group, created = self.hold_share(node, group, frac)
        else:
            free[GPU, node] -= g
        free[CPU, node] -= c
        free[MEM, node] -= m
        self.pods_free[node] -= 1
        x = self.p_xreq[p]
        if x is not None:
            self.xfree[x[0], node] -= x[1]
        return group, created

    def unhold(self, p: int, node: int, group: str | None, created: bool) -> None:
        self.slot_dirty.add(node)
        g, c, m = self.p_req[p]
        free = self.free
        if group is not None:
            self.drop_share(
                node, group, self.node_gpu_fraction(p, node) if self.p_gpumem[p] else self.p_frac[p], created
            )
        else:
            free[GPU, node] += g
        free[CPU, node] += c
        free[MEM, node] += m
        self.pods_free[node] += 1
        x = self.p_xreq[p]
        if x is not None:
            self.xfree[x[0], node] += x[1]

    def dra_use(self, p: int, sign: int) -> None:
        """Pod ``p`` starts or stops using its claims: a claim nobody active uses has releasing devices."""
        claims = self.pods[p].claims
        if claims and self.dra is not None:
            self.dra.use(claims, sign)

    # ------------------------------------------------------------------ helpers
    def queue_of(self, job: JobInfo) -> int:
        return job.queue

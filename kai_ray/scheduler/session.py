"""The session: one cycle's mutable picture of the cluster, and the statement log that makes what-ifs cheap.

Why one shared operation log instead of copying state: KAI's actions try many hypotheses (place this gang; evict
these victims and place it; ...). Every mutation goes through :meth:`Session.allocate`, :meth:`Session.evict`,
:meth:`Session.move` or :meth:`Session.unevict`, appends a typed undo record (:class:`Allocated`, :class:`Evicted`,
:class:`Moved`, :class:`Unevicted`) and updates node, GPU-group, queue and gang counters in place. A checkpoint is
the log length; rollback undoes records back to it. So a failed hypothesis costs exactly the work
it did, and the final decisions are the difference between the initial and final pod states.

Node accounting lives in numpy arrays (one row per resource) so that finding a node for a pod is a few vector
operations over all nodes rather than a Python loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kai_ray.scheduler.blocks import JobBlock, PodRow
from kai_ray.scheduler.decisions import Action, Finding, Reason
from kai_ray.scheduler.dra import DeviceLedger, Taken
from kai_ray.scheduler.gang import PodSet, SubGroupSet, build_gang_tree, has_surplus, is_ready
from kai_ray.scheduler.nodebase import CPU, EPS, GPU, MEM, NodeBase, mig_gpus
from kai_ray.scheduler.queues import QueueTree, build_queue_tree
from kai_ray.scheduler.semipreemptible import core_delta, job_mode, open_core
from kai_ray.scheduler.snapshot import UNLIMITED, Job, Node, Pod, PodPhase, Preemptibility, Snapshot

# pod states inside a session
PENDING, BOUND, ALLOCATED, PIPELINED, RELEASING, EVICTED, DONE, IGNORED, STUCK, MOVED = range(10)
ACTIVE = frozenset((BOUND, ALLOCATED, PIPELINED, MOVED))

_PHASES = {
    PodPhase.PENDING: PENDING,
    PodPhase.RUNNING: BOUND,
    PodPhase.PIPELINED: PIPELINED,
    PodPhase.RELEASING: RELEASING,
    PodPhase.STUCK_RELEASING: STUCK,
    PodPhase.SUCCEEDED: DONE,
    PodPhase.FAILED: DONE,
}


def _pod_sort_key(p: Pod) -> tuple[str, str]:
    return (p.uid, p.name)


def _pod_uids(j: Job) -> list[str]:
    return [p.uid for p in j.pods]


def le(a: float, b: float) -> bool:
    """a <= b with KAI's meaning of -1 (unlimited) and a small relative tolerance."""
    if b == UNLIMITED:
        return True
    if a == UNLIMITED:
        return False
    return a <= b + EPS * max(1.0, abs(b))


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


@dataclass(slots=True)
class Allocated:
    """Undo record of :meth:`Session.allocate`: ``pod`` was pending and asked for ``prev_req``."""

    pod: int
    created: bool  # a shared GPU was opened for it
    prev_req: tuple[float, float, float]
    dra: Taken | None = None  # DRA devices it took (claims it allocated)


@dataclass(slots=True)
class Evicted:
    """Undo record of :meth:`Session.evict`: ``pod``'s status and eviction record before."""

    pod: int
    prev_status: int
    prev_info: EvictInfo | None


@dataclass(slots=True)
class Moved:
    """Undo record of :meth:`Session.move`: room held on ``node`` (and shared GPU ``group``) for the pod's copy."""

    pod: int
    node: int
    group: str | None
    created: bool


@dataclass(slots=True)
class Unevicted:
    """Undo record of :meth:`Session.unevict`: the eviction record it cancelled."""

    pod: int
    info: EvictInfo


Op = Allocated | Evicted | Moved | Unevicted  # slotted dataclasses: half the cost of a NamedTuple per record


class Session:
    """All state of one scheduling cycle. Built from a :class:`Snapshot`; never mutates the snapshot."""

    def __init__(
        self, snapshot: Snapshot, nodes: NodeBase | None = None, blocks: dict[str, JobBlock] | None = None
    ) -> None:
        """``nodes``: the node arrays of an earlier cycle over the same nodes (:class:`NodeBase`), reused when they
        have the extended-resource rows this snapshot needs; built from ``snapshot.nodes`` otherwise. ``blocks``:
        PodGroups as earlier cycles saw them (:class:`JobBlock` by key), reused when still valid (same ``Job``
        object, same nodes and rows) and refilled with the ones this session builds; the caller drops the block of
        a PodGroup that changed (:class:`~kai_ray.scheduler.incremental.IncrementalState`)."""
        self.snapshot = snapshot
        self.cfg = snapshot.config
        self.now = snapshot.now
        self.findings: list[Finding] = []
        self.tree: QueueTree = build_queue_tree(snapshot.queues)
        self.findings.extend(self.tree.findings)
        self.topologies = {t.name: t for t in snapshot.topologies}
        self.topology_trees: dict[str, Any] = {}  # built on first use by topology.tree_of
        self._name_extended(snapshot)
        if nodes is None or nodes.xnames != self.xnames:
            nodes = NodeBase(snapshot.nodes, self.xnames)
        self._open_nodes(nodes)
        self._build_jobs(snapshot.jobs, blocks)
        self._build_queue_accounting()
        self.dra: DeviceLedger | None = None
        if snapshot.claims:
            self.dra = DeviceLedger(snapshot.devices, snapshot.claims, self.node_index)
            for p, st in enumerate(self.p_status):
                if st in ACTIVE and self.pods[p].claims:
                    self.dra.use(self.pods[p].claims, 1)
        self.log: list[Op] = []
        self.evict_info: dict[int, EvictInfo] = {}
        self.p_moved: dict[int, tuple[int, str | None]] = {}  # moved pod -> (node, gpu group) of its copy
        self.stats: dict[str, float] = {}
        # per pod, as JobInfo.risk (set by workloss.assess; zeros keep the eviction order as it was)
        self.p_risk: list[float] = [0.0] * len(self.pods)
        self.p_risk_note: dict[int, str] = {}

    # ------------------------------------------------------------------ building
    def _name_extended(self, snapshot: Snapshot) -> None:
        """One row per resource beyond gpu, cpu and memory that some node has or some pod asks for.

        Why dense rows over the names the cluster actually has, and not a mapping per pod: fitting stays one
        vectorised comparison per pod, and a cluster without such resources pays nothing (zero rows)."""
        names: set[str] = set()
        for n in snapshot.nodes:
            if n.extended:
                names.update(n.extended)
        for j in snapshot.jobs:
            for pod in j.pods:
                if pod.extended:
                    names.update(pod.extended)
        self.xnames: list[str] = sorted(names)
        self.xindex: dict[str, int] = {k: i for i, k in enumerate(self.xnames)}

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
        self.groups: list[dict[str, list[float]]] = [{} for _ in range(nn)]
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

    def _build_jobs(self, jobs: list[Job], blocks: dict[str, JobBlock] | None) -> None:
        self._queues_seen: dict[str, tuple[int, tuple[Reason, str] | None]] = {}
        self.jobs: list[JobInfo] = []
        self.job_index: dict[str, int] = {}
        self.pods: list[Pod] = []
        self.p_job: list[int] = []
        self.p_set: list[PodSet | None] = []
        self.p_status: list[int] = []
        self.p_node: list[int] = []
        self.p_group: list[str | None] = []
        self.p_req: list[tuple[float, float, float]] = []  # queue-charge vector (gpu = GPUs or fraction)
        self.p_frac: list[float] = []  # >0: shares one GPU with others
        self.p_gpumem: list[float] = []  # >0: gpu-memory request in MiB (fraction depends on node)
        self.p_start: list[float] = []
        # extended request: (rows of xnames, amounts), None for a pod that asks for none (the common case)
        self.p_xreq: list[tuple[np.ndarray, np.ndarray] | None] = []
        self.p_mig: dict[int, float] = {}  # pods asking for MIG slices: the GPUs KAI charges their queue for them
        # whole-GPU pods already on nodes: accounted in one vectorised step after the loop
        self._init_nodes: list[int] = []
        self._init_req: list[tuple[float, float, float]] = []
        self._init_rel: list[int] = []
        seen_pods: set[str] = set()
        by_key: dict[str, Job] = {}
        for j in jobs:
            key = j.key
            if key in by_key:
                self.findings.append(Finding("PodGroup", key, "name", "duplicate PodGroup; the first is used"))
                continue
            by_key[key] = j
        for key in sorted(by_key):
            j = by_key[key]
            if blocks is None:  # from scratch: each block is built for this session and placed once
                self._place_block(self._job_block(key, j, seen_pods))
                continue
            block = blocks.get(key)
            if (
                block is None
                or block.spec is not j
                or block.base is not self.node_base
                or block.xnames != self.xnames
                or not seen_pods.isdisjoint(block.uids)
            ):
                fresh = seen_pods.isdisjoint(_pod_uids(j))
                block = self._job_block(key, j, set() if fresh else seen_pods)
                if fresh:
                    block.seal()  # kept: laid out by column once, placed with list extensions from now on
                    blocks[key] = block
            seen_pods.update(block.uids)
            self._place_block(block)
        self._apply_initial_nodes()
        for rank, job in enumerate(sorted(self.jobs, key=lambda jb: (jb.created_at, jb.uid))):
            job.rank = rank
        self.initial_status = list(self.p_status)

    def _apply_initial_nodes(self) -> None:
        if self._init_nodes:
            idx = np.asarray(self._init_nodes, dtype=np.int64)
            req = np.asarray(self._init_req, dtype=np.float64)
            nn = len(self.nodes)
            for r in range(3):
                self.free[r] -= np.bincount(idx, weights=req[:, r], minlength=nn)
            self.pods_free -= np.bincount(idx, minlength=nn)
            rel = np.asarray(self._init_rel, dtype=bool)
            if rel.any():
                ridx = idx[rel]
                for r in range(3):
                    self.rel[r] += np.bincount(ridx, weights=req[rel, r], minlength=nn)
                self.rel_pods += np.bincount(ridx, minlength=nn)
                self.any_releasing = True
        del self._init_nodes, self._init_req, self._init_rel

    def _queue_for(self, key: str, queue: str) -> tuple[int, tuple[Reason, str] | None]:
        hit = self._queues_seen.get(queue)
        if hit is None:
            hit = self._queues_seen[queue] = self._resolve_queue(queue)
        return hit

    def _resolve_queue(self, queue: str) -> tuple[int, tuple[Reason, str] | None]:
        q = self.tree.get(queue)
        if q is None:
            if queue in self.tree.invalid:
                return -1, (Reason.QUEUE_INVALID, f"queue {queue!r} is unusable: {self.tree.invalid[queue]}")
            return -1, (Reason.QUEUE_DOES_NOT_EXIST, f"queue {queue!r} does not exist")
        if not q.is_leaf:
            return -1, (Reason.QUEUE_NOT_LEAF, f"queue {queue!r} has child queues; only leaf queues hold jobs")
        return q.idx, None

    def _job_block(self, key: str, j: Job, seen_pods: set[str]) -> JobBlock:
        """What ``j`` brings to the session, with the findings it raises; pods whose uid is in ``seen_pods`` (an
        earlier PodGroup's) are left out, and the block's own uids are added to it."""
        root, podsets, err = build_gang_tree(j)
        block = JobBlock(key, j, root, podsets, None, self.node_base, self.xnames)
        findings = block.findings
        if err:
            findings.append(Finding("PodGroup", key, "subGroups", err))
            block.invalid = (Reason.INVALID, err)
        if j.max_member is not None:
            total_min = sum(ps.min for ps in podsets.values())
            if j.max_member < total_min:
                findings.append(
                    Finding(
                        "PodGroup",
                        key,
                        "maxMember",
                        f"max-member {j.max_member} is below the gang minimum {total_min}; using {total_min}",
                    )
                )
            block.max_total = max(j.max_member, total_min)
        simple = block.simple
        pods = j.pods if len(j.pods) < 2 else sorted(j.pods, key=_pod_sort_key)
        # running totals for queue accounting: active, pending (under the elastic ceilings)
        act = block.act
        pend = block.pend
        pend_count: dict[int, int] = {}
        n_pend = n_active = 0
        for pod in pods:
            uid = pod.uid
            if uid in seen_pods:
                findings.append(Finding("Pod", uid, "uid", "duplicate pod uid; the first is used"))
                continue
            seen_pods.add(uid)
            block.uids.append(uid)
            row = self._pod_row(key, pod, podsets, simple, findings)
            block.rows.append(row)
            ps = row.set
            if ps is None:
                continue
            status = row.status
            if status == PENDING:
                n_pend += 1
            elif status in ACTIVE:
                ps.n_active += 1
                n_active += 1
            if status not in (DONE, STUCK) and not pod.gated:
                ps.n_alive += 1
            req = row.req if not row.mig else (row.req[0] + row.mig, row.req[1], row.req[2])
            if status in ACTIVE:
                act[0] += req[0]
                act[1] += req[1]
                act[2] += req[2]
            elif status == PENDING and not pod.gated:
                k = id(ps)
                n = pend_count.get(k, 0)
                if ps.n_active + n < ps.max:
                    pend_count[k] = n + 1
                    pend[0] += req[0]
                    pend[1] += req[1]
                    pend[2] += req[2]
        block.ready = simple.n_alive >= simple.min if simple is not None else is_ready(root)
        block.n_pend = n_pend
        block.n_active = n_active
        return block

    def _place_block(self, block: JobBlock) -> None:
        """Append ``block``'s job and pods to the session and count its pods on their nodes and GPUs; a block kept
        from an earlier cycle is placed exactly as a new one (its gang counters are set back to the block's)."""
        j = block.spec
        key = block.key
        self.findings.extend(block.findings)
        qidx, qerr = self._queue_for(key, j.queue)
        mode, note = job_mode(j, block.root, self.tree.nodes[qidx].default_preemptibility if qidx >= 0 else None)
        if note:
            self.findings.append(Finding("PodGroup", key, "preemptibility", note))
        info = JobInfo(
            idx=len(self.jobs),
            spec=j,
            key=key,
            queue=qidx,
            priority=int(j.priority),
            preemptible=mode is not Preemptibility.NON_PREEMPTIBLE,
            semi=mode is Preemptibility.SEMI_PREEMPTIBLE,
            created_at=float(j.created_at),
            uid=j.uid or key,
            root=block.root,
            podsets=block.podsets,
            invalid=block.invalid or qerr,
        )
        info.max_total = block.max_total
        info.simple = block.simple
        info.n_pend = block.n_pend
        info.n_active = block.n_active
        info.ready = block.ready
        # read only (queue accounting); a kept block's own lists are shared with the sessions that place it
        info.init_active = block.act
        info.init_pending = block.pend
        self.job_index[key] = info.idx
        self.jobs.append(info)
        jidx = info.idx
        if not block.sealed:
            self._place_rows(info, block)
            return
        p0 = len(self.pods)
        n = len(block.rows)
        info.pods = list(range(p0, p0 + n))
        for ps, n_active, n_alive, members in block.set_counts:
            ps.n_active = n_active
            ps.n_alive = n_alive
            ps.pods = [p0 + i for i in members]
        self.pods.extend(block.col_pods)
        self.p_job.extend([jidx] * n)
        self.p_set.extend(block.col_sets)
        self.p_status.extend(block.col_status)
        self.p_node.extend(block.col_node)
        self.p_group.extend([None] * n)
        self.p_req.extend(block.col_req)
        self.p_frac.extend(block.col_frac)
        self.p_gpumem.extend(block.col_gpumem)
        if block.unstarted:
            now = self.now
            self.p_start.extend(now if t is None else t for t in block.col_start)
        else:
            self.p_start.extend(block.col_start)  # type: ignore[arg-type]  # no None when nothing is unstarted
        self.p_xreq.extend(block.col_xreq)
        for i, mig in block.migs:
            self.p_mig[p0 + i] = mig
        rows = block.rows
        for i in block.on_node:
            self._hold_row(p0 + i, rows[i])

    def _place_rows(self, info: JobInfo, block: JobBlock) -> None:
        """``_place_block`` for a block built for this session alone: row by row, without the column layout a
        kept block pays for once (a from-scratch session places each block once)."""
        for ps in block.podsets.values():
            ps.pods = []
        jidx = info.idx
        now = self.now
        for row in block.rows:
            p = len(self.pods)
            pod = row.pod
            self.pods.append(pod)
            info.pods.append(p)
            self.p_job.append(jidx)
            pset = row.set
            if pset is not None:
                pset.pods.append(p)
            self.p_set.append(pset)
            self.p_status.append(row.status)
            self.p_node.append(row.node)
            self.p_group.append(None)
            self.p_req.append(row.req)
            self.p_frac.append(row.frac)
            self.p_gpumem.append(row.gpumem)
            self.p_start.append(pod.start_time if pod.start_time is not None else now)
            self.p_xreq.append(row.xreq)
            if row.mig:
                self.p_mig[p] = row.mig
            if row.node >= 0:
                self._hold_row(p, row)

    def _hold_row(self, p: int, row: PodRow) -> None:
        """Count pod ``p`` (``row``), which runs, is pipelined or is releasing, on its node."""
        pod = row.pod
        status = row.status
        node = row.node
        xreq = row.xreq
        if row.frac or row.gpumem:
            group, _ = self._occupy(p, node, pod.gpu_group)
            if status == RELEASING:
                self._release(p)
            elif status == PIPELINED and group is not None:
                # a shared GPU whose tenant is only pipelined has no bound reservation yet (KAI): the rest of
                # it can only be pipelined onto, so its idle room is held as if it were being released
                rec = self.groups[node][group]
                rec[1] += max(0.0, 1.0 - rec[0])
                rec[0] = 1.0
                self._refresh_frac(node)
        else:
            self._init_nodes.append(node)
            self._init_req.append(row.req)
            self._init_rel.append(status == RELEASING)
            if xreq is not None:  # the shared-GPU path above holds them through _occupy and _release
                self.xfree[xreq[0], node] -= xreq[1]
                if status == RELEASING:
                    self.xrel[xreq[0], node] += xreq[1]

    def _pod_row(
        self, key: str, pod: Pod, podsets: dict[str, PodSet], simple: PodSet | None, findings: list[Finding]
    ) -> PodRow:
        status = _PHASES[pod.phase]
        node = -1
        if status in (BOUND, PIPELINED, RELEASING, STUCK):
            n = self.node_index.get(pod.node) if pod.node is not None else None
            if n is None:
                msg = f"bound to unknown node {pod.node!r}; its resources are not counted"
                findings.append(Finding("Pod", pod.uid, "nodeName", msg))
            else:
                node = n
        elif status == PENDING and pod.node:
            n = self.node_index.get(pod.node)
            if n is not None:  # a pending pod that already names a node is bound there (KAI: Bound/Binding)
                node = n
                status = BOUND
        ps: PodSet | None
        if simple is not None:
            ps = simple
        else:
            ps = podsets.get(pod.subgroup or "")
            if ps is None:
                msg = f"subgroup {pod.subgroup!r} is not in PodGroup {key}; the pod is never scheduled"
                findings.append(Finding("Pod", pod.uid, "subgroup", msg))
        req = pod.request
        g, c, m = req.gpu, req.cpu, req.memory
        if not (g >= 0 and c >= 0 and m >= 0):  # also catches NaN
            findings.append(Finding("Pod", pod.uid, "resources", "negative request treated as 0"))
            g, c, m = (v if v >= 0 else 0.0 for v in (g, c, m))
        if math.inf in (g, c, m):
            findings.append(Finding("Pod", pod.uid, "resources", "infinite request; the pod is never scheduled"))
            g, c, m = (0.0 if v == math.inf else v for v in (g, c, m))
            ps = None
        frac = 0.0
        gpumem = 0.0
        if pod.gpu_fraction is not None:
            f = pod.gpu_fraction
            if not (0 < f <= 1):
                msg = f"gpu-fraction {f} outside (0, 1]; the pod is never scheduled"
                findings.append(Finding("Pod", pod.uid, "gpu-fraction", msg))
                ps = None
            else:
                frac = float(f)
                g = frac
        elif pod.gpu_memory_mib is not None:
            if not pod.gpu_memory_mib > 0:
                msg = "gpu-memory must be positive; the pod is never scheduled"
                findings.append(Finding("Pod", pod.uid, "gpu-memory", msg))
                ps = None
            else:
                gpumem = float(pod.gpu_memory_mib)
                g = gpumem / self.min_gpu_mem if self.min_gpu_mem > 0 else 0.0
        elif g % 1.0:
            msg = f"whole-GPU request {g} is not an integer; using {math.ceil(g)}"
            findings.append(Finding("Pod", pod.uid, "nvidia.com/gpu", msg))
            g = float(math.ceil(g))
        xreq = self._extended_request(pod, findings) if pod.extended else None
        if xreq is not None and xreq[1].size and math.inf in xreq[1]:
            findings.append(Finding("Pod", pod.uid, "resources", "infinite request; the pod is never scheduled"))
            ps = None
        if ps is None and status == PENDING:
            status = IGNORED
        mig = mig_gpus(pod.extended) if pod.extended else 0.0
        if node >= 0 and gpumem and self.gpu_mem[node] > 0:
            g = min(1.0, gpumem / self.gpu_mem[node])
            frac = g
        return PodRow(pod, status, node, ps, (g, c, m), frac, gpumem, xreq, mig)

    def _extended_request(self, pod: Pod, findings: list[Finding]) -> tuple[np.ndarray, np.ndarray] | None:
        rows: list[int] = []
        amounts: list[float] = []
        for name, v in pod.extended.items():
            if not v >= 0:  # also catches NaN
                findings.append(Finding("Pod", pod.uid, "resources", f"negative {name} request treated as 0"))
                continue
            if v > 0:
                rows.append(self.xindex[name])
                amounts.append(float(v))
        if not rows:
            return None
        return np.asarray(rows, dtype=np.int64), np.asarray(amounts, dtype=np.float64)

    def charged(self, p: int) -> tuple[float, float, float]:
        """What pod ``p`` charges its queue: its request, plus the GPUs of its MIG slices (KAI's GetSumGPUs)."""
        req = self.p_req[p]
        if self.p_mig:
            mig = self.p_mig.get(p)
            if mig:
                return (req[0] + mig, req[1], req[2])
        return req

    def _build_queue_accounting(self) -> None:
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
            for qi in nodes[job.queue].chain:
                a, r = self.q_alloc[qi], self.q_request[qi]
                for k in range(3):
                    a[k] += act[k]
                    r[k] += act[k] + pend[k]
                if np_:
                    b = self.q_alloc_np[qi]
                    for k in range(3):
                        b[k] += act[k]
                elif core is not None:
                    b = self.q_alloc_np[qi]
                    for k in range(3):
                        b[k] += core[k]
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

    def _refresh_frac(self, node: int) -> None:
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

    def _hold_share(self, node: int, group: str | None, frac: float) -> tuple[str, bool]:
        """Add a fraction to a shared GPU (a new one when ``group`` is None or unknown); returns (group, created).

        Every change to a shared GPU's use goes through here and ``_drop_share``, so a GPU whose tenants are all
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
        self._refresh_frac(node)
        return group, created

    def _drop_share(self, node: int, group: str, frac: float, created: bool) -> None:
        groups = self.groups[node]
        before = self._group_rel_count(node, group)
        groups[group][0] -= frac
        after = self._group_rel_count(node, group) if groups[group][0] > EPS else 0
        self.rel[GPU, node] += after - before
        if created or groups[group][0] <= EPS:
            del groups[group]
            self.free[GPU, node] += 1.0
        self._refresh_frac(node)

    def _occupy(self, p: int, node: int, group: str | None) -> tuple[str | None, bool]:
        """Put pod ``p``'s resources on ``node``; returns (gpu group, whether the group was created)."""
        self.slot_dirty.add(node)
        g, c, m = self.p_req[p]
        free = self.free
        created = False
        frac = self.p_frac[p] if not self.p_gpumem[p] else self.node_gpu_fraction(p, node)
        if frac > 0:
            group, created = self._hold_share(node, group, frac)
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

    def _vacate(self, p: int, created: bool) -> None:
        node = self.p_node[p]
        self.slot_dirty.add(node)
        g, c, m = self.p_req[p]
        free = self.free
        group = self.p_group[p]
        if group is not None:
            self._drop_share(node, group, self.p_frac_on_node(p), created)
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

    def _release(self, p: int, sign: float = 1.0) -> None:
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
            self._refresh_frac(node)
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

    # ------------------------------------------------------------------ statement operations
    def checkpoint(self) -> int:
        return len(self.log)

    def rollback(self, cp: int) -> None:
        log = self.log
        while len(log) > cp:
            op = log.pop()
            p = op.pod
            job = self.jobs[self.p_job[p]]
            if isinstance(op, Unevicted):
                self.p_status[p] = EVICTED
                self._release(p)
                self._count_active(job, p, -1)
                self.evict_info[p] = op.info
                self._dra_use(p, -1)
            elif isinstance(op, Moved):
                self._unhold(p, op.node, op.group, op.created)
                self._count_active(job, p, -1)
                self._dra_use(p, -1)
                self.p_status[p] = EVICTED
                del self.p_moved[p]
            elif isinstance(op, Allocated):
                self._vacate(p, op.created)
                self._count_active(job, p, -1)
                if op.dra is not None and self.dra is not None:
                    self.dra.untake(op.dra)
                self.p_req[p] = op.prev_req
                self.p_status[p] = PENDING
                job.n_pend += 1
            else:
                self._release(p, -1.0)
                self.p_status[p] = op.prev_status
                self._count_active(job, p, 1)
                self._dra_use(p, 1)
                if op.prev_info is None:
                    self.evict_info.pop(p, None)
                else:
                    self.evict_info[p] = op.prev_info

    def _count_active(self, job: JobInfo, p: int, sign: int) -> None:
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

    def allocate(self, p: int, node: int, pipelined: bool, group: str | None = None) -> None:
        job = self.jobs[self.p_job[p]]
        prev_req = self.p_req[p]
        if self.p_gpumem[p]:
            f = min(1.0, self.node_gpu_fraction(p, node))
            self.p_req[p] = (f, prev_req[1], prev_req[2])
            self.p_frac[p] = f
        _, created = self._occupy(p, node, group)
        self._count_active(job, p, 1)
        self.p_status[p] = PIPELINED if pipelined else ALLOCATED
        job.n_pend -= 1
        claims = self.pods[p].claims
        taken = self.dra.take(claims, node, pipelined) if claims and self.dra is not None else None
        self.log.append(Allocated(p, created, prev_req, taken))

    def evict(self, p: int, info: EvictInfo) -> None:
        job = self.jobs[self.p_job[p]]
        prev = self.p_status[p]
        self.p_status[p] = EVICTED
        self._release(p)
        self._count_active(job, p, -1)
        self._dra_use(p, -1)
        self.log.append(Evicted(p, prev, self.evict_info.get(p)))
        self.evict_info[p] = info

    def move(self, p: int, node: int, group: str | None) -> None:
        """Re-place evicted pod ``p`` on ``node`` (KAI's pipelined victim): its controller re-creates it, and the
        room for the copy is held now so later decisions of the cycle do not take it. The pod stays charged to its
        queue and counted in its gang, which keeps running."""
        self.slot_dirty.add(node)
        g, c, m = self.p_req[p]
        free = self.free
        created = False
        frac = self.node_gpu_fraction(p, node) if self.p_gpumem[p] else self.p_frac[p]
        if frac > 0:
            group, created = self._hold_share(node, group, frac)
        else:
            free[GPU, node] -= g
        free[CPU, node] -= c
        free[MEM, node] -= m
        self.pods_free[node] -= 1
        x = self.p_xreq[p]
        if x is not None:
            self.xfree[x[0], node] -= x[1]
        job = self.jobs[self.p_job[p]]
        self._count_active(job, p, 1)
        self.p_status[p] = MOVED
        self._dra_use(p, 1)
        self.p_moved[p] = (node, group)
        self.log.append(Moved(p, node, group, created))

    def unevict(self, p: int) -> None:
        """Cancel the eviction of ``p`` within the statement (KAI: a victim re-placed where it already runs)."""
        job = self.jobs[self.p_job[p]]
        assert self.p_status[p] == EVICTED
        info = self.evict_info.pop(p)
        self._release(p, -1.0)
        self.p_status[p] = next(op.prev_status for op in reversed(self.log) if isinstance(op, Evicted) and op.pod == p)
        self._count_active(job, p, 1)
        self._dra_use(p, 1)
        self.log.append(Unevicted(p, info))

    def _unhold(self, p: int, node: int, group: str | None, created: bool) -> None:
        self.slot_dirty.add(node)
        g, c, m = self.p_req[p]
        free = self.free
        if group is not None:
            self._drop_share(
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

    def convert_to_pipelined(self, job: JobInfo, since: int) -> None:
        """KAI: once one task of a job is pipelined, all its tasks allocated in the statement are pipelined."""
        st = self.p_status
        for op in self.log[since:]:
            if isinstance(op, Allocated) and self.p_job[op.pod] == job.idx and st[op.pod] == ALLOCATED:
                st[op.pod] = PIPELINED

    def _dra_use(self, p: int, sign: int) -> None:
        """Pod ``p`` starts or stops using its claims: a claim nobody active uses has releasing devices."""
        claims = self.pods[p].claims
        if claims and self.dra is not None:
            self.dra.use(claims, sign)

    # ------------------------------------------------------------------ helpers
    def queue_of(self, job: JobInfo) -> int:
        return job.queue

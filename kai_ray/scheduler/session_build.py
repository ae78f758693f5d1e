"""The build: a snapshot turned into a session's arrays (KAI's cache building the ``api/*_info`` of a session).

Why apart from the session: building reads the snapshot once (validating requests, resolving nodes and queues,
building gang trees, counting running pods on their nodes) and is done when the cycle starts; the session then
only holds and accounts state, and the statement changes it. The build also decides what an
:class:`~kai_ray.scheduler.incremental.IncrementalState` may reuse: node arrays (:class:`NodeBase`), PodGroup
blocks (:class:`JobBlock`) from earlier cycles when still valid, and, when every block could be kept, the last
placement (:mod:`.placed`), which gives the session a from-scratch build gives.
"""

from __future__ import annotations

import math

import numpy as np

from kai_ray.scheduler.blocks import JobBlock, PodRow
from kai_ray.scheduler.decisions import Finding, Reason
from kai_ray.scheduler.device_ledger import DeviceLedger
from kai_ray.scheduler.gang import PodSet, build_gang_tree, is_ready
from kai_ray.scheduler.nodebase import NodeBase, mig_gpus, node_extended_names
from kai_ray.scheduler.placed import PlacedLayout, place_kept
from kai_ray.scheduler.semipreemptible import job_mode
from kai_ray.scheduler.session import (
    ACTIVE,
    BOUND,
    DONE,
    IGNORED,
    PENDING,
    PIPELINED,
    RELEASING,
    STUCK,
    JobInfo,
    Session,
)
from kai_ray.scheduler.snapshot import Job, Pod, PodPhase, Preemptibility, Snapshot
from kai_ray.scheduler.statement import Statement

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


def extended_names(snapshot: Snapshot, nodes: NodeBase | None = None) -> list[str]:
    """One row per resource beyond gpu, cpu and memory that some node has or some pod asks for; ``nodes``: the
    node arrays of an earlier cycle over the same nodes, which know what the nodes have.

    Why dense rows over the names the cluster actually has, and not a mapping per pod: fitting stays one
    vectorised comparison per pod, and a cluster without such resources pays nothing (zero rows)."""
    names = set(nodes.node_xnames) if nodes is not None else node_extended_names(snapshot.nodes)
    for j in snapshot.jobs:
        for pod in j.pods:
            if pod.extended:
                names.update(pod.extended)
    return sorted(names)


def build_session(
    snapshot: Snapshot, nodes: NodeBase | None = None, blocks: dict[str, JobBlock] | None = None
) -> Session:
    """The session of one cycle over ``snapshot``; never mutates the snapshot.

    ``nodes``: the node arrays of an earlier cycle over the same nodes, reused when they have the
    extended-resource rows this snapshot needs; built from ``snapshot.nodes`` otherwise. ``blocks``: PodGroups as
    earlier cycles saw them (by key), reused when still valid (same ``Job`` object, same nodes and rows) and
    refilled with the ones this build makes; the caller drops the block of a PodGroup that changed
    (:class:`~kai_ray.scheduler.incremental.IncrementalState`)."""
    return build_kept(snapshot, nodes, blocks, None)[0]


def build_kept(
    snapshot: Snapshot, nodes: NodeBase | None, blocks: dict[str, JobBlock] | None, layout: PlacedLayout | None
) -> tuple[Session, PlacedLayout | None]:
    """:func:`build_session`, also keeping the placement: with ``blocks``, the PodGroups are placed from
    ``layout`` (the last session's placement, or None) where they did not change, and the new placement is
    returned for the next cycle (None when it could not be kept: a pod uid in two PodGroups)."""
    xnames = extended_names(snapshot, nodes)
    if nodes is None or nodes.xnames != xnames:
        nodes = NodeBase(snapshot.nodes, xnames)
    ses = Session(snapshot, nodes)
    placed = SessionBuild(ses).build_jobs(snapshot.jobs, blocks, layout)
    ses.pending_at_open = [job for job in ses.jobs if job.n_pend]
    ses.build_queue_accounting()
    if snapshot.claims:
        dra = ses.dra = DeviceLedger(snapshot.devices, snapshot.claims, ses.node_index)
        for p, st in enumerate(ses.p_status):
            if st in ACTIVE and ses.pods[p].claims:
                dra.use(ses.pods[p].claims, 1)
    ses.p_risk = [0.0] * len(ses.pods)
    ses.stmt = Statement(ses)
    return ses, placed


class SessionBuild:
    """Fills a new session's job and pod rows from the snapshot's PodGroups, one :class:`JobBlock` each.

    Holds what only the build needs: the queue lookups made so far and the whole-GPU pods already on nodes, which
    are counted in one vectorised step once every block is placed."""

    def __init__(self, ses: Session) -> None:
        self.ses = ses
        self._queues_seen: dict[str, tuple[int, tuple[Reason, str] | None]] = {}
        self._init_nodes: list[int] = []
        self._init_req: list[tuple[float, float, float]] = []
        self._init_rel: list[bool] = []

    def build_jobs(
        self, jobs: list[Job], blocks: dict[str, JobBlock] | None, layout: PlacedLayout | None = None
    ) -> PlacedLayout | None:
        """Place every PodGroup of the snapshot (in key order), reusing the still-valid ``blocks`` and refilling
        them with the ones built here, and, when every block could be kept, the unchanged part of ``layout``;
        returns the placement the next cycle may keep (None without ``blocks`` or when a block could not be kept)."""
        ses = self.ses
        seen_pods: set[str] = set()
        by_key: dict[str, Job] = {}
        for j in jobs:
            key = j.key
            if key in by_key:
                ses.findings.append(Finding("PodGroup", key, "name", "duplicate PodGroup; the first is used"))
                continue
            by_key[key] = j
        placed: PlacedLayout | None = None
        if blocks is None:  # from scratch: each block is built for this session and placed once
            for key in sorted(by_key):
                self.place_block(self._job_block(key, by_key[key], seen_pods))
        else:
            entries: list[tuple[str, JobBlock]] = []
            all_kept = True
            for key in sorted(by_key):
                j = by_key[key]
                block = blocks.get(key)
                if (
                    block is None
                    or block.spec is not j
                    or block.base is not ses.node_base
                    or block.xnames != ses.xnames
                    or not seen_pods.isdisjoint(block.uids)
                ):
                    fresh = seen_pods.isdisjoint(_pod_uids(j))
                    block = self._job_block(key, j, set() if fresh else seen_pods)
                    if fresh:
                        block.seal(RELEASING)  # kept: laid out by column once, placed with list extensions from now on
                        blocks[key] = block
                    else:
                        all_kept = False
                seen_pods.update(block.uids)
                entries.append((key, block))
            if all_kept:
                placed = place_kept(self, entries, layout)
            else:
                for _, block in entries:
                    self.place_block(block)
        self.apply_initial_nodes()
        for rank, job in enumerate(sorted(ses.jobs, key=lambda jb: (jb.created_at, jb.uid))):
            job.rank = rank
        ses.initial_status = list(ses.p_status)
        return placed

    def apply_initial_nodes(self) -> None:
        """Take the whole-GPU pods placed so far off their nodes in one vectorised step (then forget them)."""
        ses = self.ses
        if self._init_nodes:
            idx = np.asarray(self._init_nodes, dtype=np.int64)
            req = np.asarray(self._init_req, dtype=np.float64)
            nn = len(ses.nodes)
            for r in range(3):
                ses.free[r] -= np.bincount(idx, weights=req[:, r], minlength=nn)
            ses.pods_free -= np.bincount(idx, minlength=nn)
            rel = np.asarray(self._init_rel, dtype=bool)
            if rel.any():
                ridx = idx[rel]
                for r in range(3):
                    ses.rel[r] += np.bincount(ridx, weights=req[rel, r], minlength=nn)
                ses.rel_pods += np.bincount(ridx, minlength=nn)
                ses.any_releasing = True
            self._init_nodes, self._init_req, self._init_rel = [], [], []

    def _queue_for(self, key: str, queue: str) -> tuple[int, tuple[Reason, str] | None]:
        hit = self._queues_seen.get(queue)
        if hit is None:
            hit = self._queues_seen[queue] = self._resolve_queue(queue)
        return hit

    def _resolve_queue(self, queue: str) -> tuple[int, tuple[Reason, str] | None]:
        ses = self.ses
        q = ses.tree.get(queue)
        if q is None:
            if queue in ses.tree.invalid:
                return -1, (Reason.QUEUE_INVALID, f"queue {queue!r} is unusable: {ses.tree.invalid[queue]}")
            return -1, (Reason.QUEUE_DOES_NOT_EXIST, f"queue {queue!r} does not exist")
        if not q.is_leaf:
            return -1, (Reason.QUEUE_NOT_LEAF, f"queue {queue!r} has child queues; only leaf queues hold jobs")
        return q.idx, None

    def _job_block(self, key: str, j: Job, seen_pods: set[str]) -> JobBlock:
        """What ``j`` brings to the session, with the findings it raises; pods whose uid is in ``seen_pods`` (an
        earlier PodGroup's) are left out, and the block's own uids are added to it."""
        ses = self.ses
        root, podsets, err = build_gang_tree(j)
        block = JobBlock(key, j, root, podsets, None, ses.node_base, ses.xnames)
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
        # running totals for queue accounting: active, pending (under the elastic ceilings; a pod held only by the
        # queue-admission gate is demand too, as KAI's design counts it in its queue's request)
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
            elif status == PENDING and (not pod.gated or pod.quota_gated):
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

    def job_info(self, block: JobBlock, keep: bool = False) -> JobInfo:
        """Append ``block``'s job to the session (queue resolved, preemptibility decided, findings raised), without
        its pods. ``keep``: the block is kept across cycles and placed in one live session at a time (as its gang
        counters are), so its ``JobInfo`` is kept with it and set back to its state at session open."""
        ses = self.ses
        j = block.spec
        key = block.key
        ses.findings.extend(block.findings)
        qidx, qerr = self._queues_seen.get(j.queue) or self._queue_for(key, j.queue)
        default = ses.tree.nodes[qidx].default_preemptibility if qidx >= 0 else None
        if block.mode is not None and block.mode[0] is default:
            mode, note = block.mode[1]
        else:
            mode, note = job_mode(j, block.root, default)
            block.mode = (default, (mode, note))
        if note:
            ses.findings.append(Finding("PodGroup", key, "preemptibility", note))
        info = block.info if keep else None
        if info is None:
            info = JobInfo(
                idx=len(ses.jobs),
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
            info.ready = block.ready
            # read only (queue accounting); a kept block's own lists are shared with the sessions that place it
            info.init_active = block.act
            info.init_pending = block.pend
            if keep:
                block.info = info
        else:
            info.idx = len(ses.jobs)
            info.queue = qidx
            info.preemptible = mode is not Preemptibility.NON_PREEMPTIBLE
            info.semi = mode is Preemptibility.SEMI_PREEMPTIBLE
            info.invalid = block.invalid or qerr
            info.fail_reason = None
            info.fail_message = ""
            if info.fail_details:
                info.fail_details = {}
            info.touched = False
            info.stale_since = None
            info.version = 0
            if info.cache:
                info.cache = {}
            info.risk = 0.0
            info.risk_note = ""
            if info.core:
                info.core = {}
        info.n_pend = block.n_pend
        info.n_active = block.n_active
        ses.job_index[key] = info.idx
        ses.jobs.append(info)
        return info

    def place_block(self, block: JobBlock, keep: bool = False) -> JobInfo:
        """Append ``block``'s job and pods to the session and count its pods on their nodes and GPUs; a block kept
        from an earlier cycle is placed exactly as a new one (its gang counters are set back to the block's)."""
        ses = self.ses
        info = self.job_info(block, keep)
        jidx = info.idx
        if not block.sealed:
            self._place_rows(info, block)
            return info
        p0 = len(ses.pods)
        n = len(block.rows)
        info.pods = list(range(p0, p0 + n))
        for ps, n_active, n_alive, members in block.set_counts:
            ps.n_active = n_active
            ps.n_alive = n_alive
            ps.pods = [p0 + i for i in members]
        ses.pods.extend(block.col_pods)
        ses.p_job.extend([jidx] * n)
        ses.p_set.extend(block.col_sets)
        ses.p_status.extend(block.col_status)
        ses.p_node.extend(block.col_node)
        ses.p_group.extend(block.col_none)
        ses.p_req.extend(block.col_req)
        ses.p_frac.extend(block.col_frac)
        ses.p_gpumem.extend(block.col_gpumem)
        if block.unstarted:
            now = ses.now
            ses.p_start.extend(now if t is None else t for t in block.col_start)
        else:
            ses.p_start.extend(block.col_start)  # type: ignore[arg-type]  # no None when nothing is unstarted
        ses.p_xreq.extend(block.col_xreq)
        for i, mig in block.migs:
            ses.p_mig[p0 + i] = mig
        rows = block.rows
        if block.hold_nodes:
            self._init_nodes.extend(block.hold_nodes)
            self._init_req.extend(block.hold_req)
            self._init_rel.extend(block.hold_rel)
            for i in block.hold_x:
                row = rows[i]
                self.hold_extended(row.xreq, row.node, row.status == RELEASING)
        for i in block.hold_rows:
            self.hold_row(p0 + i, rows[i])
        return info

    def _place_rows(self, info: JobInfo, block: JobBlock) -> None:
        """``_place_block`` for a block built for this session alone: row by row, without the column layout a
        kept block pays for once (a from-scratch session places each block once)."""
        ses = self.ses
        for ps in block.podsets.values():
            ps.pods = []
        jidx = info.idx
        now = ses.now
        pods, p_job, p_set, p_status, p_node = ses.pods, ses.p_job, ses.p_set, ses.p_status, ses.p_node
        p_group, p_req, p_frac, p_gpumem, p_start, p_xreq = (
            ses.p_group,
            ses.p_req,
            ses.p_frac,
            ses.p_gpumem,
            ses.p_start,
            ses.p_xreq,
        )
        info_pods = info.pods
        for row in block.rows:
            p = len(pods)
            pod = row.pod
            pods.append(pod)
            info_pods.append(p)
            p_job.append(jidx)
            pset = row.set
            if pset is not None:
                pset.pods.append(p)
            p_set.append(pset)
            p_status.append(row.status)
            p_node.append(row.node)
            p_group.append(None)
            p_req.append(row.req)
            p_frac.append(row.frac)
            p_gpumem.append(row.gpumem)
            p_start.append(pod.start_time if pod.start_time is not None else now)
            p_xreq.append(row.xreq)
            if row.mig:
                ses.p_mig[p] = row.mig
            if row.node >= 0:
                self.hold_row(p, row)

    def hold_row(self, p: int, row: PodRow) -> None:
        """Count pod ``p`` (``row``), which runs, is pipelined or is releasing, on its node."""
        ses = self.ses
        pod = row.pod
        status = row.status
        node = row.node
        xreq = row.xreq
        if row.frac or row.gpumem:
            group, _ = ses.occupy(p, node, pod.gpu_group)
            if status == RELEASING:
                ses.release(p)
            elif status == PIPELINED and group is not None:
                # a shared GPU whose tenant is only pipelined has no bound reservation yet (KAI): the rest of
                # it can only be pipelined onto, so its idle room is held as if it were being released
                rec = ses.groups[node][group]
                rec[1] += max(0.0, 1.0 - rec[0])
                rec[0] = 1.0
                ses.refresh_frac(node)
        else:
            self._init_nodes.append(node)
            self._init_req.append(row.req)
            self._init_rel.append(status == RELEASING)
            if xreq is not None:  # the shared-GPU path above holds them through occupy and release
                self.hold_extended(xreq, node, status == RELEASING)

    def hold_extended(self, xreq: tuple[np.ndarray, np.ndarray] | None, node: int, releasing: bool) -> None:
        """Count a whole-GPU pod's extended resources on its node (its GPU, CPU and memory are counted in bulk)."""
        if xreq is None:
            return
        ses = self.ses
        ses.xfree[xreq[0], node] -= xreq[1]
        if releasing:
            ses.xrel[xreq[0], node] += xreq[1]

    def _pod_row(
        self, key: str, pod: Pod, podsets: dict[str, PodSet], simple: PodSet | None, findings: list[Finding]
    ) -> PodRow:
        ses = self.ses
        status = _PHASES[pod.phase]
        node = -1
        if status in (BOUND, PIPELINED, RELEASING, STUCK):
            n = ses.node_index.get(pod.node) if pod.node is not None else None
            if n is None:
                msg = f"bound to unknown node {pod.node!r}; its resources are not counted"
                findings.append(Finding("Pod", pod.uid, "nodeName", msg))
            else:
                node = n
        elif status == PENDING and pod.node:
            n = ses.node_index.get(pod.node)
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
                g = gpumem / ses.min_gpu_mem if ses.min_gpu_mem > 0 else 0.0
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
        if node >= 0 and gpumem and ses.gpu_mem[node] > 0:
            g = min(1.0, gpumem / ses.gpu_mem[node])
            frac = g
        return PodRow(pod, status, node, ps, (g, c, m), frac, gpumem, xreq, mig)

    def _extended_request(self, pod: Pod, findings: list[Finding]) -> tuple[np.ndarray, np.ndarray] | None:
        ses = self.ses
        rows: list[int] = []
        amounts: list[float] = []
        for name, v in pod.extended.items():
            if not v >= 0:  # also catches NaN
                findings.append(Finding("Pod", pod.uid, "resources", f"negative {name} request treated as 0"))
                continue
            if v > 0:
                rows.append(ses.xindex[name])
                amounts.append(float(v))
        if not rows:
            return None
        return np.asarray(rows, dtype=np.int64), np.asarray(amounts, dtype=np.float64)

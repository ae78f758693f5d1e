"""The placed part of a session kept across cycles: every PodGroup's rows laid out in the session's lists and
counted on their nodes, as the last session opened them, before its actions changed anything.

Why: keeping each PodGroup's :class:`~kai_ray.scheduler.blocks.JobBlock` saved re-reading its pods, but every cycle
still placed every block again (its rows appended to a dozen lists, its pods counted on their nodes and shared
GPUs), so opening a session cost time per PodGroup even when one PodGroup had changed. A :class:`PlacedLayout`
keeps the result of the last placement; the next one copies the lists in runs of unchanged blocks and the node
arrays whole, and recounts only the nodes that a changed, added or removed block has pods on.

Why it gives the session a from-scratch build gives, bit for bit: what a node ends up with depends only on the
pods on that node, counted in key order of their PodGroups and row order within each (shared GPUs are named and
floating-point sums are made in that order). A node none of whose pods changed sees the same sequence as last
time, so its arrays are kept; a node that did is reset to its allocatable and recounted in that same order, the
whole-GPU sums added up one by one as ``np.bincount`` adds them. Pod and job positions shift when a block before
them grows or shrinks; the lists that hold positions are shifted with them.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from kai_ray.scheduler.blocks import JobBlock, PodRow
from kai_ray.scheduler.nodebase import NodeBase
from kai_ray.scheduler.session import RELEASING, JobInfo, Session

# the session's per-pod lists a block fills without positions in them (p_job holds job positions: shifted)
COLUMNS = ("pods", "p_set", "p_status", "p_node", "p_group", "p_req", "p_frac", "p_gpumem", "p_start", "p_xreq")


class Placer(Protocol):
    """What a kept placement asks of the build (:class:`~kai_ray.scheduler.session_build.SessionBuild`), which
    places blocks the same way for a from-scratch session; a protocol, as the build is above this module."""

    ses: Session

    def job_info(self, block: JobBlock, keep: bool = False) -> JobInfo: ...

    def place_block(self, block: JobBlock, keep: bool = False) -> JobInfo: ...

    def apply_initial_nodes(self) -> None: ...

    def hold_row(self, p: int, row: PodRow) -> None: ...

    def hold_extended(self, xreq: tuple[np.ndarray, np.ndarray] | None, node: int, releasing: bool) -> None: ...


class PlacedJob:
    """Where the last session placed a block: its job position, its first pod, and its pods' positions."""

    __slots__ = ("block", "j", "p0", "pods")

    def __init__(self, block: JobBlock, j: int, p0: int, pods: list[int]) -> None:
        self.block = block
        self.j = j
        self.p0 = p0
        self.pods = pods  # the JobInfo's pod positions (read only in a session, so shared while p0 holds)


class PlacedLayout:
    """The lists and node arrays of the last session right after its PodGroups were placed, over one node base."""

    def __init__(self, base: NodeBase, xnames: list[str]) -> None:
        self.base = base
        self.xnames = xnames
        self.jobs: dict[str, PlacedJob] = {}
        self.cols: list[list[Any]] = [[] for _ in COLUMNS]
        self.p_job: list[int] = []
        self.node_keys: dict[int, set[str]] = {}  # node -> PodGroups with pods on it
        self.groups: dict[int, dict[str, list[float]]] = {}  # nodes with shared GPUs
        self.slot_dirty: set[int] = set()
        self.arrays: list[np.ndarray] = []


_ARRAYS = ("free", "rel", "rel_pods", "pods_free", "xfree", "xrel", "frac_room", "frac_room_future", "frac_room_shared")


def place_kept(build: Placer, entries: list[tuple[str, JobBlock]], layout: PlacedLayout | None) -> PlacedLayout:
    """Place the sealed ``entries`` (key order) into ``build``'s session, reusing ``layout`` (the last session's,
    discarded: its parts move to the returned one) where it is over the same nodes; returns the new layout."""
    ses = build.ses
    old = layout if layout is not None and layout.base is ses.node_base and layout.xnames == ses.xnames else None
    if old is None:
        return _place_all(build, entries)
    new = PlacedLayout(ses.node_base, ses.xnames)
    old_jobs = old.jobs
    node_keys = new.node_keys = old.node_keys
    affected: set[int] = set()

    cols: list[list[Any]] = [getattr(ses, c) for c in COLUMNS]
    p_job = ses.p_job
    old_cols = old.cols
    old_p_job = old.p_job
    run: list[int] = []  # [old p0, old end, old job, new job] of the current run of kept blocks (same shift)

    def flush() -> None:
        a, b, oj, nj = run
        for col, src in zip(cols, old_cols, strict=True):
            col += src[a:b]
        dj = nj - oj
        p_job.extend(old_p_job[a:b] if not dj else [x + dj for x in old_p_job[a:b]])
        run.clear()

    now = ses.now
    unstarted: list[int] = []
    any_rel = False
    jobs = new.jobs
    p0 = 0
    n_kept = 0
    for key, block in entries:
        info = build.job_info(block, keep=True)
        jidx = info.idx
        n = len(block.rows)
        pj = old_jobs.get(key)
        if pj is not None:
            if pj.block is block:
                n_kept += 1
            else:  # changed: its old pods leave their nodes, the new ones arrive on theirs
                _move(node_keys, affected, key, pj.block, block)
                pj = None
        else:
            _move(node_keys, affected, key, None, block)
        if pj is not None and pj.p0 == p0:
            info.pods = pj.pods
            for ps, n_active, n_alive, _ in block.set_counts:
                ps.n_active = n_active
                ps.n_alive = n_alive
        else:
            info.pods = list(range(p0, p0 + n))
            for ps, n_active, n_alive, members in block.set_counts:
                ps.n_active = n_active
                ps.n_alive = n_alive
                ps.pods = [p0 + i for i in members]
        if pj is not None:
            if run and run[1] == pj.p0 and pj.j - run[2] == jidx - run[3]:
                run[1] = pj.p0 + n
            else:
                if run:
                    flush()
                run.extend((pj.p0, pj.p0 + n, pj.j, jidx))
        else:
            if run:
                flush()
            for col, src in zip(cols, block.columns(), strict=True):
                col += src
            p_job.extend([jidx] * n)
        if block.unstarted:
            unstarted.extend(p0 + i for i in block.unstarted)
        for i, mig in block.migs:
            ses.p_mig[p0 + i] = mig
        any_rel = any_rel or block.rel_on_node
        jobs[key] = pj if pj is not None and pj.p0 == p0 and pj.j == jidx else PlacedJob(block, jidx, p0, info.pods)
        p0 += n
    if run:
        flush()
    if n_kept < len(old_jobs):
        for key in old_jobs.keys() - jobs.keys():
            _move(node_keys, affected, key, old_jobs[key].block, None)
    p_start = ses.p_start
    for p in unstarted:
        p_start[p] = now

    base = ses.node_base
    for name, arr in zip(_ARRAYS, old.arrays, strict=True):
        setattr(ses, name, arr.copy())
    groups = ses.groups
    for n, g in old.groups.items():
        if n not in affected:
            groups[n] = {k: v[:] for k, v in g.items()}
    ses.slot_dirty = old.slot_dirty - affected
    for n in affected:
        ses.free[:, n] = base.alloc[:, n]
        ses.rel[:, n] = 0.0
        ses.rel_pods[n] = 0
        ses.pods_free[n] = base.max_pods[n]
        ses.xfree[:, n] = base.xalloc[:, n]
        ses.xrel[:, n] = 0.0
        ses.frac_room[n] = 0.0
        ses.frac_room_future[n] = 0.0
        ses.frac_room_shared[n] = 0.0
        _recount_node(build, n, node_keys.get(n, ()), jobs)
    ses.any_releasing = any_rel

    new.cols = [list(c) for c in cols]
    new.p_job = list(p_job)
    new.arrays = [getattr(ses, name).copy() for name in _ARRAYS]
    groups_kept = old.groups
    for n in affected:
        g = ses.groups[n]
        if g:
            groups_kept[n] = {k: v[:] for k, v in g.items()}
        else:
            groups_kept.pop(n, None)
    new.groups = groups_kept
    new.slot_dirty = set(ses.slot_dirty)
    return new


def _place_all(build: Placer, entries: list[tuple[str, JobBlock]]) -> PlacedLayout:
    """The first placement over a node base: every block placed as the build places it (whole-GPU pods counted
    in one vectorised step), then kept."""
    ses = build.ses
    new = PlacedLayout(ses.node_base, ses.xnames)
    jobs = new.jobs
    node_keys = new.node_keys
    for key, block in entries:
        p0 = len(ses.pods)
        info = build.place_block(block, keep=True)
        jobs[key] = PlacedJob(block, info.idx, p0, info.pods)
        for n in block.node_rows:
            node_keys.setdefault(n, set()).add(key)
    build.apply_initial_nodes()
    new.cols = [list(getattr(ses, c)) for c in COLUMNS]
    new.p_job = list(ses.p_job)
    new.arrays = [getattr(ses, name).copy() for name in _ARRAYS]
    new.groups = {n: {k: v[:] for k, v in g.items()} for n, g in ses.groups.items() if g}
    new.slot_dirty = set(ses.slot_dirty)
    return new


def _move(
    node_keys: dict[int, set[str]], affected: set[int], key: str, gone: JobBlock | None, came: JobBlock | None
) -> None:
    """PodGroup ``key``'s block ``gone`` is replaced by ``came`` (either may be None): the nodes either has pods on
    are recounted."""
    if gone is not None:
        for n in gone.node_rows:
            affected.add(n)
            node_keys[n].discard(key)
    if came is not None:
        for n in came.node_rows:
            affected.add(n)
            node_keys.setdefault(n, set()).add(key)


def _recount_node(build: Placer, n: int, keys: set[str] | tuple[()], jobs: dict[str, PlacedJob]) -> None:
    """Count the pods on node ``n`` (reset to its allocatable) in the order a from-scratch build counts them: per
    PodGroup in key order, the whole-GPU pods' extended resources, then the shared-GPU pods one by one; at the end
    the whole-GPU pods' requests summed in order and taken off at once, as the build's ``np.bincount`` does."""
    ses = build.ses
    s0 = s1 = s2 = 0.0
    r0 = r1 = r2 = 0.0
    cnt = rcnt = 0
    for key in sorted(keys):
        pj = jobs[key]
        block = pj.block
        rows = block.rows
        whole, with_x, shared = block.node_rows[n]
        for i in with_x:
            row = rows[i]
            build.hold_extended(row.xreq, n, row.status == RELEASING)
        for i in shared:
            build.hold_row(pj.p0 + i, rows[i])
        for i in whole:
            row = rows[i]
            g, c, m = row.req
            s0 += g
            s1 += c
            s2 += m
            cnt += 1
            if row.status == RELEASING:
                r0 += g
                r1 += c
                r2 += m
                rcnt += 1
    if cnt:
        free = ses.free
        free[0, n] -= s0
        free[1, n] -= s1
        free[2, n] -= s2
        ses.pods_free[n] -= cnt
    if rcnt:
        rel = ses.rel
        rel[0, n] += r0
        rel[1, n] += r1
        rel[2, n] += r2
        ses.rel_pods[n] += rcnt

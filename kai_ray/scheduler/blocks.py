"""What one PodGroup brings to a session, worked out once per change of the PodGroup or its pods.

Why a record of its own: turning a :class:`Job` and its pods into session rows (validating requests, resolving
nodes, sizing GPU-memory requests on their node, building the gang tree, counting what the job holds and asks
for) is most of the cost of opening a session, and between two cycles most PodGroups do not change. A
:class:`JobBlock` keeps that work, laid out by column once (``seal``) and with its rows on each node, so that a
kept placement (:mod:`.placed`) can copy it in runs and recount only the nodes it has pods on.

A block depends on the job, on the node list it resolved node names against (``NodeBase``) and on the
extended-resource rows (``xnames``); :class:`~kai_ray.scheduler.incremental.IncrementalState` drops it when any of
them changes. Queue resolution is not part of it: the session redoes it every cycle (a dictionary lookup).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from kai_ray.scheduler.decisions import Finding, Reason
from kai_ray.scheduler.gang import PodSet, SubGroupSet
from kai_ray.scheduler.snapshot import Job, Pod, Preemptibility

if TYPE_CHECKING:
    from kai_ray.scheduler.nodebase import NodeBase
    from kai_ray.scheduler.session import JobInfo


class PodRow:
    """One pod as the session counts it: state, node, request (GPU-memory requests sized on their node)."""

    __slots__ = ("frac", "gpumem", "mig", "node", "pod", "req", "set", "status", "xreq")

    def __init__(
        self,
        pod: Pod,
        status: int,
        node: int,
        pset: PodSet | None,
        req: tuple[float, float, float],
        frac: float,
        gpumem: float,
        xreq: tuple[np.ndarray, np.ndarray] | None,
        mig: float,
    ) -> None:
        self.pod = pod
        self.status = status
        self.node = node
        self.set = pset
        self.req = req
        self.frac = frac
        self.gpumem = gpumem
        self.xreq = xreq
        self.mig = mig


class JobBlock:
    """A PodGroup's rows, gang tree and totals, with the findings that building them raised (in order)."""

    __slots__ = (
        "act",
        "base",
        "col_frac",
        "col_gpumem",
        "col_node",
        "col_none",
        "col_pods",
        "col_req",
        "col_sets",
        "col_start",
        "col_status",
        "col_xreq",
        "findings",
        "hold_nodes",
        "hold_rel",
        "hold_req",
        "hold_rows",
        "hold_x",
        "info",
        "invalid",
        "key",
        "max_total",
        "migs",
        "mode",
        "n_active",
        "n_pend",
        "node_rows",
        "on_node",
        "pend",
        "podsets",
        "ready",
        "rel_on_node",
        "root",
        "rows",
        "sealed",
        "set_counts",
        "simple",
        "spec",
        "uids",
        "unstarted",
        "xnames",
    )

    # filled by seal (a block kept across cycles); a block placed once is placed row by row and never has them.
    # Tuples, not lists: a kept block is read only, and at 40,000 one-pod PodGroups the lists' headers and spare
    # room were tens of MiB (the empty tuple is one object).
    set_counts: tuple[tuple[PodSet, int, int, tuple[int, ...]], ...]  # (set, n_active, n_alive, rows in the set)
    col_pods: tuple[Pod, ...]  # the rows by column, as the session's per-pod lists hold them
    col_sets: tuple[PodSet | None, ...]
    col_status: tuple[int, ...]
    col_node: tuple[int, ...]
    col_req: tuple[tuple[float, float, float], ...]
    col_frac: tuple[float, ...]
    col_gpumem: tuple[float, ...]
    col_start: tuple[float | None, ...]  # None: not started, the session's clock
    col_xreq: tuple[tuple[np.ndarray, np.ndarray] | None, ...]
    unstarted: tuple[int, ...]
    migs: tuple[tuple[int, float], ...]
    on_node: tuple[int, ...]  # rows of pods that hold room on a node
    col_none: tuple[None, ...]  # the rows' GPU groups before placement
    # pods on a node counted the session's vectorised way (whole GPUs): node, request, releasing, in row order
    hold_nodes: tuple[int, ...]
    hold_req: tuple[tuple[float, float, float], ...]
    hold_rel: tuple[bool, ...]
    hold_x: tuple[int, ...]  # of those, the rows that also hold extended resources
    hold_rows: tuple[int, ...]  # rows on a node that hold a shared GPU (placed one by one)
    # per node, the rows on it: (whole-GPU rows, of those the ones with extended resources, shared-GPU rows)
    node_rows: dict[int, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]
    rel_on_node: bool  # a releasing pod holds room on a node

    def __init__(
        self,
        key: str,
        spec: Job,
        root: SubGroupSet,
        podsets: dict[str, PodSet],
        invalid: tuple[Reason, str] | None,
        base: NodeBase,
        xnames: list[str],
    ) -> None:
        self.key = key
        self.spec = spec
        self.root = root
        self.podsets = podsets
        self.simple: PodSet | None = None if spec.subgroups else podsets["default"]
        self.invalid = invalid  # the gang tree's error (the queue's is the session's)
        self.base = base
        self.xnames = xnames
        self.findings: list[Finding] = []
        self.rows: list[PodRow] = []
        self.uids: list[str] = []  # of every pod of the job, in pod order (duplicates across jobs)
        self.max_total = 1 << 30
        self.act = [0.0, 0.0, 0.0]  # held by its active pods at session open
        self.pend = [0.0, 0.0, 0.0]  # asked for by its pending pods (under the elastic ceilings), quota-gated ones too
        self.ready = True
        self.n_pend = 0  # pods pending at session open
        self.n_active = 0  # pods holding resources at session open
        self.sealed = False  # laid out by column (a block kept across cycles)
        self.info: JobInfo | None = None  # the job as the sessions that keep the block place it
        # the effective preemptibility (and its note) for the leaf queue's default it was decided under
        self.mode: tuple[Preemptibility | None, tuple[Preemptibility, str]] | None = None

    def columns(self) -> tuple[tuple[Any, ...], ...]:
        """The sealed rows by column, in the order of :data:`~kai_ray.scheduler.placed.COLUMNS` (the GPU groups
        empty, the unstarted pods' start times None)."""
        return (
            self.col_pods,
            self.col_sets,
            self.col_status,
            self.col_node,
            self.col_none,
            self.col_req,
            self.col_frac,
            self.col_gpumem,
            self.col_start,
            self.col_xreq,
        )

    def seal(self, releasing: int) -> None:
        """Lay the rows out by column (and the gang counters per set, and the whole-GPU pods on nodes), so a
        session places the block with a few list extensions instead of a loop over its pods. ``releasing``: the
        session's state of a releasing pod."""
        rows = self.rows
        self.sealed = True
        unstarted: list[int] = []
        migs: list[tuple[int, float]] = []
        on_node: list[int] = []
        hold_nodes: list[int] = []
        hold_req: list[tuple[float, float, float]] = []
        hold_rel: list[bool] = []
        hold_x: list[int] = []
        hold_rows: list[int] = []
        by_node: dict[int, tuple[list[int], list[int], list[int]]] = {}
        rel_on_node = False
        for i, r in enumerate(rows):
            pod = r.pod
            if pod.start_time is None:
                unstarted.append(i)
            if r.mig:
                migs.append((i, r.mig))
            node = r.node
            if node < 0:
                continue
            on_node.append(i)
            rel_on_node = rel_on_node or r.status == releasing
            on = by_node.get(node)
            if on is None:
                on = by_node[node] = ([], [], [])
            if r.frac or r.gpumem:
                hold_rows.append(i)
                on[2].append(i)
            else:
                hold_nodes.append(node)
                hold_req.append(r.req)
                hold_rel.append(r.status == releasing)
                on[0].append(i)
                if r.xreq is not None:
                    hold_x.append(i)
                    on[1].append(i)
        self.col_pods = tuple(r.pod for r in rows)
        self.col_sets = tuple(r.set for r in rows)
        self.col_status = tuple(r.status for r in rows)
        self.col_node = tuple(r.node for r in rows)
        self.col_req = tuple(r.req for r in rows)
        self.col_frac = tuple(r.frac for r in rows)
        self.col_gpumem = tuple(r.gpumem for r in rows)
        self.col_start = tuple(r.pod.start_time for r in rows)
        self.col_xreq = tuple(r.xreq for r in rows)
        self.col_none = (None,) * len(rows)
        self.unstarted, self.migs, self.on_node = tuple(unstarted), tuple(migs), tuple(on_node)
        self.hold_nodes, self.hold_req, self.hold_rel = tuple(hold_nodes), tuple(hold_req), tuple(hold_rel)
        self.hold_x, self.hold_rows = tuple(hold_x), tuple(hold_rows)
        self.node_rows = {n: (tuple(w), tuple(x), tuple(sh)) for n, (w, x, sh) in by_node.items()}
        self.rel_on_node = rel_on_node
        self.set_counts = tuple(
            (ps, ps.n_active, ps.n_alive, tuple(i for i, r in enumerate(rows) if r.set is ps))
            for ps in self.podsets.values()
        )

"""What one PodGroup brings to a session, worked out once per change of the PodGroup or its pods.

Why a record of its own: turning a :class:`Job` and its pods into session rows (validating requests, resolving
nodes, sizing GPU-memory requests on their node, building the gang tree, counting what the job holds and asks
for) is most of the cost of opening a session, and between two cycles most PodGroups do not change. A
:class:`JobBlock` keeps that work; the session places a block (appends its rows, counts its pods on their nodes)
the same way whether the block is new or kept from an earlier cycle, so both paths give the same session.

A block depends on the job, on the node list it resolved node names against (``NodeBase``) and on the
extended-resource rows (``xnames``); :class:`~kai_ray.scheduler.incremental.IncrementalState` drops it when any of
them changes. Queue resolution is not part of it: the session redoes it every cycle (a dictionary lookup).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from kai_ray.scheduler.decisions import Finding, Reason
from kai_ray.scheduler.gang import PodSet, SubGroupSet
from kai_ray.scheduler.snapshot import Job, Pod

if TYPE_CHECKING:
    from kai_ray.scheduler.nodebase import NodeBase


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
        "invalid",
        "key",
        "max_total",
        "migs",
        "n_active",
        "n_pend",
        "on_node",
        "pend",
        "podsets",
        "ready",
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

    # filled by seal (a block kept across cycles); a block placed once is placed row by row and never has them
    set_counts: list[tuple[PodSet, int, int, list[int]]]  # (set, n_active, n_alive, rows in the set)
    col_pods: list[Pod]  # the rows by column, as the session's per-pod lists hold them
    col_sets: list[PodSet | None]
    col_status: list[int]
    col_node: list[int]
    col_req: list[tuple[float, float, float]]
    col_frac: list[float]
    col_gpumem: list[float]
    col_start: list[float | None]  # None: not started, the session's clock
    col_xreq: list[tuple[np.ndarray, np.ndarray] | None]
    unstarted: list[int]
    migs: list[tuple[int, float]]
    on_node: list[int]  # rows of pods that hold room on a node
    col_none: list[None]  # the rows' GPU groups before placement
    # pods on a node counted the session's vectorised way (whole GPUs): node, request, releasing, in row order
    hold_nodes: list[int]
    hold_req: list[tuple[float, float, float]]
    hold_rel: list[bool]
    hold_x: list[int]  # of those, the rows that also hold extended resources
    hold_rows: list[int]  # rows on a node that hold a shared GPU (placed one by one)

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

    def seal(self, releasing: int) -> None:
        """Lay the rows out by column (and the gang counters per set, and the whole-GPU pods on nodes), so a
        session places the block with a few list extensions instead of a loop over its pods. ``releasing``: the
        session's state of a releasing pod."""
        rows = self.rows
        self.sealed = True
        self.col_pods = [r.pod for r in rows]
        self.col_sets = [r.set for r in rows]
        self.col_status = [r.status for r in rows]
        self.col_node = [r.node for r in rows]
        self.col_req = [r.req for r in rows]
        self.col_frac = [r.frac for r in rows]
        self.col_gpumem = [r.gpumem for r in rows]
        self.col_start = [r.pod.start_time for r in rows]
        self.col_xreq = [r.xreq for r in rows]
        self.unstarted = [i for i, t in enumerate(self.col_start) if t is None]
        self.migs = [(i, r.mig) for i, r in enumerate(rows) if r.mig]
        self.on_node = [i for i, r in enumerate(rows) if r.node >= 0]
        self.col_none = [None] * len(rows)
        whole = [i for i in self.on_node if not (rows[i].frac or rows[i].gpumem)]
        self.hold_nodes = [rows[i].node for i in whole]
        self.hold_req = [rows[i].req for i in whole]
        self.hold_rel = [rows[i].status == releasing for i in whole]
        self.hold_x = [i for i in whole if rows[i].xreq is not None]
        self.hold_rows = [i for i in self.on_node if rows[i].frac or rows[i].gpumem]
        self.set_counts = [
            (ps, ps.n_active, ps.n_alive, [i for i, r in enumerate(rows) if r.set is ps])
            for ps in self.podsets.values()
        ]

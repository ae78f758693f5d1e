"""The incremental session: what one cycle built and the next can keep, updated from what changed in between.

Why: a cycle used to rebuild the whole picture of the cluster from its snapshot, so its cost grew with the cluster
rather than with what happened (replaying 8,000 pods on 1,500 nodes spent most of its time opening sessions). An
:class:`IncrementalState` lives across cycles beside the adapter that feeds the core. The adapter still hands each
cycle a complete :class:`Snapshot`, and also says what changed since the last one (a node, a PodGroup and its
pods, the queues); the state reuses every part of the previous session that no change touched: the node arrays,
each PodGroup's block (its rows, gang tree and ``JobInfo``), and the placement itself (:mod:`.placed`: the
per-pod lists and node counts of the last session, recounted only on the nodes a changed PodGroup has pods on).

The simulator's engine and the scheduler operator (``kai_ray/k8s/scheduling/changes.py``: one state per leadership
term, fed by the cache's informer handlers) both keep one. Decisions do not depend on the path: a session opened
from the state equals one built from the same snapshot from scratch (``tests/scheduler/test_incremental.py`` runs
random event sequences through both). A change the adapter does not report is a bug in the adapter; reporting too
much only costs time.
"""

from __future__ import annotations

from kai_ray.scheduler.blocks import JobBlock
from kai_ray.scheduler.nodebase import NodeBase
from kai_ray.scheduler.placed import PlacedLayout
from kai_ray.scheduler.session import Session
from kai_ray.scheduler.session_build import build_kept
from kai_ray.scheduler.snapshot import Snapshot


class IncrementalState:
    """Session parts kept across cycles, each dropped by the changes that can move it."""

    def __init__(self) -> None:
        self._nodes: NodeBase | None = None
        self._blocks: dict[str, JobBlock] = {}
        self._placed: PlacedLayout | None = None

    @property
    def node_base(self) -> NodeBase | None:
        """The node arrays the next session reuses (None: it builds them)."""
        return self._nodes

    def job_changed(self, key: str) -> None:
        """The PodGroup ``key`` (``namespace/name``) was added, changed or deleted, or one of its pods was."""
        self._blocks.pop(key, None)

    def nodes_changed(self) -> None:
        """A node was added, changed (allocatable, labels, taints, readiness, cordon) or deleted."""
        self._nodes = None
        self._blocks.clear()
        self._placed = None

    def open(self, snapshot: Snapshot) -> Session:
        """The session of one cycle over ``snapshot``, built from the parts no reported change touched."""
        placed, self._placed = self._placed, None  # the build takes its parts over; a failed build leaves none
        ses, self._placed = build_kept(snapshot, self._nodes, self._blocks, placed)
        self._nodes = ses.node_base
        return ses

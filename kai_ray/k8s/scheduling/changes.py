"""What changed between two cycles, as the informers saw it, told to the incremental session of the leader's term.

Why: the core's :class:`~kai_ray.scheduler.incremental.IncrementalState` keeps the node arrays, each PodGroup's
rows and their placement on the nodes across cycles, and must be told what changed in between, or it would
schedule on a stale picture. The informer handlers of the cache (their own threads) record changes here: a node
names nothing more than "nodes", a deleted PodGroup its key, DRA objects and priority classes mean everything. The
cycle thread takes what was recorded *before* it builds the snapshot, so a change that lands while the snapshot is
being built is either in it and already taken, or still pending for the next cycle (told twice costs time, never
correctness).

A PodGroup whose pods, PodGroup or overlays changed is rebuilt by the cache's snapshot build as a new ``Job``
object, which the state never mistakes for a kept one (it checks identity); the build also records those keys
here, so the next cycle drops their old rows too.

Queues need nothing: the session resolves every PodGroup's queue each cycle, so no kept part depends on them.

Two facts reach the node arrays without a node event: other schedulers' pods, and pods whose PodGroup is missing or
invalid, take room off a node's allocatable in the snapshot. So the node list of each snapshot is also compared
with the last one's (by identity, then by value for the nodes that are new objects): a difference drops the node
arrays whatever the handlers said.

A state lives for one leadership term (:meth:`ChangeRecorder.new_term`), and a cycle that raises, or reports an
internal error, starts the next one from a fresh state: whatever it left half-built is never reused.
"""

from __future__ import annotations

import threading

from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.decisions import CycleResult
from kai_ray.scheduler.incremental import IncrementalState
from kai_ray.scheduler.snapshot import Node, Snapshot


class ChangeRecorder:
    """Changes recorded by the informer threads, applied to one :class:`IncrementalState` per leadership term."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: set[str] = set()
        self._nodes = False
        self._all = False
        self._taken_jobs: set[str] = set()
        self._taken_nodes = False
        self._taken_all = False
        self.state = IncrementalState()
        self._last_nodes: list[Node] | None = None
        self._opened = False  # whether a cycle of this state ran yet (the first one keeps nothing)
        self.fresh_states = 1  # states started (each term, each failed cycle): what tests and logs read

    # --- informer threads ------------------------------------------------------------------------------------

    def job(self, key: str | None) -> None:
        """The PodGroup ``key`` (or one of its pods, or an overlay on them) changed."""
        if key is not None:
            with self._lock:
                self._jobs.add(key)

    def jobs(self, keys: set[str]) -> None:
        """PodGroups whose pods, PodGroup or overlays (assumed bindings, evictions, Ray activity) changed."""
        if keys:
            with self._lock:
                self._jobs |= keys

    def nodes(self) -> None:
        """A node's allocatable, labels, taints, readiness or cordon changed, or a node came or went."""
        with self._lock:
            self._nodes = True

    def everything(self) -> None:
        """A change whose reach is not tracked (DRA objects, priority classes): nothing kept is reused."""
        with self._lock:
            self._all = True

    # --- the cycle thread ------------------------------------------------------------------------------------

    def new_term(self) -> None:
        """Becoming leader: a fresh state (what is still recorded stays: told twice costs time, never correctness)."""
        with self._lock:
            self._fresh()

    def take(self) -> None:
        """Take what was recorded so far, for the cycle whose snapshot is built next (call before building it)."""
        with self._lock:
            self._taken_jobs |= self._jobs
            self._taken_nodes |= self._nodes
            self._taken_all |= self._all
            self._jobs = set()
            self._nodes = self._all = False

    def run(self, snapshot: Snapshot) -> CycleResult:
        """``run_cycle`` over ``snapshot`` with the term's state, told the changes taken (the quarantine's cycle)."""
        state = self._apply(snapshot)
        first, self._opened = not self._opened, True
        try:
            # The first cycle of a state builds every PodGroup's kept block at once, about three times the work of
            # a session that keeps nothing; after a takeover or a cold start that cycle stands between the Lease
            # and the first binds, so it keeps nothing and the next cycle (the binds on their way) builds the blocks.
            result = run_cycle(snapshot, None if first else state)
        except Exception:
            self._fresh()
            raise
        if any(f.kind == "Cycle" for f in result.findings):  # an internal error the core caught: start clean
            self._fresh()
        return result

    def _apply(self, snapshot: Snapshot) -> IncrementalState:
        """Tell the state what was taken; the state this cycle uses (a fresh one if everything changed)."""
        state = self.state
        if self._taken_all:
            self._fresh()
            state = self.state
        else:
            for key in self._taken_jobs:
                state.job_changed(key)
            if self._taken_nodes or not self._same_nodes(snapshot.nodes):
                state.nodes_changed()
        self._taken_jobs = set()
        self._taken_nodes = self._taken_all = False
        self._last_nodes = snapshot.nodes
        return state

    def _same_nodes(self, nodes: list[Node]) -> bool:
        last = self._last_nodes
        if last is None or len(last) != len(nodes):
            return False
        return all(a is b or a == b for a, b in zip(last, nodes, strict=True))

    def _fresh(self) -> None:
        self.state = IncrementalState()
        self._last_nodes = None
        self._opened = False
        self.fresh_states += 1

"""Bind on release: a preemptor's pipelined pods are bound as soon as the pods evicted for them are gone.

Why: KAI pipelines a preemptor onto the room its victims are releasing and binds it in the first cycle that finds
them gone. At thousands of nodes that cycle is the last second or more of every preemption (the snapshot, the
session and the report walk every PodGroup), and it only repeats a decision the previous cycle made: these pods on
these nodes. So the latest cycle's pipelined binds are kept as a plan, and once every awaited victim has left the
cache the plan is bound at once, before the cycle that follows (which then finds the pods assumed on their nodes).

The plan is bound only where nothing it relied on can have moved; anything else is left to that cycle, as under
KAI:

- every pod is plain: whole GPUs, CPU and memory only (no shared GPU, extended resource or DRA claim, whose room
  the cache does not count per node);
- no node changed since the plan's snapshot (allocatable, labels, taints, readiness, cordon), and each planned node
  is still there, ready and not cordoned;
- each pod is still the one planned (same uid), pending, not being deleted and not already bound or assumed;
- each node has the room by the cache's own count: its allocatable less every pod on it that is not finished
  (other schedulers' too, and pods still being deleted) and every binding in flight to it, GPUs, CPU, memory and
  the pod count alike.

A plan is all or nothing (a gang is never bound in part); the binds then go out as a cycle's would.

The plan is written by the cycle that decides it and bound by the release watcher (``release_watch.py``) or, when
a cycle starts first, by that cycle before its snapshot, all under the loop's deciding lock; the victims awaited
(:class:`AwaitedVictims`) are also dropped by the binder and the Ray path's threads, so they keep a lock of their
own.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from kai_ray.k8s.scheduling.cache import SchedulerCache
from kai_ray.k8s.scheduling.entries import PodEntry, SnapshotView, charge
from kai_ray.k8s.scheduling.resume import is_virtual
from kai_ray.scheduler import snapshot as s
from kai_ray.scheduler.decisions import CycleResult

ROOM_SLACK = 1e-6  # relative: requests and allocatable are parsed from quantities into floats


@dataclass(frozen=True, slots=True)
class PlannedBind:
    key: str  # the pod's "namespace/name"
    uid: str
    node: str
    job: str


@dataclass(frozen=True, slots=True)
class ReleasePlan:
    """The latest cycle's pipelined binds, bound once their victims are gone."""

    binds: tuple[PlannedBind, ...]
    node_generation: int  # the cache's node generation at the plan's snapshot
    starting: tuple[str, ...]  # jobs with no active pod at the snapshot: they start when the plan is bound


def plan_of(view: SnapshotView, result: CycleResult) -> ReleasePlan | None:
    """The release plan of a cycle: its pipelined binds, when every one of them is plain (None otherwise, or when
    there are none)."""
    binds: list[PlannedBind] = []
    for b in result.binds:
        if not b.pipelined:
            continue
        if b.claims or b.gpu_group or is_virtual(b.pod):
            return None
        p = view.pods_by_uid.get(b.pod)
        if p is None or not _plain(p):
            return None
        binds.append(PlannedBind(p.key, p.uid, b.node, b.job))
    if not binds:
        return None
    starting = tuple(sorted({b.job for b in binds if view.active_before.get(b.job, 0) == 0}))
    return ReleasePlan(tuple(binds), view.node_generation, starting)


def _plain(p: PodEntry) -> bool:
    sp = p.spod
    return (
        sp is not None
        and sp.gpu_fraction is None
        and sp.gpu_memory_mib is None
        and not sp.extended
        and not sp.claims
        and not sp.gated
    )


def can_bind(plan: ReleasePlan, cache: SchedulerCache) -> bool:
    """Whether ``plan`` can be bound now: no node changed since its snapshot, its pods are pending as planned and
    its nodes have the room (:func:`room_for`)."""
    with cache.lock:
        if cache.node_generation != plan.node_generation:
            return False
        assumed = {key: a.node for key, a in cache.assumed.items()}
        return room_for(plan.binds, cache.pods, cache.nodes, assumed, cache.on_nodes)


def room_for(
    binds: tuple[PlannedBind, ...],
    pods: dict[str, PodEntry],
    nodes: dict[str, s.Node],
    assumed: dict[str, str],
    on_nodes: dict[str, set[str]],
) -> bool:
    """Whether every planned pod is still pending as planned and every planned node has the room for its share of
    the plan now; ``pods``, ``nodes`` and ``on_nodes`` (node -> keys of the pods on it) as the cache holds them,
    ``assumed``: pod key -> node of the bindings in flight. The caller holds the cache's lock."""
    want: dict[str, list[float]] = {}
    for b in binds:
        p = pods.get(b.key)
        n = nodes.get(b.node)
        if p is None or p.uid != b.uid or p.node or p.terminal or p.deleting or b.key in assumed or not _plain(p):
            return False
        if n is None or n.unschedulable or not n.ready:
            return False
        charge(want, b.node, p)
    used = {node: [0.0, 0.0, 0.0, 0.0] for node in want}
    for node in want:
        for key in on_nodes.get(node, ()):
            p = pods[key]
            if not p.terminal:
                charge(used, node, p)
    for key, node in assumed.items():
        p = pods.get(key)
        if node in used and p is not None and not p.node:
            charge(used, node, p)
    for node, need in want.items():
        n = nodes[node]
        have = (n.allocatable.gpu, n.allocatable.cpu, n.allocatable.memory, float(n.max_pods))
        taken = used[node]
        for r in range(4):
            if taken[r] + need[r] > have[r] * (1 + ROOM_SLACK) + ROOM_SLACK:
                return False
    return True


class AwaitedVictims:
    """The pods evicted for a pipelined gang, until they leave the cache; a victim that stays (an eviction refused,
    a Ray path that keeps it) is dropped, so nothing waits on a pod that will not go."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: set[str] = set()

    def add(self, keys: Iterable[str]) -> None:
        with self._lock:
            self._keys.update(keys)

    def drop(self, key: str) -> None:
        with self._lock:
            self._keys.discard(key)

    def pending(self) -> bool:
        with self._lock:
            return bool(self._keys)

    def gone(self, cache: SchedulerCache) -> bool:
        """True once every awaited victim has left ``cache`` (they are then awaited no more); False while one is
        there, or when none is awaited."""
        with self._lock:
            keys = tuple(self._keys)
        if not keys:
            return False
        with cache.lock:
            if any(key in cache.pods for key in keys):
                return False
        with self._lock:
            self._keys.difference_update(keys)
            return not self._keys

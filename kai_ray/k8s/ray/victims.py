"""What the scheduler hands the Ray path and what it gets back: a victim record in, typed outcomes out.

The scheduler's dispatch knows, from its informer cache, everything the Ray path needs about a pod it takes (its
PodGroup and queue, the RayCluster it is a node of, the Ray object that owns its gang, its drain deadline), so it
writes that down once as a :class:`Victim`; the Ray path (:mod:`kai_ray.k8s.ray.ray_reclaim`) reads nothing back
from the cache and calls nothing back in the scheduler. What it did comes back as a :class:`ReclaimOutcome` that
says which pods dispatch must still evict and which it must hand back to the next cycle, so every Kubernetes effect
on the scheduler's own objects stays in dispatch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from kai_ray.k8s.ray.raygcs import DrainOutcome
from kai_ray.scheduler.decisions import StopPending


@dataclass(frozen=True, slots=True)
class RayOwner:
    """The Ray object (RayJob, RayCluster, RayService) that owns a PodGroup."""

    kind: str
    name: str


@dataclass(frozen=True, slots=True)
class Victim:
    """One pod the core decided to take, with what the Ray path needs to take it the Ray way.

    ``cluster`` and ``node_type`` are the pod's ``ray.io/cluster`` and ``ray.io/node-type`` labels (None: no Ray
    node); ``owner`` is the Ray owner of its PodGroup. ``elastic``: surplus above the gang's minimum (a shrink can take
    it); ``whole_gang``: its gang goes entirely (its owner can be suspended instead).
    """

    namespace: str
    pod: str
    uid: str
    job: str
    podgroup: str | None
    queue: str
    reason: str
    preemptor: str | None = None
    cluster: str | None = None
    node_type: str | None = None
    owner: RayOwner | None = None
    elastic: bool = False
    whole_gang: bool = False
    drain_deadline_s: float = 30.0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.pod}"

    @property
    def message(self) -> str:
        """What the Ray node and the Ray object are told: ``kai-ray preempted for ns/job``."""
        who = f" for {self.preemptor}" if self.preemptor else ""
        return f"kai-ray {self.reason.lower()}{who}"


@dataclass
class ReclaimRecord:
    """One Ray-aware reclaim performed (kept for metrics, tests and ``kai-ray explain``)."""

    kind: str  # "shrink" | "suspend" | "drain" (drained, then evicted)
    target: str  # namespace/name of the RayCluster or owner
    pods: list[str]
    ok: bool
    code: str
    message: str
    seconds: float
    drains: list[DrainOutcome] = field(default_factory=list)
    deferred: bool = False  # not done and not evicted instead: the next cycle decides again (a RayJob's suspend)


class Result(str, Enum):  # noqa: UP042  (str() is the value, as for the core's enums)
    SHRUNK = "shrunk"  # the worker group lost exactly these workers; KubeRay deletes the pods
    DRAINED = "drained"  # the Ray nodes were drained; the pods are evicted now
    FELL_BACK = "fell-back"  # the Ray way was refused or failed; the pods are evicted instead (drained first)
    SUSPENDED = "suspended"  # the owner's spec.suspend is set; KubeRay deletes the pods
    DEFERRED = "deferred"  # nothing done and nothing evicted: a later cycle decides again


@dataclass(frozen=True)
class ReclaimOutcome:
    """What one reclaim did (``records``, one per API-level step) and what is left to dispatch: ``evict`` these pods
    the plain way now, ``release`` these (forget that they are being evicted, so the next cycle decides again)."""

    result: Result
    victims: tuple[Victim, ...]
    records: tuple[ReclaimRecord, ...]
    evict: tuple[Victim, ...] = ()
    release: tuple[Victim, ...] = ()


@dataclass(frozen=True, slots=True)
class PendingStop:
    """A gang past its max-pending-time whose Ray owner is to be stopped (the core's :class:`StopPending`)."""

    decision: StopPending
    namespace: str
    podgroup: str
    owner: RayOwner | None


@dataclass(frozen=True, slots=True)
class StopOutcome:
    """``applied``: the owner is suspended (or already was); else ``why`` not. ``retry``: the API failed, not the
    object: nothing is recorded and a later cycle tries again."""

    stop: PendingStop
    applied: bool
    why: str = ""
    retry: bool = False


def by_cluster(
    victims: list[Victim], *, per_podgroup: bool = False
) -> tuple[dict[tuple[str, str, str], list[Victim]], list[Victim]]:
    """The victims that are Ray nodes, by (namespace, RayCluster, PodGroup if ``per_podgroup`` else ""), and the
    others: a drain, a shrink and a suspend each work on one RayCluster at a time."""
    grouped: dict[tuple[str, str, str], list[Victim]] = {}
    others: list[Victim] = []
    for v in victims:
        if v.cluster:
            key = (v.namespace, v.cluster, (v.podgroup or "") if per_podgroup else "")
            grouped.setdefault(key, []).append(v)
        else:
            others.append(v)
    return grouped, others

"""Drain first: every Ray pod kai-ray takes away is drained through the GCS before it goes.

A shrink, a whole-gang suspend, a plain eviction of a head or of a RayCluster that cannot suspend, a consolidation
move and a ready-timeout all end with Ray losing nodes. Without a drain, Ray sees those nodes die with no warning:
Ray Train v2 never gets its preemption notice (``ray.train.get_preemption_info()``), so it cannot write a just-in-time
checkpoint, and Serve keeps routing requests to replicas that are about to vanish. With a drain (reason
``PREEMPTION`` and a deadline) the GCS tells the node's workers first; the eviction follows once the node is idle or
the deadline has passed.

The deadline is a setting on three levels, the most specific first: the ``kai-ray.io/drain-deadline`` annotation of
the Ray object (the podgrouper copies it to the PodGroup), the same annotation on the Queue, then the scheduler's
``--drain-deadline``. ``0`` sends no drain for that object.

The head goes last (:func:`drain_plan`). A draining Ray node takes no new actor or task, and Ray Train v2 places a
new actor, its ``PreemptionWatcher`` (the one that polls Ray for drains and hands the workers their notice), each
time it starts a worker group. Drained together with the workers, the head leaves that actor no node: a suspend that
comes while Ray Train (re)starts its workers, after a grow-back say, brings no notice at all and the workers step on
until their pods stop. So the workers are drained first and waited on; the head, whose driver and controller never
leave it idle anyway, is drained after them (its only purpose then is to tell Ray the node is going).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kai_ray import constants as c
from kai_ray.durations import parse_duration
from kai_ray.k8s.base.rest import ApiError, Kube, pods_path, ray_path
from kai_ray.k8s.ray.raygcs import (
    ACCEPTED,
    UNREACHABLE,
    DrainOutcome,
    PodRef,
    drain_ray_nodes,
    gcs_address_for,
    wait_drained,
)
from kai_ray.k8s.ray.rayplan import labels_of, meta_of, name_of

LAST_DRAIN_MIN_S = 1.0  # the head's drain, after the workers' wait: a deadline in the past would be no deadline


@dataclass(frozen=True)
class DrainDeadline:
    """The deadline in seconds and where it came from (``object``, ``queue`` or ``default``), for the record."""

    seconds: float
    source: str
    problem: str = ""  # a value that is not a duration: the level below was used, and this says why


def _annotation(obj: Mapping[str, Any] | None) -> str | None:
    if not obj:
        return None
    value = (meta_of(obj).get("annotations") or {}).get(c.DRAIN_DEADLINE)
    return None if value is None else str(value)


def drain_deadline(
    podgroup: Mapping[str, Any] | None, queue: Mapping[str, Any] | None, default_s: float
) -> DrainDeadline:
    """The drain deadline of one gang: its PodGroup's annotation (from the Ray object), its Queue's, the default."""
    problems: list[str] = []
    for source, obj in (("object", podgroup), ("queue", queue)):
        raw = _annotation(obj)
        if raw is None:
            continue
        seconds = parse_duration(raw.strip())
        if seconds is not None and seconds >= 0:
            return DrainDeadline(seconds, source, "; ".join(problems))
        kind = "PodGroup" if source == "object" else "Queue"
        problems.append(f"{kind} {name_of(obj or {})} annotations[{c.DRAIN_DEADLINE}]: {raw!r} is not a duration")
    return DrainDeadline(max(0.0, default_s), "default", "; ".join(problems))


@dataclass
class DrainReport:
    """The drains sent for one RayCluster's pods and how long kai-ray then waited for the nodes to go idle."""

    cluster: str
    deadline_s: float
    drains: list[DrainOutcome] = field(default_factory=list)
    waited_s: float = 0.0

    @property
    def accepted(self) -> list[str]:
        return [d.pod for d in self.drains if d.status == ACCEPTED]

    def as_record(self) -> dict[str, Any]:
        return {"deadlineSeconds": self.deadline_s, "drain": {d.pod: d.status for d in self.drains}}


def drain_and_wait(
    address: str | None,
    pods: Sequence[PodRef],
    message: str,
    deadline_s: float,
    *,
    timeout_s: float = 5.0,
    wait: bool = True,
) -> tuple[list[DrainOutcome], float]:
    """Drain these pods' Ray nodes at ``address`` and wait until they have exited or the deadline has passed.

    Returns the per-pod outcomes and the seconds waited. No address (no running head) makes every pod
    ``unreachable`` at once: the eviction goes on, as it would without Ray."""
    if not pods or deadline_s <= 0:
        return [], 0.0
    if address is None:
        why = "no running head pod with an IP"
        return [DrainOutcome(name_of(p) if isinstance(p, Mapping) else p, UNREACHABLE, None, why) for p in pods], 0.0
    drains = drain_ray_nodes(address, pods, message, deadline_s, timeout_s=timeout_s)
    accepted = [d.node_id for d in drains if d.status == ACCEPTED and d.node_id]
    if not wait or not accepted:
        return drains, 0.0
    t0 = time.monotonic()
    wait_drained(address, accepted, time.time() + deadline_s + 0.5, timeout_s=timeout_s)
    return drains, time.monotonic() - t0


def drain_plan(pods: Sequence[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """(drained first and waited on, drained after them): the head pods go last, unless there is nothing else."""
    heads = [p for p in pods if labels_of(p).get(c.RAY_NODE_TYPE) == "head"]
    rest = [p for p in pods if labels_of(p).get(c.RAY_NODE_TYPE) != "head"]
    return (rest, heads) if rest else (heads, [])


def apply_drain(
    kube: Kube,
    namespace: str,
    cluster: str,
    victims: Sequence[str],
    *,
    message: str,
    deadline_s: float,
    gcs_address: str | None = "auto",
    timeout_s: float = 5.0,
    wait: bool = True,
) -> DrainReport:
    """Drain the Ray nodes of ``victims`` (pod names) of RayCluster ``cluster`` before they are evicted.

    ``gcs_address="auto"`` finds the live head pod; a RayCluster or pod already gone drains nothing (there is no Ray
    node left to warn). Never raises for Ray's sake: the caller evicts whatever this returns."""
    report = DrainReport(cluster, deadline_s)
    if gcs_address is None or deadline_s <= 0 or not victims:
        return report
    try:
        listed = kube.get(pods_path(namespace), labelSelector=f"{c.RAY_CLUSTER}={cluster}") or {}
        pods = list(listed.get("items") or [])
        raycluster = kube.get(ray_path("RayCluster", namespace, cluster)) if gcs_address == "auto" else {}
    except ApiError as exc:
        if exc.not_found:
            return report
        raise
    by_name = {name_of(p): p for p in pods}
    first, last = drain_plan([by_name[v] for v in victims if v in by_name])
    address = gcs_address_for(raycluster, pods) if gcs_address == "auto" else gcs_address
    report.drains, report.waited_s = drain_and_wait(address, first, message, deadline_s, timeout_s=timeout_s, wait=wait)
    if last:
        left = max(LAST_DRAIN_MIN_S, deadline_s - report.waited_s)
        later, _ = drain_and_wait(address, last, message, left, timeout_s=timeout_s, wait=False)
        report.drains.extend(later)
    return report

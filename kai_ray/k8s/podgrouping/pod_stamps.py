"""Stamping pods with their PodGroup (``pod-group-name`` annotation, subgroup label), now or deferred.

A pod that is its own top owner is schedulable once its PodGroup exists (the scheduler knows the group's name from the
pod, :func:`~kai_ray.podgrouper.defaultgrouper.own_group_name`), so its stamp is off the critical path: it is written
by a separate pool that waits while PodGroups are being created (the API server's CPU goes to creating groups and
binding pods first), at most :data:`STAMP_MAX_DELAY` seconds. Ray pods, and every pod in KAI-coexistence mode (where
KAI's components read the stamp), are stamped at once.

What is remembered per pod is a fingerprint of what grouping reads from it (:func:`pod_fingerprint`), so a pod event
that changes none of it (a status update, a bind) costs no reconcile.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from kai_ray.api.meta import Pod
from kai_ray.api.podgroup import PodGroup
from kai_ray.k8s.base.metrics import PodgrouperMetrics
from kai_ray.k8s.base.rest import ApiError, Kube, pods_path
from kai_ray.k8s.podgrouping.watches import Watches
from kai_ray.podgrouper import PodStamp, stamp
from kai_ray.podgrouper.defaultgrouper import own_group_name, skip_marks

STAMP_HOLDOFF = 0.5  # seconds without PodGroup writes before deferred stamps go
STAMP_MAX_DELAY = 10.0  # a deferred stamp waits at most this long for a quiet moment
STAMP_WORKERS = 8

Fingerprint = tuple[Any, ...]


@dataclass(frozen=True)
class DeferredStamp:
    """A pod's stamp to write later, off the critical path (``key``: the pod's ``<ns>/<name>``)."""

    key: str
    podgroup: PodGroup


def _frozen(d: dict[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((d or {}).items()))


def pod_fingerprint(obj: dict[str, Any]) -> Fingerprint:
    """What grouping reads from a pod: identity, labels, annotations, owners (not its status or node)."""
    meta = obj.get("metadata") or {}
    return (
        meta.get("uid"),
        _frozen(meta.get("labels")),
        _frozen(meta.get("annotations")),
        tuple((r.get("kind"), r.get("uid")) for r in meta.get("ownerReferences") or []),
        bool(meta.get("deletionTimestamp")),
    )


class PodStamps:
    def __init__(self, kube: Kube, watches: Watches, metrics: PodgrouperMetrics, *, kai_coexistence: bool) -> None:
        self.kube = kube
        self.watches = watches
        self.metrics = metrics
        self.kai_coexistence = kai_coexistence
        self._done: dict[str, Fingerprint] = {}  # pod key -> fingerprint of its last complete reconcile
        self._deferred: dict[str, tuple[Fingerprint, float]] = {}  # pod key -> (unstamped fingerprint, since)
        self._lock = threading.Lock()

    def stamp(self, pod: Pod, pg: PodGroup, submitter: bool = False) -> dict[str, Any]:
        """Write what is missing of the stamp; returns the pod's metadata as it now is. ``submitter``: the pod is a
        RayJob's submitter by its owners."""
        full = stamp(pod, pg, submitter)
        if self.kai_coexistence:
            full = PodStamp({**full.annotations, **skip_marks()}, full.labels)
        missing = full.missing_on(pod)
        if not missing:
            return {"metadata": pod.metadata.to_dict()}
        updated = self.kube.merge_patch(pods_path(pod.metadata.namespace, pod.metadata.name), missing.as_patch())
        self.metrics.pods_stamped.inc()
        return dict(updated)

    def stamp_or_defer(
        self, key: str, raw: dict[str, Any], pod: Pod, pg: PodGroup, submitter: bool
    ) -> DeferredStamp | None:
        """Stamp the pod now, or, when the scheduler can place it without its stamp, record it and return the stamp
        to write later."""
        if self._may_defer(raw, pod, pg):
            with self._lock:
                since = self._deferred.get(key, (None, time.monotonic()))[1]
                self._deferred[key] = (pod_fingerprint(raw), since)
            return DeferredStamp(key, pg)
        self._done[key] = pod_fingerprint(self.stamp(pod, pg, submitter))
        return None

    def _may_defer(self, raw: dict[str, Any], pod: Pod, pg: PodGroup) -> bool:
        if self.kai_coexistence or own_group_name(raw.get("metadata") or {}) != pg.metadata.name:
            return False
        return bool(stamp(pod, pg).missing_on(pod))

    def may_go(self, queue_busy: bool, last_group_write: float) -> bool:
        """Whether deferred stamps may be written now: the groups' queue is idle and no PodGroup was created for
        :data:`STAMP_HOLDOFF` seconds, or the oldest has waited :data:`STAMP_MAX_DELAY` seconds."""
        if not queue_busy and time.monotonic() - last_group_write > STAMP_HOLDOFF:
            return True
        with self._lock:
            oldest = next(iter(self._deferred.values()), None)
        return oldest is not None and time.monotonic() - oldest[1] > STAMP_MAX_DELAY

    def write_deferred(self, later: DeferredStamp) -> bool:
        """Write a deferred stamp against the pod as it is now (it may have changed or gone meanwhile). True when
        written; False when there is nothing to write any more. Any other API error is raised, to be retried."""
        key, pg = later.key, later.podgroup
        raw = self.watches.pod(key)
        meta = (raw or {}).get("metadata") or {}
        if raw is None or meta.get("deletionTimestamp") or own_group_name(meta) != pg.metadata.name:
            self.drop(key)
            return False
        try:
            done = self.stamp(Pod.model_validate(raw), pg)
        except ValidationError:
            self.drop(key)
            return False  # changed into something unreadable: its next reconcile says so
        except ApiError as exc:
            if exc.not_found:
                self.drop(key)
                return False
            raise
        self._done[key] = pod_fingerprint(done)
        self.drop(key)
        return True

    def up_to_date(self, key: str, raw: dict[str, Any]) -> bool:
        """Whether a pod event needs no reconcile: the pod was reconciled as it is, or its stamp waits as it is."""
        fp = pod_fingerprint(raw)
        if self._done.get(key) == fp:
            return True
        with self._lock:
            deferred = self._deferred.get(key)
        return deferred is not None and deferred[0] == fp

    def drop(self, key: str) -> None:
        """Forget a deferred stamp."""
        with self._lock:
            self._deferred.pop(key, None)

    def redo(self, key: str) -> None:
        """The pod must be reconciled again even if it has not changed (its PodGroup was deleted)."""
        self._done.pop(key, None)

    def forget(self, key: str) -> None:
        """The pod is gone."""
        self._done.pop(key, None)
        self.drop(key)

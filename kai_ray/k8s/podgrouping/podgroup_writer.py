"""Writes the PodGroups: create, or update keeping what KAI keeps, as the installed CRD stores them; and, with
``--upstream-gangs``, their upstream twins (:mod:`kai_ray.k8s.podgrouping.upstream_writer`).

Why it remembers its own writes until the watch catches up: a pod reconciled right after its group was created must
see that group, not create it again (a conflict) or miss an update (a write chasing a stale copy).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kai_ray import constants as c
from kai_ray.api.podgroup import PodGroup
from kai_ray.k8s.base.informer import DELETE
from kai_ray.k8s.base.metrics import PodgrouperMetrics
from kai_ray.k8s.base.pruning import PruneGuard, strip
from kai_ray.k8s.base.rest import ApiError, Kube, podgroups_path, resource_version
from kai_ray.k8s.podgrouping.upstream_writer import UpstreamGangs
from kai_ray.k8s.podgrouping.watches import Watches
from kai_ray.podgrouper.defaultgrouper import (
    differs,
    merge_existing,
    refuses_zero_min_member,
    update_body,
    without_zero_min_member,
)
from kai_ray.podgrouper.grouper_config import PodgrouperConfig

log = logging.getLogger(__name__)


class PodGroupWriter:
    def __init__(
        self,
        kube: Kube,
        watches: Watches,
        grouper_config: PodgrouperConfig,
        metrics: PodgrouperMetrics,
        upstream: UpstreamGangs | None = None,
    ) -> None:
        self.kube = kube
        self.watches = watches
        self.grouper_config = grouper_config
        self.metrics = metrics
        self.upstream = upstream
        self.pruned = PruneGuard()
        self.last_write = 0.0  # monotonic time of the last PodGroup created (deferred stamps wait for a lull)
        self._omit_zero_min = False  # the installed PodGroup CRD refuses minMember 0 (KAI v0.12): omit it
        self._local: dict[str, dict[str, Any]] = {}  # our own recent writes, until the watch catches up
        self._lock = threading.Lock()

    def get(self, key: str) -> dict[str, Any] | None:
        """The PodGroup ``<ns>/<name>`` as last seen: the watch's copy, or our own write when that is newer."""
        obj = self.watches.podgroup(key)
        with self._lock:
            local = self._local.get(key)
        if local is not None and (obj is None or resource_version(local) > resource_version(obj)):
            return local
        return obj

    def seen(self, event: str, key: str, obj: dict[str, Any]) -> None:
        """A PodGroup watch event: our own write is forgotten once the watch has it (or the group is gone)."""
        with self._lock:
            local = self._local.get(key)
            if local is not None and (event == DELETE or resource_version(obj) >= resource_version(local)):
                del self._local[key]

    def apply(self, desired: PodGroup, existing_raw: dict[str, Any] | None = None) -> PodGroup:
        """Create or update the PodGroup (:meth:`apply_kai`) and, with ``--upstream-gangs``, its upstream twin."""
        stored = self.apply_kai(desired, existing_raw)
        if self.upstream is not None and not stored.metadata.annotations.get(c.INVALID):
            self.upstream.apply(stored)
        return stored

    def apply_kai(self, desired: PodGroup, existing_raw: dict[str, Any] | None = None) -> PodGroup:
        """Create the PodGroup, or update it keeping what KAI keeps. Returns what is now stored.

        What is written is what the installed CRD stores (:meth:`storable`): a ``minMember`` of 0 is omitted once
        the CRD has refused it (KAI v0.12's minimum is 1), and fields its schema prunes are no longer sent, so an
        update never chases a field the server drops."""
        ns = desired.metadata.namespace or ""
        name = desired.metadata.name or ""
        key = f"{ns}/{name}"
        desired = self.storable(desired)
        existing_raw = existing_raw if existing_raw is not None else self.get(key)
        if existing_raw is None:
            self.last_write = time.monotonic()
            try:
                created = self._write(desired, lambda pg: self.kube.create(podgroups_path(ns), pg.to_dict()))
                self._remember(key, created)
                self.metrics.podgroups.labels("created").inc()
                return desired
            except ApiError as exc:
                if not exc.conflict:
                    raise
                existing_raw = self.kube.get(podgroups_path(ns, name))
        assert existing_raw is not None
        existing = PodGroup.model_validate(
            {**existing_raw, "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup"}
        )
        merged = merge_existing(existing, desired, self.grouper_config)
        if not differs(existing, merged):
            return existing
        updated = self._write(
            merged, lambda pg: self.kube.replace(podgroups_path(ns, name), update_body(existing_raw, pg))
        )
        self._remember(key, updated)
        self.metrics.podgroups.labels("updated").inc()
        return merged

    def delete(self, ns: str, name: str) -> None:
        """Delete a PodGroup (gone already is fine)."""
        try:
            self.kube.delete(podgroups_path(ns, name))
        except ApiError as exc:
            if not exc.not_found:
                raise

    def storable(self, pg: PodGroup) -> PodGroup:
        """``pg`` as the installed CRD stores it (see :meth:`apply_kai`)."""
        if self._omit_zero_min:
            pg = without_zero_min_member(pg)
        pruned = self.pruned.known("PodGroup")
        if pruned:
            pg = PodGroup.model_validate(strip(pg.to_dict(), pruned))
        return pg

    def _write(self, pg: PodGroup, write: Callable[[PodGroup], Any]) -> dict[str, Any]:
        """One create or replace. A CRD that refuses ``minMember: 0`` switches the podgrouper to omitting it (logged
        once) and the write is retried so; what the answer lacks of the spec that was sent is recorded as pruned."""
        try:
            stored: dict[str, Any] = write(pg)
        except ApiError as exc:
            lean = without_zero_min_member(pg)
            if lean is pg or not refuses_zero_min_member(exc):
                raise
            if not self._omit_zero_min:
                self._omit_zero_min = True
                log.warning(
                    "the installed PodGroup CRD refuses minMember 0 (%s), as KAI v0.12's does (minimum 1): kai-ray "
                    "now leaves a zero minMember out, which that CRD stores as 0. Install kai-ray's CRDs "
                    "(helm/kai-ray/crds) to write it explicitly.",
                    exc.message,
                )
            pg = lean
            stored = write(pg)
        self.pruned.check("PodGroup", {"spec": pg.to_dict()["spec"]}, stored, f"PodGroup {pg.metadata.name}")
        return stored

    def _remember(self, key: str, obj: dict[str, Any]) -> None:
        with self._lock:
            self._local[key] = obj

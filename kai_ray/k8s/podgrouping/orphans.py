"""Objects whose owner chain cannot be followed (a dangling owner reference), and their adoption once it can.

After :data:`OWNER_GRACE` seconds (an owner may be created after its pod, or the watch may lag), a pod gets its own
PodGroup and a Ray object a placeholder, marked :data:`~kai_ray.constants.INVALID` with the reason (the scheduler
explains it in a condition and schedules nothing of it), and a Warning Event. The reconcile goes on being retried
with backoff: once the owner exists, the object joins its real PodGroup and the stand-in goes. Not in
KAI-coexistence mode, where KAI's scheduler would not read the mark.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pydantic import ValidationError

from kai_ray import constants as c
from kai_ray.api.meta import Pod
from kai_ray.k8s.base.rest import ApiError
from kai_ray.k8s.podgrouping.owners import OwnerError
from kai_ray.k8s.podgrouping.pod_stamps import PodStamps
from kai_ray.k8s.podgrouping.podgroup_writer import PodGroupWriter
from kai_ray.k8s.podgrouping.problems import Problems
from kai_ray.k8s.podgrouping.ray_gangs import RayGangs
from kai_ray.k8s.podgrouping.watches import Watches
from kai_ray.podgrouper import PodgrouperConfig
from kai_ray.podgrouper.defaultgrouper import group_name_for_pod, single_pod_group

log = logging.getLogger(__name__)

OWNER_GRACE = 30.0  # seconds a pod's owner may be missing (created after it, watch lag) before it is explained


class Orphans:
    def __init__(
        self,
        grouper_config: PodgrouperConfig,
        watches: Watches,
        gangs: RayGangs,
        podgroups: PodGroupWriter,
        stamps: PodStamps,
        problems: Problems,
        *,
        kai_coexistence: bool = False,
    ) -> None:
        self.grouper_config = grouper_config
        self.watches = watches
        self.gangs = gangs
        self.podgroups = podgroups
        self.stamps = stamps
        self.problems = problems
        self.kai_coexistence = kai_coexistence
        self.owner_grace = OWNER_GRACE
        self._since: dict[str, float] = {}  # key -> since when its owner chain cannot be followed

    def orphaned(self, key: str, exc: OwnerError) -> None:
        """The owner chain of ``key`` (a pod's ``<ns>/<name>`` or ``ray/<kind>/<ns>/<name>``) cannot be followed:
        once that has lasted :attr:`owner_grace` seconds, the object gets its stand-in (see the module docstring)."""
        first = self._since.setdefault(key, time.monotonic())
        if time.monotonic() - first < self.owner_grace or self.kai_coexistence:
            return
        if key.startswith("ray/"):
            self._ray_orphaned(key, exc)
            return
        raw = self.watches.pod(key)
        meta = (raw or {}).get("metadata") or {}
        if raw is None or meta.get("deletionTimestamp"):
            return
        try:
            pod = Pod.model_validate(raw)
            desired = single_pod_group(pod, self.grouper_config)
            message = (
                f"Pod {pod.metadata.name}: metadata.ownerReferences: {exc}; nothing of it is scheduled until it does"
            )
            desired.metadata.annotations[c.INVALID] = message
            pg = self.podgroups.apply(desired)
            self.stamps.stamp(pod, pg)
        except (ValidationError, ApiError) as err:
            log.info("pod %s: cannot mark it as orphaned: %s", key, err)
            return
        self.problems.orphaned_pod(f"Pod/{key}", raw, message)

    def _ray_orphaned(self, key: str, exc: OwnerError) -> None:
        _, kind, rest = key.split("/", 2)
        raw = self.watches.ray_object(kind, rest)
        if raw is None or (raw.get("metadata") or {}).get("deletionTimestamp"):
            return
        message = f"{kind} {(raw.get('metadata') or {}).get('name')}: metadata.ownerReferences: {exc}"
        placeholder = self.gangs.placeholder(raw, kind, message)
        try:
            if placeholder is not None:
                self.podgroups.apply(placeholder)
        except ApiError as err:
            log.info("%s: cannot mark it as orphaned: %s", key, err)
            return
        self.problems.bad_ray_object(f"{kind}/{rest}", raw, kind, message)

    def adopted(self, key: str, raw: dict[str, Any], group: str | None) -> None:
        """An object that may have had a stand-in PodGroup now has its real one (``group``, or None when its owner
        groups it): the stand-in goes. ``key`` as for :meth:`orphaned`."""
        if self._since.pop(key, None) is None:
            return
        meta = raw.get("metadata") or {}
        self.problems.cleared(f"Pod/{key}")
        own = group_name_for_pod(meta.get("name"), meta.get("uid"))
        ns = meta.get("namespace", "")
        stand_in = self.podgroups.get(f"{ns}/{own}")
        if (
            own == group
            or stand_in is None
            or c.INVALID not in ((stand_in.get("metadata") or {}).get("annotations") or {})
        ):
            return
        try:
            self.podgroups.delete(ns, own)
        except ApiError as exc:
            log.info("deleting the stand-in PodGroup %s/%s: %s", ns, own, exc)

    def forget(self, key: str) -> None:
        """The object is gone."""
        self._since.pop(key, None)

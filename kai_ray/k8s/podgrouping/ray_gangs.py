"""The PodGroup a Ray top owner (RayCluster, RayJob, RayService) should have, built by the pure grouper from the live
objects: the RayCluster that sizes the gang, a RayService's upgrade surge, and a placeholder that says why a Ray
object cannot be grouped.

Why the reports are made here: whether a Ray object can be grouped is known only while building its group, whether
for the object itself or for one of its pods; the Events go on the Ray object once per distinct problem.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from kai_ray import constants as c
from kai_ray.api.loader import ManifestError, parse_object
from kai_ray.api.meta import ObjectMeta, Pod
from kai_ray.api.podgroup import PodGroup
from kai_ray.api.ray import RayCluster, RayJob, RayService
from kai_ray.k8s.base.events import NORMAL, WARNING, EventRecorder, object_ref
from kai_ray.k8s.podgrouping.podgroup_writer import PodGroupWriter
from kai_ray.k8s.podgrouping.problems import Problems
from kai_ray.k8s.podgrouping.watches import Watches
from kai_ray.podgrouper import GroupingError, PodgrouperConfig, group, placeholder_group, suspend_blocker
from kai_ray.podgrouper.upgrade import service_cluster_group


class RayGangs:
    def __init__(
        self,
        grouper_config: PodgrouperConfig,
        watches: Watches,
        podgroups: PodGroupWriter,
        problems: Problems,
        events: EventRecorder,
        *,
        kai_coexistence: bool = False,
        upgrade_surge: bool = False,
    ) -> None:
        self.grouper_config = grouper_config
        self.watches = watches
        self.podgroups = podgroups
        self.problems = problems
        self.events = events
        self.kai_coexistence = kai_coexistence
        self.upgrade_surge = upgrade_surge
        self._warned: dict[str, str] = {}  # Ray CR key -> the suspend blocker warned of (once per distinct one)

    def for_pod(self, kind: str, top: dict[str, Any], chain: list[dict[str, Any]], pod: Pod) -> PodGroup | None:
        """The PodGroup of a pod whose top owner is this Ray object: the object's, or its upgrade surge's."""
        desired = self.desired(kind, top, chain, pod)
        if desired is not None and kind == "RayService" and self.upgrade_surge:
            desired = self._service_cluster_group(top, chain, desired)
        return desired

    def desired(self, kind: str, top: dict[str, Any], chain: list[dict[str, Any]], pod: Pod | None) -> PodGroup | None:
        """The Ray top owner's PodGroup, or None after reporting why it cannot be built (an Event on the CR)."""
        ckey = f"{kind}/{(top.get('metadata') or {}).get('namespace')}/{(top.get('metadata') or {}).get('name')}"
        try:
            obj = parse_object({**top, "kind": kind}, f"{kind} {(top.get('metadata') or {}).get('name')}")
            assert isinstance(obj, RayCluster | RayJob | RayService)
            cluster = self._effective_cluster(obj, chain)
            desired = group(obj, cluster=cluster, pod=pod, config=self.grouper_config)
        except (ManifestError, GroupingError) as exc:
            self.problems.bad_ray_object(ckey, top, kind, str(exc))
            return self.placeholder(top, kind, str(exc))
        problem = desired.metadata.annotations.get(c.INVALID)
        if problem:
            self.problems.bad_ray_object(ckey, top, kind, problem)
        elif self.problems.cleared(ckey):
            self.events.emit(object_ref(top, kind=kind), NORMAL, "PodGroupValid", "the Ray object can be grouped again")
        blocker = suspend_blocker(kind, obj.metadata.name, top.get("spec") or {})
        if blocker is not None and self._warned.get(ckey) != blocker:
            self._warned[ckey] = blocker
            self.events.emit(
                object_ref(top, kind=kind),
                WARNING,
                "NotPreemptible",
                f"{blocker}; kai-ray schedules it as non-preemptible (within its queue's quota) and never preempts it",
            )
        elif blocker is None:
            self._warned.pop(ckey, None)
        return desired

    def placeholder(self, top: dict[str, Any], kind: str, problem: str) -> PodGroup | None:
        """A PodGroup that says why the Ray object cannot be scheduled (see :func:`placeholder_group`). Not in
        KAI-coexistence mode: KAI's scheduler does not read our :data:`~kai_ray.constants.INVALID` mark."""
        if self.kai_coexistence:
            return None
        try:
            meta = ObjectMeta.model_validate(top.get("metadata") or {})
        except ValidationError:
            return None
        if not meta.name or not meta.namespace:
            return None
        return placeholder_group(meta, kind, problem, self.grouper_config)

    def forget(self, ckey: str) -> None:
        """The Ray object ``<Kind>/<ns>/<name>`` is gone."""
        self._warned.pop(ckey, None)
        self.problems.cleared(ckey)

    def _service_cluster_group(self, top: dict[str, Any], chain: list[dict[str, Any]], main: PodGroup) -> PodGroup:
        """A RayService pod's PodGroup: the service's, or its upgrade surge's (:mod:`kai_ray.podgrouper.upgrade`)."""
        raw = next((o for o in chain if o.get("kind") == "RayCluster"), None)
        if raw is None:
            return main
        try:
            service = parse_object({**top, "kind": "RayService"}, "RayService")
            cluster = parse_object({**raw, "kind": "RayCluster"}, "RayCluster")
        except ManifestError:
            return main
        if not isinstance(service, RayService) or not isinstance(cluster, RayCluster):
            return main
        ns = service.metadata.namespace or ""
        try:
            return service_cluster_group(
                service, cluster, main, lambda name: self.podgroups.get(f"{ns}/{name}") is not None, self.grouper_config
            )
        except GroupingError:
            return main

    def _effective_cluster(
        self, obj: RayCluster | RayJob | RayService, chain: list[dict[str, Any]]
    ) -> RayCluster | None:
        """The live RayCluster that sizes the gang: the active one of a RayService, the RayJob's, or the pod's."""
        ns = obj.metadata.namespace or ""
        name: str | None = None
        if isinstance(obj, RayJob) and obj.status is not None:
            name = obj.status.ray_cluster_name
        elif isinstance(obj, RayService) and obj.status is not None:
            for svc in (obj.status.active_service_status, obj.status.pending_service_status):
                if svc is not None and svc.ray_cluster_name:
                    name = svc.ray_cluster_name
                    break
        raw = self.watches.ray_object("RayCluster", f"{ns}/{name}") if name else None
        if raw is None:
            raw = next((o for o in chain if o.get("kind") == "RayCluster"), None)
        if raw is None or isinstance(obj, RayCluster):
            return None
        try:
            cluster = parse_object({**raw, "kind": "RayCluster"}, f"RayCluster {name}")
        except ManifestError:
            return None  # the embedded spec is used instead
        return cluster if isinstance(cluster, RayCluster) else None

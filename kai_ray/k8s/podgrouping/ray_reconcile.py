"""One Ray object (RayCluster, RayJob, RayService): its PodGroup created as soon as it exists and following its spec,
what its gang became told in Events, and its pods named for a new reconcile when their stamp may have changed.

A RayCluster owned by a RayJob or RayService is grouped through its owner. A Ray object that cannot be grouped gets a
Warning Event naming the field and is not retried until it changes (no crash loop, no hot loop).
"""

from __future__ import annotations

from typing import Any

from kai_ray import constants as c
from kai_ray.api.loader import parse_object
from kai_ray.api.podgroup import PodGroup
from kai_ray.api.ray import RayCluster, RayJob, RayService
from kai_ray.api.strict import LAST_APPLIED, object_unknown_fields
from kai_ray.k8s.base.events import WARNING, EventRecorder, object_ref
from kai_ray.k8s.base.metrics import PodgrouperMetrics
from kai_ray.k8s.base.rest import ApiError, Kube
from kai_ray.k8s.podgrouping.orphans import Orphans
from kai_ray.k8s.podgrouping.owners import Owners, mark_owner
from kai_ray.k8s.podgrouping.podgroup_writer import PodGroupWriter
from kai_ray.k8s.podgrouping.ray_gangs import RayGangs
from kai_ray.k8s.podgrouping.watches import Watches
from kai_ray.k8s.podgrouping.work import pod_work, ray_work
from kai_ray.k8s.ray.elastic import SUSPEND_ANNOTATION
from kai_ray.podgrouper import GroupingError, ray_resource_warnings
from kai_ray.podgrouper.defaultgrouper import controller_ref, skip_requested
from kai_ray.podgrouper.gang_findings import explain
from kai_ray.podgrouper.upgrade import own_podgroup_name


class RayReconciler:
    def __init__(
        self,
        kube: Kube,
        metrics: PodgrouperMetrics,
        events: EventRecorder,
        watches: Watches,
        owners: Owners,
        gangs: RayGangs,
        podgroups: PodGroupWriter,
        orphans: Orphans,
        *,
        kai_coexistence: bool = False,
    ) -> None:
        self.kube = kube
        self.metrics = metrics
        self.events = events
        self.watches = watches
        self.owners = owners
        self.gangs = gangs
        self.podgroups = podgroups
        self.orphans = orphans
        self.kai_coexistence = kai_coexistence
        self._fields_checked: dict[str, tuple[Any, ...]] = {}  # Ray CR key -> the version whose fields were checked
        self._explained: dict[str, tuple[Any, ...]] = {}  # Ray CR key -> the version whose gang was explained

    def reconcile(self, kind: str, key: str) -> list[str]:
        """Group the Ray object ``<ns>/<name>``; returns the work keys to reconcile next (its owner, its pods). An
        owner that cannot be followed is an :class:`~kai_ray.k8s.podgrouping.owners.OwnerError`."""
        raw = self.watches.ray_object(kind, key)
        if raw is None:
            return []
        meta = raw.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return []
        ns = meta.get("namespace", "")
        ref = controller_ref(meta)
        if kind == "RayCluster" and ref is not None and ref.get("kind") in ("RayJob", "RayService"):
            self.owners.owner(ns, ref)  # an owner that does not exist raises OwnerError (a dangling owner reference)
            self.orphans.adopted(ray_work(kind, key), raw, None)
            return [ray_work(str(ref["kind"]), f"{ns}/{ref.get('name')}")]
        chain = self.owners.chain(raw)
        if any(skip_requested(o.get("metadata") or {}) for o in chain):
            return []
        self._check_fields(kind, raw)
        desired = self.gangs.desired(kind, raw, chain, None)
        if desired is None:
            return []
        if self.kai_coexistence:
            mark_owner(self.kube, self.metrics, kind, raw)
        existing = self.podgroups.get(f"{ns}/{desired.metadata.name}")
        self.podgroups.apply(desired, existing_raw=existing)
        if c.INVALID not in desired.metadata.annotations:
            self._explain(kind, raw, desired, existing)
        self.orphans.adopted(ray_work(kind, key), raw, desired.metadata.name)
        return [pod_work(pkey) for pkey, pod in self.watches.all_pods() if _restamp(pod, raw, kind, desired, ns)]

    def forget(self, kind: str, key: str) -> None:
        """The Ray object is gone."""
        ckey = f"{kind}/{key}"
        self.gangs.forget(ckey)
        self.orphans.forget(ray_work(kind, key))
        self._fields_checked.pop(ckey, None)
        self._explained.pop(ckey, None)

    def _check_fields(self, kind: str, raw: dict[str, Any]) -> None:
        """One Warning Event per version of a Ray CR naming its unknown fields (kept by the object, or pruned by the
        API server but remembered by kubectl's last-applied annotation). Resources Kubernetes would refuse (a bad
        quantity, a negative or fractional GPU count) make the object ungroupable: :class:`RayGangs` reports them."""
        meta = raw.get("metadata") or {}
        ckey = f"{kind}/{meta.get('namespace')}/{meta.get('name')}"
        version = (meta.get("uid"), meta.get("generation"), (meta.get("annotations") or {}).get(LAST_APPLIED))
        if self._fields_checked.get(ckey) == version:
            return
        self._fields_checked[ckey] = version
        ref = object_ref(raw, kind=kind)
        unknown = object_unknown_fields(raw, kind)
        if unknown:
            self.metrics.findings.labels(kind).inc()
            self.events.emit(ref, WARNING, "UnknownField", f"{'; '.join(map(str, unknown))}; ignored by kai-ray")

    def _explain(self, kind: str, raw: dict[str, Any], pg: PodGroup, existing: dict[str, Any] | None) -> None:
        """Events on a Ray object saying what its gang became where that is likely not what its author expects
        (:mod:`kai_ray.podgrouper.gang_findings`), and a priority class the cluster does not define. Once per
        version."""
        meta = raw.get("metadata") or {}
        by_kai = bool(
            {SUSPEND_ANNOTATION, c.MAX_PENDING_ACTED}
            & set(((existing or {}).get("metadata") or {}).get("annotations") or {})
        )
        annotations = meta.get("annotations") or {}
        version = (meta.get("uid"), meta.get("generation"), annotations.get(c.STALENESS_GRACE), by_kai)
        ckey = f"{kind}/{meta.get('namespace')}/{meta.get('name')}"
        if self._explained.get(ckey) == version:
            return
        self._explained[ckey] = version
        obj = parse_object({**raw, "kind": kind}, f"{kind} {meta.get('name')}")
        assert isinstance(obj, RayCluster | RayJob | RayService)
        ref = object_ref(raw, kind=kind)
        try:
            findings = explain(obj, pg, suspended_by_kai=by_kai)
            mismatches = ray_resource_warnings(obj)
        except GroupingError:  # no embedded cluster spec (a clusterSelector RayJob): nothing of its own to explain
            findings, mismatches = [], []
        for finding in findings:
            self.events.emit(ref, finding.type, finding.reason, finding.message)
        for problem in mismatches:
            self.events.emit(ref, WARNING, "RayResourceMismatch", problem)
        pclass = pg.spec.priority_class_name
        if pclass and not self._priority_class_exists(pclass):
            self.events.emit(
                ref,
                WARNING,
                "PriorityClassNotFound",
                f"priority class {pclass!r}: no such PriorityClass in the cluster; the gang gets the default "
                f"priority {c.DEFAULT_PRIORITY_VALUE}",
            )

    def _priority_class_exists(self, name: str) -> bool:
        """Whether the cluster defines the PriorityClass (True when the API server cannot say)."""
        try:
            self.kube.get(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")
        except ApiError as exc:
            return exc.status != 404
        return True


def _restamp(pod: dict[str, Any], owner: dict[str, Any], kind: str, desired: PodGroup, ns: str) -> bool:
    """Whether a pod of this Ray object may need a new stamp (a subgroup label after a spec change)."""
    pmeta = pod.get("metadata") or {}
    stamped = (pmeta.get("annotations") or {}).get(c.PODGROUP_ANNOTATION)
    return (
        pmeta.get("namespace") == ns
        and stamped in (None, desired.metadata.name, _cluster_group(pod, owner, kind))
        and _belongs(pod, owner, kind)
    )


def _cluster_group(pod: dict[str, Any], owner: dict[str, Any], kind: str) -> str | None:
    """For a RayService's pod, the PodGroup its cluster has had since it was an upgrade surge: a status change (the
    switch that makes the surge the active cluster) must reach those pods too, so the surge mark is cleared."""
    cluster = ((pod.get("metadata") or {}).get("labels") or {}).get(c.RAY_CLUSTER)
    if kind != "RayService" or not cluster:
        return None
    return own_podgroup_name(str(cluster), (owner.get("metadata") or {}).get("uid"))


def _belongs(pod: dict[str, Any], owner: dict[str, Any], kind: str) -> bool:
    """Whether a pod belongs to this Ray CR (through its RayCluster's name label)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    cluster = labels.get(c.RAY_CLUSTER)
    name = (owner.get("metadata") or {}).get("name")
    if kind == "RayCluster":
        return cluster == name
    status = owner.get("status") or {}
    names = {status.get("rayClusterName")}
    for svc in ("activeServiceStatus", "pendingServiceStatus"):
        names.add((status.get(svc) or {}).get("rayClusterName"))
    return cluster is not None and (cluster in names or str(cluster).startswith(f"{name}-"))

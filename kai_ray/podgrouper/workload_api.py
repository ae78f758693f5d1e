"""A Ray object's gang in Kubernetes' own workload API (``scheduling.k8s.io/v1beta1`` ``Workload`` + ``PodGroup``).

Why: Kubernetes 1.37 schedules gangs itself (``GenericWorkload``): kube-scheduler places a PodGroup's pods in one
pass once ``minCount`` of them fit. KubeRay's own integration writes the older ``v1alpha2`` objects, for RayClusters
only, and skips autoscaling clusters. The podgrouper already knows each Ray object's gang (its minimum from the head,
the submitter and every worker group's ``minReplicas``, its ceiling from ``maxReplicas``, its queue and priority
class), so it can write the same gang upstream: then kube-scheduler gang-schedules a Ray object, autoscaling or not,
and kai-ray schedules it as an upstream gang too.

The mapping, from the KAI PodGroup the podgrouper computes (same name, namespace, labels and owner):

- one ``Workload`` with one PodGroup template ``ray``: ``schedulingPolicy.gang.minCount`` = ``minMember``, the
  priority class, ``disruptionMode: all`` (a Ray gang below its minimum does not run; kai-ray's own Ray-aware
  shrink takes the surplus above it), ``controllerRef`` the Ray object;
- one ``PodGroup`` instantiating it (``workloadRef``), with the same policy; the gang's ceiling, which the upstream
  API has no field for, rides on ``kai-ray.io/max-member`` as on the KAI PodGroup; the queue on
  ``kai.scheduler/queue``, where kai-ray's scheduler reads it for upstream gangs;
- each pod of the gang names the PodGroup in ``spec.schedulingGroup.podGroupName`` and takes the gang's PriorityClass
  (:func:`scheduling_group_patch`, applied by the podgrouper's admission webhook: both can only be set when the pod is
  created, and kube-scheduler schedules a PodGroup only when all its pods have its priority).

A composite group (head + one child per worker group) is not written: 1.37 serves composite groups only in
``v1alpha3``, behind its own gate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kai_ray import constants as c
from kai_ray.api.podgroup import PodGroup

VERSION = "scheduling.k8s.io/v1beta1"
TEMPLATE = "ray"


def _meta(pg: PodGroup) -> dict[str, Any]:
    labels = dict(pg.metadata.labels)
    if pg.spec.queue:
        labels[c.QUEUE_LABEL] = pg.spec.queue
    meta: dict[str, Any] = {"name": pg.metadata.name, "namespace": pg.metadata.namespace, "labels": labels}
    if pg.metadata.owner_references:
        meta["ownerReferences"] = [r.model_dump(by_alias=True, exclude_none=True) for r in pg.metadata.owner_references]
    return meta


def _policy(pg: PodGroup) -> dict[str, Any]:
    return {"gang": {"minCount": max(1, int(pg.spec.min_member or 0))}}


def _controller(pg: PodGroup) -> dict[str, Any] | None:
    for ref in pg.metadata.owner_references or []:
        if ref.api_version.startswith("ray.io/"):
            return {"apiGroup": "ray.io", "kind": ref.kind, "name": ref.name}
    return None


def upstream_gang(pg: PodGroup) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``Workload`` and the ``PodGroup`` that say ``pg``'s gang in the upstream API."""
    common: dict[str, Any] = {"schedulingPolicy": _policy(pg), "disruptionMode": {"all": {}}}
    if pg.spec.priority_class_name:
        common["priorityClassName"] = pg.spec.priority_class_name
    workload_spec: dict[str, Any] = {"podGroupTemplates": [{"name": TEMPLATE, **common}]}
    controller = _controller(pg)
    if controller is not None:
        workload_spec["controllerRef"] = controller
    workload = {"apiVersion": VERSION, "kind": "Workload", "metadata": _meta(pg), "spec": workload_spec}
    meta = _meta(pg)
    if c.MAX_MEMBER in pg.metadata.annotations:
        meta["annotations"] = {c.MAX_MEMBER: pg.metadata.annotations[c.MAX_MEMBER]}
    podgroup = {
        "apiVersion": VERSION,
        "kind": "PodGroup",
        "metadata": meta,
        "spec": {"workloadRef": {"workloadName": pg.metadata.name, "templateName": TEMPLATE}, **common},
    }
    return workload, podgroup


def min_count(obj: Mapping[str, Any]) -> int | None:
    """The gang minimum an upstream PodGroup or Workload template states (None when it states none)."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Workload":
        templates = spec.get("podGroupTemplates") or [{}]
        spec = templates[0] if isinstance(templates[0], dict) else {}
    gang = (spec.get("schedulingPolicy") or {}).get("gang") or {}
    value = gang.get("minCount")
    return int(value) if isinstance(value, int) else None


def scheduling_group_patch(
    pod: Mapping[str, Any], podgroup: str, priority_class: str | None = None, priority: int | None = None
) -> list[dict[str, Any]]:
    """JSON patch naming ``podgroup`` in a pod being created, and giving the pod its gang's PriorityClass
    (kube-scheduler refuses a PodGroup whose pods' priority differs from its own). Nothing when the pod names a group
    already (the user's or another controller's choice stands)."""
    spec = pod.get("spec") or {}
    if spec.get("schedulingGroup"):
        return []
    ops: list[dict[str, Any]] = [{"op": "add", "path": "/spec/schedulingGroup", "value": {"podGroupName": podgroup}}]
    if priority_class and priority is not None and spec.get("priorityClassName") != priority_class:
        ops.append({"op": "add", "path": "/spec/priorityClassName", "value": priority_class})
        ops.append({"op": "add", "path": "/spec/priority", "value": priority})
    return ops

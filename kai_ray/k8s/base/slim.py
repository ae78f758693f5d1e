"""Pods as the operators keep them: only what scheduling, grouping and explaining read.

Below both operators (the podgrouper's and the scheduler's informers both slim pods with it), so neither operator
imports the other for it.
"""

from __future__ import annotations

from typing import Any

POD_META = (
    "name",
    "namespace",
    "uid",
    "labels",
    "annotations",
    "ownerReferences",
    "creationTimestamp",
    "deletionTimestamp",
    "resourceVersion",
)
POD_SPEC = (
    "nodeName",
    "schedulerName",
    "priorityClassName",
    "priority",
    "nodeSelector",
    "tolerations",
    "affinity",
    "schedulingGates",
    "schedulingGroup",  # the upstream Kubernetes PodGroup the pod belongs to
)


RESIZE_CONDITIONS = ("PodResizePending", "PodResizeInProgress")


def _resize_status(status: dict[str, Any]) -> dict[str, Any]:
    """What in-place resize adds to a slim pod's status: each container's allocated and actual resources, and the
    resize conditions beside Ready (``bridge.effective_requests`` reads them as kube-scheduler does)."""
    out: dict[str, Any] = {
        key: [{k: cs[k] for k in ("name", "allocatedResources", "resources") if k in cs} for cs in status[key]]
        for key in ("containerStatuses", "initContainerStatuses")
        if status.get(key)
    }
    conditions = status.get("conditions") or []
    resize = [cd for cd in conditions if cd.get("type") in RESIZE_CONDITIONS]
    if resize:
        out["conditions"] = [cd for cd in conditions if cd.get("type") == "Ready"][:1] + resize
    return out


def slim_pod(obj: dict[str, Any]) -> dict[str, Any]:
    """Only what scheduling, grouping and explaining read: keeps thousands of pods small in memory."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    out_spec: dict[str, Any] = {k: spec[k] for k in POD_SPEC if k in spec}
    out_spec["containers"] = [
        {"name": ctr.get("name", ""), "resources": ctr.get("resources") or {}} for ctr in spec.get("containers") or []
    ]
    if spec.get("initContainers"):
        out_spec["initContainers"] = [
            {"name": ctr.get("name", ""), "resources": ctr.get("resources") or {}}
            | ({"restartPolicy": ctr["restartPolicy"]} if ctr.get("restartPolicy") else {})
            for ctr in spec["initContainers"]
        ]
    for key in ("overhead", "resources"):  # what kube-scheduler adds to, or puts above, the containers' requests
        if spec.get(key):
            out_spec[key] = spec[key]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {k: meta[k] for k in POD_META if k in meta},
        "spec": out_spec,
        "status": {
            **{k: status[k] for k in ("phase", "startTime") if k in status},
            # the Ready condition alone: kai-ray.io/ready-timeout reads it
            **{"conditions": [cd for cd in status.get("conditions") or [] if cd.get("type") == "Ready"][:1]},
            **_resize_status(status),
        },
    }

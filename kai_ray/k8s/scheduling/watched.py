"""What the scheduler's informers keep of each watched pod, node and PodGroup.

Why apart from the operator: the cache reads these objects on every event and the reporting reads PodGroups every
cycle, so what is kept of them is most of the scheduler's memory at tens of thousands of pods. Each is slimmed to
what is read, its strings interned and the parts that objects of one workload repeat shared
(:mod:`kai_ray.k8s.base.shared`): an offline reproduction of a 5,000-node cluster with 40,000 pods, each its own
PodGroup, held 160 MiB less. The kept objects are read only (see that module).
"""

from __future__ import annotations

from typing import Any

from kai_ray.k8s.base.informer import slim as slim_object
from kai_ray.k8s.base.shared import SharedParts
from kai_ray.k8s.base.slim import slim_pod
from kai_ray.k8s.scheduling.dra_claims import slim_pod_claims

# the parts that pods of one workload, and PodGroups of one kind, repeat (the cache and the reporting only read them)
_PARTS = SharedParts()
_POD_PARTS = (
    ("metadata", "labels"),
    ("metadata", "ownerReferences"),
    ("spec", "containers"),
    ("spec", "initContainers"),
    ("spec", "tolerations"),
    ("spec", "nodeSelector"),
    ("spec", "affinity"),
    ("status", "conditions"),
)
_NODE_PARTS = (("spec", "taints"), ("status", "allocatable"), ("status", "capacity"), ("status", "conditions"))
_PODGROUP_PARTS = (("metadata", "labels"), ("spec",), ("status", "conditions"), ("status", "schedulingConditions"))


def kept_pod(obj: dict[str, Any]) -> dict[str, Any]:
    """A watched pod as the cache keeps it: slimmed, its strings interned and its common parts shared."""
    return _PARTS.share_all(slim_pod_claims(obj, slim_pod(obj)), _POD_PARTS)


def kept_node(obj: dict[str, Any]) -> dict[str, Any]:
    """A watched node as the cache keeps it: what :func:`~kai_ray.bridge.node_from_api` reads (a kubelet's node
    carries its images, addresses, system facts and heartbeat times as well, ~5 KB a node), strings interned,
    common parts shared."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    slim_status = {k: status[k] for k in ("allocatable", "capacity") if k in status}
    if "conditions" in status:
        slim_status["conditions"] = [
            {"type": cd.get("type"), "status": cd.get("status")} for cd in status["conditions"]
        ]
    node = {
        "metadata": {k: meta[k] for k in ("name", "uid", "labels", "resourceVersion") if k in meta},
        "spec": {k: spec[k] for k in ("taints", "unschedulable") if k in spec},
        "status": slim_status,
    }
    return _PARTS.share_all(node, _NODE_PARTS)


def kept_podgroup(obj: dict[str, Any]) -> dict[str, Any]:
    """A watched PodGroup as the cache keeps it: without managedFields, its strings interned, its common parts
    shared (the spec of every PodGroup of a one-pod workload is the same)."""
    return _PARTS.share_all(slim_object(obj), _PODGROUP_PARTS)

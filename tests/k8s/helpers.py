"""Object builders and bounded polling for the operator tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from kai_ray.api.loader import parse_object
from kai_ray.api.ray import RayCluster
from kai_ray.k8s.base.rest import Kube, events_path, podgroups_path, pods_path
from kai_ray.podgrouper import expand_pods, pod_templates
from kai_ray.testing.testbed import queue_body as queue_body  # the tests' Queues are the reliability runs' Queues

T = TypeVar("T")

PRIORITY_CLASSES = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
SCHEDULER = "kai-scheduler"


def wait_until(what: str, check: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.1) -> T:
    """Poll until ``check`` returns something truthy; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


def pod_body(
    name: str,
    gpus: float = 1,
    group: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    scheduler: str = SCHEDULER,
    owner: dict[str, Any] | None = None,
) -> dict[str, Any]:
    ann = dict(annotations or {})
    if group:
        ann["pod-group-name"] = group
    meta: dict[str, Any] = {"name": name, "labels": dict(labels or {}), "annotations": ann}
    if owner:
        meta["ownerReferences"] = [owner]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/never-pulled:0",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {},
                }
            ],
        },
    }


def podgroup_body(name: str, min_member: int, queue: str, priority: str = "train", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": min_member, "queue": queue, "priorityClassName": priority, **spec},
    }


def make_gang(
    kube: Kube,
    ns: str,
    name: str,
    pods: int,
    gpus: float,
    queue: str,
    priority: str = "train",
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> list[str]:
    """A bring-your-own PodGroup (minMember = pods) and its pods, annotated as the podgrouper would."""
    kube.create(podgroups_path(ns), podgroup_body(name, pods, queue, priority, **spec))
    names = [f"{name}-{i}" for i in range(pods)]
    for pod in names:
        kube.create(pods_path(ns), pod_body(pod, gpus, group=name, labels=labels))
    return names


def pods(kube: Kube, ns: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in kube.get(pods_path(ns))["items"]}


def bound(kube: Kube, ns: str, names: list[str] | None = None) -> dict[str, str]:
    """name -> node of the bound (and not terminating) pods."""
    out = {}
    for name, p in pods(kube, ns).items():
        if names is not None and name not in names:
            continue
        node = p["spec"].get("nodeName")
        if node and not p["metadata"].get("deletionTimestamp"):
            out[name] = node
    return out


def podgroup(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = kube.get(podgroups_path(ns, name))
    return result


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


def events(kube: Kube, ns: str, name: str | None = None, reason: str | None = None) -> list[dict[str, Any]]:
    out = []
    for ev in kube.get(events_path(ns))["items"]:
        if name is not None and ev["involvedObject"].get("name") != name:
            continue
        if reason is not None and ev.get("reason") != reason:
            continue
        out.append(ev)
    return out


def gpu_use(kube: Kube, ns_list: list[str]) -> dict[str, float]:
    """GPUs requested by bound, live pods per node, over the given namespaces."""
    use: dict[str, float] = {}
    for ns in ns_list:
        for p in pods(kube, ns).values():
            node = p["spec"].get("nodeName")
            if not node or p["metadata"].get("deletionTimestamp"):
                continue
            for ctr in p["spec"]["containers"]:
                lim = (ctr.get("resources") or {}).get("limits") or {}
                use[node] = use.get(node, 0.0) + float(lim.get("nvidia.com/gpu", 0))
    return use


def kuberay_pods(
    kube: Kube,
    ns: str,
    cluster: dict[str, Any],
    image: str = "rayproject/ray:2.49.0",
    first_of_each_group: bool = False,
) -> list[str]:
    """Create the pods KubeRay would run for ``cluster`` (``expand_pods``: KubeRay's names and labels), owned by it;
    pods that already exist are skipped, so a scaled-up cluster gets only its new pods. Returns the names created.
    ``first_of_each_group``: only the first pod of each group (what exists of a cluster asked for more pods than
    could ever be created)."""
    model = parse_object({**cluster, "kind": "RayCluster"})
    assert isinstance(model, RayCluster)
    owner = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "name": cluster["metadata"]["name"],
        "uid": cluster["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    existing = set(pods(kube, ns))
    names = []
    for pod in [t.pod for t in pod_templates(model)] if first_of_each_group else expand_pods(model):
        body = pod.to_dict()
        if body["metadata"]["name"] in existing:
            continue
        body["metadata"]["ownerReferences"] = [owner]
        body["metadata"].pop("namespace", None)
        for ctr in body["spec"]["containers"]:
            ctr.setdefault("image", image)  # e.g. the autoscaler sidecar, which expand_pods adds without one
        kube.create(pods_path(ns), body)
        names.append(body["metadata"]["name"])
    return names


def kube_with_priority_classes(plane: Any) -> Kube:
    """A client of ``plane`` after KAI's PriorityClasses are created there (a module's own control plane)."""
    k = Kube(plane.api_client())
    for name, value in PRIORITY_CLASSES.items():
        k.create(
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value},
        )
    return k

"""Nodes, PodGroups and pods as the scheduler cache receives them from its informers, for tests of the cache alone."""

from __future__ import annotations

from typing import Any

from kai_ray.k8s.scheduling.watched import kept_node, kept_pod, kept_podgroup


def node(name: str, gpus: int = 8, cordoned: bool = False) -> dict[str, Any]:
    return kept_node(
        {
            "metadata": {"name": name},
            "spec": {"unschedulable": True} if cordoned else {},
            "status": {
                "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )


def podgroup(name: str, min_member: int = 1, priority: str = "train", **spec: Any) -> dict[str, Any]:
    return kept_podgroup(
        {
            "metadata": {"name": name, "namespace": "ns", "uid": f"g-{name}", "generation": 1},
            "spec": {"minMember": min_member, "queue": "team", "priorityClassName": priority, **spec},
        }
    )


def pod(
    name: str,
    group: str | None = "g",
    node: str | None = None,
    gpus: int = 1,
    scheduler: str = "kai-scheduler",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod in namespace ``ns``, uid ``u-<name>``; pending, or running on ``node``; kept as the informer keeps it."""
    obj: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"u-{name}",
            "resourceVersion": "1",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {**({"pod-group-name": group} if group else {}), **(annotations or {})},
            "managedFields": [{"manager": "x"}],
        },
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": "Pending"},
    }
    if node:
        obj["spec"]["nodeName"] = node
        obj["status"] = {"phase": "Running", "startTime": "2026-01-01T00:00:05Z"}
    return kept_pod(obj)

from __future__ import annotations

import copy
from typing import Any


def worker(name: str, replicas: int | None = 1, **kw: Any) -> dict[str, Any]:
    wg: dict[str, Any] = {
        "groupName": name,
        "template": {"spec": {"containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}},
    }
    if replicas is not None:
        wg["replicas"] = replicas
    for k, v in kw.items():
        wg[k] = v
    return wg


def cluster_spec(*workers: dict[str, Any], autoscaling: bool | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "headGroupSpec": {"template": {"spec": {"containers": [{"name": "head"}]}}},
        "workerGroupSpecs": list(workers),
    }
    if autoscaling is not None:
        spec["enableInTreeAutoscaling"] = autoscaling
    return spec


def ray_doc(
    kind: str,
    spec: dict[str, Any],
    name: str = "demo",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    uid: str = "u-1",
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "RayCluster": spec,
        "RayJob": {"entrypoint": "python x.py", "rayClusterSpec": spec},
        "RayService": {"rayClusterConfig": spec},
    }[kind]
    return {
        "apiVersion": "ray.io/v1",
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": uid,
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": copy.deepcopy(body),
    }

"""Every accepted Ray object explained, on the real API server: the podgrouper operator writes an Event with its own
reason on each legal Ray object whose gang is likely not what its author expects (a user-suspended RayJob, no worker
groups, no replicas, dozens of groups, non-DNS group names, a PriorityClass the cluster lacks, an empty
staleness-grace-period, a gpu-fraction too small to get anything, TPUs Ray is told of but the pod does not get)."""

from __future__ import annotations

from typing import Any

from kai_ray.k8s.base.rest import Kube, events_path, ray_path
from tests.k8s.helpers import wait_until


def _worker(name: str, replicas: int = 1, **meta: Any) -> dict[str, Any]:
    return {
        "groupName": name,
        "replicas": replicas,
        "minReplicas": 0,
        "maxReplicas": 100,
        "template": {"metadata": meta, "spec": {"containers": [{"name": "ray-worker", "image": "rayproject/ray"}]}},
    }


def _spec(*workers: dict[str, Any]) -> dict[str, Any]:
    head = {"template": {"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray"}]}}}
    return {"headGroupSpec": head, "workerGroupSpecs": list(workers)}


def _events(kube: Kube, ns: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {(e["involvedObject"].get("name"), e["reason"]): e for e in kube.get(events_path(ns))["items"]}


def test_each_legal_surprise_gets_its_own_event(
    kube: Kube, namespace: str, run_podgrouper: Any, priority_classes: dict[str, int]
) -> None:
    run_podgrouper()
    cases: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
        ("headless", "RayCluster", _spec(), {}),
        ("idle", "RayCluster", _spec(_worker("gpu", replicas=0)), {}),
        ("many", "RayCluster", _spec(*(_worker(f"g{i}") for i in range(24))), {}),
        ("renamed", "RayCluster", _spec(_worker("GPU_Workers"), _worker("a b")), {}),
        ("noclass", "RayCluster", _spec(_worker("gpu")), {"labels": {"priorityClassName": "no-such-class"}}),
        (
            "stale",
            "RayCluster",
            _spec(_worker("gpu")),
            {"annotations": {"kai.scheduler/staleness-grace-period": ""}},
        ),
        ("tiny", "RayCluster", _spec(_worker("gpu", annotations={"gpu-fraction": "1e-9"})), {}),
        ("held", "RayJob", {"entrypoint": "python x.py", "suspend": True, "rayClusterSpec": _spec(_worker("gpu"))}, {}),
        ("told", "RayCluster", _spec({**_worker("tpu"), "rayStartParams": {"resources": '{"TPU": 4}'}}), {}),
    ]
    for name, kind, spec, meta in cases:
        body = {"apiVersion": "ray.io/v1", "kind": kind, "metadata": {"name": name, **meta}, "spec": spec}
        kube.create(ray_path(kind, namespace), body)
    expected = {
        ("headless", "HeadOnlyGang"): ("Normal", "spec.workerGroupSpecs: none; the gang is the head pod alone"),
        ("idle", "HeadOnlyGang"): ("Normal", "no group has replicas (gpu); the gang is the head pod alone"),
        ("many", "GangShape"): ("Normal", "24 worker groups; the gang is 25 subgroups with 25 pods at least"),
        ("renamed", "SubGroupRenamed"): ("Normal", "is not a DNS label; its subgroup is"),
        ("noclass", "PriorityClassNotFound"): ("Warning", "'no-such-class': no such PriorityClass in the cluster"),
        ("stale", "BadAnnotation"): ("Warning", "staleness-grace-period]: is empty"),
        ("tiny", "GPUFractionTooSmall"): ("Warning", "'1e-9' is less than 1 MiB of even a 141 GiB GPU"),
        ("held", "Suspended"): ("Normal", "spec.suspend is true: KubeRay creates no pods until it is resumed"),
        ("told", "RayResourceMismatch"): ("Warning", "Ray is told TPU 4 but the Ray container has no google.com/tpu"),
    }
    events = wait_until(
        "an Event of its own on each Ray object",
        lambda: (lambda ev: ev if set(expected) <= set(ev) else None)(_events(kube, namespace)),
        60,
    )
    for key, (type_, text) in expected.items():
        assert events[key]["type"] == type_ and text in events[key]["message"], (key, events[key]["message"])
    renamed = [
        e["message"]
        for e in kube.get(events_path(namespace))["items"]
        if e["involvedObject"].get("name") == "renamed" and e["reason"] == "SubGroupRenamed"
    ]
    assert any("'GPU_Workers'" in m for m in renamed) and any("'a b'" in m for m in renamed), renamed
    ordinary = {reason for (name, reason) in events if name == "idle"}
    assert "PriorityClassNotFound" not in ordinary, "the default class exists in the test cluster"

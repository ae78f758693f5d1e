"""A DRA GPU RayCluster with the real KubeRay operator, scheduled through ``resource.k8s.io/v1``.

The manifests are ``examples/dra-gpu-raycluster.yaml`` as shipped (a v1 ResourceClaimTemplate of two H100s per
worker, a RayCluster whose workers name it), changed only in namespace and queue.

Real: kube-apiserver 1.37 serving DRA as shipped (v1), etcd, KWOK nodes, KubeRay's operator, kai-ray's podgrouper and
scheduler. Stand-ins: the ResourceSlices are published by the test as NVIDIA's DRA driver would (no driver runs), and
no kube-controller-manager runs, so the test plays its resourceclaim controller: it makes each worker's claim from
the template, owned by the pod, and names it in the pod's ``status.resourceClaimStatuses``.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray.k8s.base.rest import ApiError, Kube, pods_path, ray_path
from kai_ray.testing.controlplane.harness import ControlPlane
from tests.k8s.helpers import bound, wait_until

pytestmark = [pytest.mark.controlplane, pytest.mark.kuberay, pytest.mark.dra, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dra-gpu-raycluster.yaml"
API = "/apis/resource.k8s.io/v1"
H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def kuberay(control_plane: ControlPlane, namespace: str) -> Iterator[None]:
    control_plane.start_kuberay_operator(batch_scheduler=None, watch_namespace=namespace)
    yield
    control_plane.stop_component("kuberay-operator")


@pytest.fixture
def h100_slices(kube: Kube) -> Iterator[Any]:
    made: list[str] = []

    def publish(node: str, n: int) -> None:
        name = f"{node}-dra-e2e"
        devices = [{"name": f"gpu-{i}", "attributes": {"productName": {"string": H100}}} for i in range(n)]
        kube.create(
            f"{API}/resourceslices",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": name},
                "spec": {
                    "driver": "gpu.nvidia.com",
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            },
        )
        made.append(name)

    with contextlib.suppress(ApiError):
        kube.create(
            f"{API}/deviceclasses",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": "gpu.nvidia.com"},
                "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
            },
        )
    yield publish
    for name in made:
        with contextlib.suppress(ApiError):
            kube.delete(f"{API}/resourceslices/{name}")


def _example(namespace: str, queue: str) -> tuple[dict[str, Any], dict[str, Any]]:
    docs = {d["kind"]: copy.deepcopy(d) for d in yaml.safe_load_all(EXAMPLE.read_text()) if d}
    template, cluster = docs["ResourceClaimTemplate"], docs["RayCluster"]
    assert template["apiVersion"] == "resource.k8s.io/v1"
    for doc in (template, cluster):
        doc["metadata"]["namespace"] = namespace
    cluster["metadata"]["labels"]["kai.scheduler/queue"] = queue
    return template, cluster


def _make_claims(kube: Kube, namespace: str, template: dict[str, Any]) -> list[str]:
    """The resourceclaim controller's part: a claim per worker pod from its template, named in the pod's status."""
    workers = [
        p
        for p in kube.get(pods_path(namespace))["items"]
        if (p["metadata"].get("labels") or {}).get("ray.io/node-type") == "worker"
    ]
    for pod in workers:
        if (pod.get("status") or {}).get("resourceClaimStatuses"):
            continue
        name = f"{pod['metadata']['name']}-gpu-dra"
        owner = {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
        kube.create(
            f"{API}/namespaces/{namespace}/resourceclaims",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name, "ownerReferences": [{**owner, "controller": True}]},
                "spec": template["spec"]["spec"],
            },
        )
        kube.merge_patch(
            f"{pods_path(namespace)}/{pod['metadata']['name']}/status",
            {"status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": name}]}},
        )
    return [p["metadata"]["name"] for p in workers]


def test_the_dra_gpu_raycluster_example_is_gang_scheduled_through_resource_k8s_io_v1(
    kube: Kube,
    namespace: str,
    queues: Any,
    node_pool: Any,
    h100_slices: Any,
    run_podgrouper: Any,
    run_scheduler: Any,
    priority_classes: Any,
    kuberay: None,
) -> None:
    nodes, selector = node_pool(2, gpus=0)
    for node in nodes:
        h100_slices(node, 2)
    queue = queues("training", gpu_quota=4)
    run_podgrouper()
    op = run_scheduler(node_selector=selector)
    assert op.dra.version == "resource.k8s.io/v1"
    template, cluster = _example(namespace, queue)
    kube.create(f"{API}/namespaces/{namespace}/resourceclaimtemplates", template)
    kube.create(ray_path("RayCluster", namespace), cluster)

    workers = wait_until(
        "KubeRay's two worker pods, each given its claim",
        lambda: (lambda w: w if len(w) == 2 else None)(_make_claims(kube, namespace, template)),
        180,
        0.5,
    )
    names = [p["metadata"]["name"] for p in kube.get(pods_path(namespace))["items"]]
    assert len(names) == 3
    placed = wait_until(
        "the whole gang to be bound", lambda: (lambda b: b if len(b) == 3 else None)(bound(kube, namespace, names)), 120
    )
    used = set()
    for worker in workers:
        claim = kube.get(f"{API}/namespaces/{namespace}/resourceclaims/{worker}-gpu-dra")
        results = claim["status"]["allocation"]["devices"]["results"]
        assert len(results) == 2 and {r["pool"] for r in results} == {placed[worker]}
        assert [r["name"] for r in claim["status"]["reservedFor"]] == [worker]
        used |= {(r["pool"], r["device"]) for r in results}
    assert len(used) == 4

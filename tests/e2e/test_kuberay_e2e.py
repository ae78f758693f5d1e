"""The headline promise end to end, with the real KubeRay operator.

What is real: kube-apiserver + etcd; KWOK GPU nodes (4 x 8 fake `nvidia.com/gpu`); KubeRay's operator built from the
`github.com/ray-project/kuberay/ray-operator` Go module and run with `--batch-scheduler=kai-scheduler`, turning our
example RayJob and RayService into RayClusters and pods; kai-ray's podgrouper and scheduler operators. The manifests
are `examples/rayjob-training.yaml` and `examples/rayservice-vllm.yaml`, changed only in namespace and queue names.

What is not exercised: Ray itself never runs inside KWOK pods (no containers), so the RayJob never submits its job
and the RayService never becomes ready to serve; no GPU exists. No kube-controller-manager runs, so the test does what
its garbage collector would when the RayService is deleted: it deletes the RayService's RayCluster and that cluster's
pods.
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray.controlplane.harness import ControlPlane
from kai_ray.k8s.rest import ApiError, Kube, podgroups_path, pods_path, ray_path
from tests.k8s.helpers import condition, events, gpu_use, wait_until

pytestmark = [pytest.mark.controlplane, pytest.mark.kuberay, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _example(name: str, namespace: str, queue: str) -> dict[str, Any]:
    doc = copy.deepcopy(yaml.safe_load((EXAMPLES / name).read_text()))
    doc["metadata"]["namespace"] = namespace
    doc["metadata"]["labels"]["kai.scheduler/queue"] = queue
    return doc


def _ray_pods(kube: Kube, ns: str, owner_name: str) -> list[dict[str, Any]]:
    """Pods of the RayCluster(s) that a RayJob/RayService named ``owner_name`` created."""
    items = kube.get(pods_path(ns), labelSelector=f"ray.io/originated-from-cr-name={owner_name}")["items"]
    if not items:  # older KubeRay: select through the clusters' names
        clusters = kube.get(ray_path("RayCluster", ns))["items"]
        names = {
            c["metadata"]["name"]
            for c in clusters
            if any(r.get("name") == owner_name for r in c["metadata"].get("ownerReferences", []))
        }
        items = [
            p
            for p in kube.get(pods_path(ns))["items"]
            if p["metadata"].get("labels", {}).get("ray.io/cluster") in names
        ]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _bound(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p["spec"].get("nodeName")]


def _podgroup_of(kube: Kube, ns: str, owner_kind: str, owner_name: str) -> dict[str, Any] | None:
    for pg in kube.get(podgroups_path(ns))["items"]:
        refs = pg["metadata"].get("ownerReferences") or []
        if any(r["kind"] == owner_kind and r["name"] == owner_name for r in refs):
            return pg
    return None


@pytest.fixture
def kuberay(control_plane: ControlPlane, namespace: str):
    control_plane.start_kuberay_operator(batch_scheduler="kai-scheduler", watch_namespace=namespace)
    yield
    control_plane.stop_component("kuberay-operator")


def test_inference_preempts_training_and_training_comes_back(
    kube: Kube,
    namespace: str,
    queues: Any,
    node_pool: Any,
    run_podgrouper: Any,
    run_scheduler: Any,
    priority_classes: Any,
    kuberay: None,
) -> None:
    _, selector = node_pool(4, gpus=8)
    queues("ml-platform", gpu_quota=32)
    training_q = queues("training", gpu_quota=16, parent="ml-platform", priority=50)
    serving_q = queues("serving", gpu_quota=16, parent="ml-platform", priority=200)
    run_podgrouper()
    run_scheduler(node_selector=selector)

    # 1. The training RayJob's cluster is gang-scheduled onto the fake GPUs: head + 4 workers x 8 GPUs = 32 GPUs.
    job = _example("rayjob-training.yaml", namespace, training_q)
    kube.create(ray_path("RayJob", namespace), job)
    name = job["metadata"]["name"]
    training = wait_until(
        "KubeRay to create the training pods and kai-ray to bind all 5",
        lambda: (lambda ps: ps if len(ps) == 5 and len(_bound(ps)) == 5 else None)(_ray_pods(kube, namespace, name)),
        120,
    )
    assert all(p["spec"]["schedulerName"] == "kai-scheduler" for p in training)
    assert all(p["metadata"]["labels"].get("kai.scheduler/queue") == training_q for p in training)
    train_pg = wait_until("the RayJob's PodGroup", lambda: _podgroup_of(kube, namespace, "RayJob", name))
    assert train_pg["spec"]["minMember"] == 5 and train_pg["spec"]["queue"] == training_q
    assert {p["metadata"]["annotations"].get("pod-group-name") for p in training} == {train_pg["metadata"]["name"]}
    assert sum(gpu_use(kube, [namespace]).values()) == 32

    # 2. The vLLM RayService arrives on the full cluster; its pods are bound after training is preempted.
    svc = _example("rayservice-vllm.yaml", namespace, serving_q)
    kube.create(ray_path("RayService", namespace), svc)
    svc_name = svc["metadata"]["name"]
    serving = wait_until(
        "the RayService's head and 4-GPU worker to be bound",
        lambda: (lambda ps: ps if len(_bound(ps)) == 2 else None)(_ray_pods(kube, namespace, svc_name)),
        120,
    )
    assert {p["metadata"]["labels"]["ray.io/node-type"] for p in serving} == {"head", "worker"}
    serve_pg = wait_until("the RayService's PodGroup", lambda: _podgroup_of(kube, namespace, "RayService", svc_name))
    assert serve_pg["spec"]["priorityClassName"] == "inference"
    assert serve_pg["spec"]["preemptibility"] == "non-preemptible"
    assert all(v <= 8 for v in gpu_use(kube, [namespace]).values()), "no node is ever over-committed"
    serve_key = f"{namespace}/{serve_pg['metadata']['name']}"
    evicted = wait_until(
        "the training PodGroup to say who evicted it",
        lambda: condition(kube.get(podgroups_path(namespace, train_pg["metadata"]["name"])), "Evicted"),
        60,
    )
    assert evicted["reason"] in ("Reclaimed", "Preempted") and serve_key in evicted["message"]
    evs = wait_until(
        "an Event naming the preemptor",
        lambda: [e for e in events(kube, namespace) if e.get("reason") in ("Reclaimed", "Preempted")],
    )
    assert any(serve_key in e["message"] for e in evs)
    left = _bound(_ray_pods(kube, namespace, name))
    assert len(left) < 5, "the training gang no longer runs whole"

    # 3. The RayService goes away; training is scheduled again.
    kube.delete(ray_path("RayService", namespace, svc_name))
    for cluster in kube.get(ray_path("RayCluster", namespace))["items"]:  # what the garbage collector would do
        if any(r.get("kind") == "RayService" for r in cluster["metadata"].get("ownerReferences", [])):
            with contextlib.suppress(ApiError):
                kube.delete(ray_path("RayCluster", namespace, cluster["metadata"]["name"]))
            for pod in kube.get(pods_path(namespace), labelSelector=f"ray.io/cluster={cluster['metadata']['name']}")[
                "items"
            ]:
                with contextlib.suppress(ApiError):
                    kube.delete(pods_path(namespace, pod["metadata"]["name"]), {"gracePeriodSeconds": 0})
    try:
        wait_until(
            "the training gang to run whole again",
            lambda: len(_bound(_ray_pods(kube, namespace, name))) == 5,
            120,
        )
    except AssertionError:
        pods = [
            (p["metadata"]["name"], p["spec"].get("nodeName"), p["metadata"].get("labels", {}).get("ray.io/cluster"))
            for p in kube.get(pods_path(namespace))["items"]
        ]
        job_now = kube.get(ray_path("RayJob", namespace, name))
        pgs = [(g["metadata"]["name"], g.get("status")) for g in kube.get(podgroups_path(namespace))["items"]]
        raise AssertionError(
            f"pods={pods}\njob status={job_now.get('status')}\njob spec suspend="
            f"{job_now['spec'].get('suspend')}\npodgroups={pgs}"
        ) from None
    assert all(v <= 8 for v in gpu_use(kube, [namespace]).values())

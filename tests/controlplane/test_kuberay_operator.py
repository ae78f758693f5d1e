"""The real KubeRay operator (built from its Go module) on the test control plane.

What runs for real: the operator's RayCluster controller and its ``kai-scheduler`` batch-scheduler plugin, against
the real API server. What does not: Ray itself (KWOK pods run no containers) and any scheduler (nothing binds here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kai_ray.testing.controlplane.harness import ControlPlane, kuberay_crd_dir, wait_for


@pytest.mark.kuberay
def test_operator_creates_kai_stamped_pods_for_a_raycluster(
    control_plane: ControlPlane, kube_api: Any, namespace: str
) -> None:
    sample = Path(kuberay_crd_dir()).parents[1] / "samples" / "ray-cluster.kai-scheduler.yaml"
    (cluster,) = [d for d in yaml.safe_load_all(sample.read_text()) if d and d["kind"] == "RayCluster"]
    queue = cluster["metadata"]["labels"]["kai.scheduler/queue"]
    workers = cluster["spec"]["workerGroupSpecs"][0]["replicas"]

    control_plane.start_kuberay_operator(batch_scheduler="kai-scheduler", watch_namespace=namespace)
    try:
        custom: Any = client.CustomObjectsApi(kube_api)
        custom.create_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", cluster)
        core: Any = client.CoreV1Api(kube_api)

        def all_pods() -> list[Any] | None:
            pods = core.list_namespaced_pod(namespace, label_selector=f"ray.io/cluster={cluster['metadata']['name']}")
            return pods.items if len(pods.items) == 1 + workers else None

        pods = wait_for("KubeRay to create the head and worker pods", all_pods, timeout=60)
        kinds = sorted(p.metadata.labels["ray.io/node-type"] for p in pods)
        assert kinds == ["head"] + ["worker"] * workers
        for pod in pods:
            assert pod.spec.scheduler_name == "kai-scheduler"
            assert pod.metadata.labels["kai.scheduler/queue"] == queue
            assert pod.metadata.owner_references[0].kind == "RayCluster"
            assert not pod.spec.node_name, "nothing but a kai scheduler may bind these pods"
        assert control_plane.components["kuberay-operator"].alive()
    finally:
        control_plane.stop_component("kuberay-operator")

"""Issue 25: the pending cluster of a RayService upgrade is grouped as the service's upgrade surge (real API server,
KubeRay's CRDs; the test plays KubeRay: it creates the RayService, its two RayClusters, their pods and the status)."""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray import constants as c
from kai_ray.k8s.base.rest import Kube, podgroups_path, ray_path
from tests.k8s.helpers import kuberay_pods, pods, wait_until
from tests.k8s.podgrouping.test_podgrouper_operator import QUEUE, _cluster_spec, _create_ray, _worker

pytestmark = [pytest.mark.raynative, pytest.mark.controlplane]


def _group_of(kube: Kube, ns: str, name: str) -> str | None:
    return (pods(kube, ns)[name]["metadata"].get("annotations") or {}).get("pod-group-name")


def test_the_pending_cluster_of_an_upgrade_gets_its_own_surge_podgroup(
    kube: Kube, namespace: str, run_podgrouper: Any
) -> None:
    run_podgrouper()
    spec = _cluster_spec(_worker("gpu", replicas=1, min_replicas=1, max_replicas=1, gpus=4))
    svc = _create_ray(
        kube,
        namespace,
        "RayService",
        "chat",
        {"rayClusterConfig": spec, "upgradeStrategy": {"type": "NewCluster"}},
        labels={QUEUE: "serve", "priorityClassName": "inference"},
    )
    uid = svc["metadata"]["uid"]
    owner = {"apiVersion": "ray.io/v1", "kind": "RayService", "name": "chat", "uid": uid, "controller": True}

    def set_status(active: str, pending: str | None) -> None:
        status: dict[str, Any] = {"activeServiceStatus": {"rayClusterName": active}}
        if pending:
            status["pendingServiceStatus"] = {"rayClusterName": pending}
        kube.request(
            "PATCH",
            ray_path("RayService", namespace, "chat") + "/status",
            body={"status": status},
            content_type="application/merge-patch+json",
        )

    old = _create_ray(kube, namespace, "RayCluster", "chat-old", spec, ownerReferences=[owner])
    set_status("chat-old", None)
    old_pods = kuberay_pods(kube, namespace, old)
    main = f"pg-chat-{uid}"
    wait_until(
        "the active cluster's pods in the service's PodGroup",
        lambda: all(_group_of(kube, namespace, n) == main for n in old_pods),
        30,
    )

    new = _create_ray(kube, namespace, "RayCluster", "chat-new", spec, ownerReferences=[owner])
    set_status("chat-old", "chat-new")
    new_pods = kuberay_pods(kube, namespace, new)
    surge = f"pg-chat-new-{uid}"
    wait_until(
        "the pending cluster's pods in the surge PodGroup",
        lambda: all(_group_of(kube, namespace, n) == surge for n in new_pods),
        30,
    )
    pg = kube.get(podgroups_path(namespace, surge))
    assert pg["metadata"]["annotations"][c.UPGRADE_SURGE_OF] == main
    assert pg["spec"]["minMember"] == 2 and pg["spec"]["priorityClassName"] == "inference"
    assert pg["spec"]["queue"] == "serve"
    assert all(_group_of(kube, namespace, n) == main for n in old_pods)  # the active cluster stays where it was

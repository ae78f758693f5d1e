"""Ray-native scheduling: the pending cluster of a RayService upgrade is grouped as the service's upgrade surge (real API server,
KubeRay's CRDs; the test plays KubeRay: it creates the RayService, its two RayClusters, their pods and the status)."""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray import constants as c
from kai_ray.k8s.base.rest import Kube, podgroups_path, ray_path
from tests.k8s.helpers import bound, events, kuberay_pods, pods, wait_until
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

    # KubeRay switches traffic: the pending cluster becomes the active one; its PodGroup is no longer a surge
    set_status("chat-new", None)
    wait_until(
        "the former surge's mark cleared",
        lambda: kube.get(podgroups_path(namespace, surge))["metadata"]["annotations"].get(c.UPGRADE_SURGE_OF) == "",
        30,
    )
    assert all(_group_of(kube, namespace, n) == surge for n in new_pods)


def _upgrade(kube: Kube, ns: str, queue: str, selector: dict[str, str]) -> tuple[list[str], list[str], str]:
    """A RayService at its queue's quota (head + one 4-GPU worker) and KubeRay's pending cluster of an upgrade."""
    spec = _cluster_spec(_worker("gpu", replicas=1, min_replicas=1, max_replicas=1, gpus=4))
    for group_spec in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
        group_spec["template"]["spec"]["nodeSelector"] = selector
    svc = _create_ray(
        kube,
        ns,
        "RayService",
        "chat",
        {"rayClusterConfig": spec},
        labels={QUEUE: queue, "priorityClassName": "inference"},
    )
    owner = {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "name": "chat",
        "uid": svc["metadata"]["uid"],
        "controller": True,
    }
    path = ray_path("RayService", ns, "chat") + "/status"
    old = _create_ray(kube, ns, "RayCluster", "chat-old", spec, ownerReferences=[owner])
    kube.request(
        "PATCH",
        path,
        body={"status": {"activeServiceStatus": {"rayClusterName": "chat-old"}}},
        content_type="application/merge-patch+json",
    )
    old_pods = kuberay_pods(kube, ns, old)
    wait_until("the service to run", lambda: len(bound(kube, ns, old_pods)) == len(old_pods), 30)
    new = _create_ray(kube, ns, "RayCluster", "chat-new", spec, ownerReferences=[owner])
    status = {
        "activeServiceStatus": {"rayClusterName": "chat-old"},
        "pendingServiceStatus": {"rayClusterName": "chat-new"},
    }
    kube.request("PATCH", path, body={"status": status}, content_type="application/merge-patch+json")
    return old_pods, kuberay_pods(kube, ns, new), svc["metadata"]["uid"]


def test_an_upgrade_at_quota_runs_as_a_surge_up_to_the_limit(
    kube: Kube,
    namespace: str,
    queues: Any,
    node_pool: Any,
    run_scheduler: Any,
    run_podgrouper: Any,
    priority_classes: Any,
) -> None:
    _, selector = node_pool(1, gpus=8)
    queues("dept", gpu_quota=4, gpu_limit=8)
    team = queues("serve", gpu_quota=4, gpu_limit=8, parent="dept")
    run_podgrouper()
    run_scheduler(node_selector=selector)
    old_pods, new_pods, _ = _upgrade(kube, namespace, team, selector)
    wait_until("the upgrade surge to run beside the service", lambda: len(bound(kube, namespace, new_pods)) == 2, 30)
    assert len(bound(kube, namespace, old_pods)) == 2


def test_an_upgrade_beyond_the_limit_says_so_on_the_rayservice(
    kube: Kube,
    namespace: str,
    queues: Any,
    node_pool: Any,
    run_scheduler: Any,
    run_podgrouper: Any,
    priority_classes: Any,
) -> None:
    _, selector = node_pool(1, gpus=8)
    queues("dept", gpu_quota=4, gpu_limit=4)
    team = queues("serve", gpu_quota=4, gpu_limit=4, parent="dept")
    run_podgrouper()
    run_scheduler(node_selector=selector)
    _, new_pods, _ = _upgrade(kube, namespace, team, selector)
    ev = wait_until("a Warning on the RayService", lambda: events(kube, namespace, "chat", "UpgradeSurgeBlocked"), 60)
    assert "upgradeStrategy None" in ev[0]["message"]
    assert ev[0]["involvedObject"]["kind"] == "RayService"
    assert bound(kube, namespace, new_pods) == {}

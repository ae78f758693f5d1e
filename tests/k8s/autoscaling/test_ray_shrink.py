"""A Ray-aware shrink frees a node Karpenter bought, and Karpenter consolidates it.

What is real: the control plane with KWOK; Karpenter's KWOK provider buying and removing nodes; the KubeRay operator
(kai-scheduler batch scheduler) creating and deleting the Ray pods; kai-ray's podgrouper and scheduler, the scheduler
with its elastic reclaim (``scaleStrategy.workersToDelete``, no Ray draining: KWOK pods run no Ray). The Ray
autoscaler's part, raising ``replicas``, is played by the test.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kai_ray import constants as c
from kai_ray.k8s.base.rest import Kube, podgroups_path, pods_path, ray_path
from kai_ray.k8s.ray import elastic
from kai_ray.testing.controlplane.harness import ControlPlane
from kai_ray.testing.controlplane.karpenter import Karpenter
from tests.autoscaler.helpers import raycluster, worker_group
from tests.k8s.autoscaling.buying import bound_on_bought_nodes, consolidated, gang
from tests.k8s.helpers import bound, pods, wait_until

pytestmark = [pytest.mark.controlplane, pytest.mark.kuberay]

STATIC = "kai-ray.test/static"  # only the static node carries it: the Ray head is placed there


@pytest.fixture
def kuberay(control_plane: ControlPlane, namespace: str) -> Iterator[None]:
    control_plane.start_kuberay_operator(batch_scheduler="kai-scheduler", watch_namespace=namespace)
    yield
    control_plane.stop_component("kuberay-operator")


def elastic_cluster(name: str, queue: str, selector: dict[str, str]) -> dict[str, Any]:
    """One 4-GPU worker (minReplicas 1, up to 2) whose workers select the autoscaled nodes; the head selects the
    static node."""
    group = worker_group("gpu", replicas=1, min_replicas=1, max_replicas=2, gpus=4)
    group["template"]["spec"]["nodeSelector"] = dict(selector)
    body = raycluster(name, group, labels={c.QUEUE_LABEL: queue, "priorityClassName": "train"})
    body["spec"]["headGroupSpec"]["template"]["spec"]["nodeSelector"] = {**selector, STATIC: "true"}
    return body


def ray_pods(kube: Kube, ns: str, cluster: str, node_type: str = "") -> dict[str, dict[str, Any]]:
    """The cluster's pods (of ``node_type``: head, worker) not being deleted, by name."""
    sel = f"ray.io/cluster={cluster}" + (f",ray.io/node-type={node_type}" if node_type else "")
    items = kube.get(pods_path(ns), labelSelector=sel)["items"]
    return {p["metadata"]["name"]: p for p in items if not p["metadata"].get("deletionTimestamp")}


def workers(kube: Kube, ns: str, cluster: str) -> dict[str, dict[str, Any]]:
    return ray_pods(kube, ns, cluster, "worker")


def created(pod: dict[str, Any]) -> float:
    return datetime.datetime.fromisoformat(pod["metadata"]["creationTimestamp"]).timestamp()


def test_a_node_emptied_by_a_ray_shrink_is_consolidated_by_karpenter(
    kube: Kube,
    namespace: str,
    queues: Any,
    karpenter: Karpenter,
    gpu_nodes: Any,
    run_scheduler: Any,
    run_podgrouper: Any,
    kuberay: None,
    priority_classes: Any,
) -> None:
    """An elastic RayCluster over its queue's quota grows onto a node Karpenter buys for its new worker; a queue within
    its quota then takes its GPUs back. kai-ray shrinks the cluster by that worker (``workersToDelete``, ``replicas``
    lowered: KubeRay deletes it and creates none), the in-quota gang runs on the static node, and Karpenter removes
    the emptied node. Nothing is bought for the gang that caused the shrink, and the cluster keeps running."""
    (static,) = gpu_nodes(1, gpus=8, labels={**karpenter.labels, STATIC: "true"})
    queues("dept", gpu_quota=8, gpu_limit=8)
    over = queues("over", parent="dept", gpu_quota=0)
    within = queues("within", parent="dept", gpu_quota=8)
    other = queues("other", gpu_quota=8)
    run_podgrouper()
    run_scheduler(node_selector=karpenter.labels, drain_deadline=0.0, ray_activity_interval=0.0)
    created_before = karpenter.claims_created()

    filler = gang(kube, namespace, "filler", other, 1, 4, karpenter.labels)  # half the static node, for now
    wait_until("the filler on the static node", lambda: bound(kube, namespace, filler) or None, 60)
    kube.create(ray_path("RayCluster", namespace), elastic_cluster("train", over, karpenter.labels))
    first = wait_until(
        "the cluster's head and first worker on the static node",
        lambda: (lambda w, b: w if len(w) == 1 and set(w) <= set(b) and len(b) == 2 else None)(
            workers(kube, namespace, "train"), bound(kube, namespace, list(ray_pods(kube, namespace, "train")))
        ),
        120,
        interval=0.5,
    )
    (w1,) = first
    assert bound(kube, namespace)[w1] == static
    # The worker the autoscaler adds must be the newer by the API server's clock (seconds): kai-ray takes the newest
    # elastic worker first, and this test wants that one to be the worker on the bought node.
    wait_until("a second to pass since the first worker", lambda: time.time() >= created(first[w1]) + 1.5, 10)
    kube.json_patch(  # as Ray's autoscaler scales up (a patch: KubeRay's status writes race a whole-object update)
        ray_path("RayCluster", namespace, "train"),
        [{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 2}],
    )
    w2 = wait_until(
        "KubeRay to create the second worker",
        lambda: (lambda w: next(iter(set(w) - {w1}), None))(workers(kube, namespace, "train")),
        60,
        interval=0.5,
    )
    (bought,) = bound_on_bought_nodes(kube, namespace, [w2], karpenter, created_before, claims=1).values()

    kube.delete(pods_path(namespace, filler[0]), {"gracePeriodSeconds": 0})  # its work ends: room on the static node
    wait_until("the filler to be gone", lambda: filler[0] not in pods(kube, namespace), 60)
    reclaimer = gang(kube, namespace, "reclaimer", within, 1, 4, karpenter.labels)
    done = wait_until(
        "the in-quota gang to take the GPUs back, on the static node",
        lambda: bound(kube, namespace, reclaimer) or None,
        120,
        interval=0.5,
    )
    assert set(done.values()) == {static}

    def shrunk() -> bool | None:
        group = kube.get(ray_path("RayCluster", namespace, "train"))["spec"]["workerGroupSpecs"][0]
        return (group["replicas"] == 1 and (group.get("scaleStrategy") or {}).get("workersToDelete") == [w2]) or None

    # The gang fits in the static node's idle room: it is bound as the shrink is sent, not after the shrink lands.
    wait_until("the cluster shrunk by the worker on the bought node", shrunk, 60, interval=0.5)
    wait_until("KubeRay to delete the shrunk worker", lambda: w2 not in pods(kube, namespace), 60, interval=0.5)
    consolidated(karpenter, bought)

    assert karpenter.claims_created() - created_before == 1  # the worker's node; none for the reclaiming gang
    assert set(workers(kube, namespace, "train")) == {w1}  # shrunk, not evicted: nothing recreated
    assert bound(kube, namespace)[w1] == static
    assert not kube.get(ray_path("RayCluster", namespace, "train"))["spec"].get("suspend")
    pg_name = kube.get(pods_path(namespace, w1))["metadata"]["annotations"]["pod-group-name"]
    record = json.loads(
        kube.get(podgroups_path(namespace, pg_name))["metadata"]["annotations"][elastic.SHRINK_ANNOTATION]
    )
    assert record["reason"] == "Reclaimed" and record["groups"] == {"gpu": {"from": 2, "to": 1, "deleted": [w2]}}

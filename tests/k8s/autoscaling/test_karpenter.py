"""kai-ray with a real node autoscaler: Karpenter (KWOK provider) buys nodes for the gangs kai-ray cannot place.

The autoscaler acts on what the pods say: kai-ray marks a pod it leaves pending ``PodScheduled=False``/
``Unschedulable`` (as KAI does), so a gang whose queue has quota but which fits no node gets nodes, and kai-ray then
binds it there.
"""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray.k8s.base.rest import Kube, podgroups_path, pods_path
from kai_ray.testing.controlplane.karpenter import NODEPOOL_LABEL, Karpenter
from tests.k8s.helpers import bound, pod_body, podgroup_body, wait_until

pytestmark = pytest.mark.controlplane

BUY = 180  # seconds for Karpenter to batch, create NodeClaims, KWOK to make the nodes Ready, kai-ray to bind


def gang(kube: Kube, ns: str, name: str, queue: str, n: int, gpus: int, selector: dict[str, str]) -> list[str]:
    """A PodGroup of ``n`` pods of ``gpus`` GPUs each, every pod selecting the autoscaled nodes."""
    kube.create(podgroups_path(ns), podgroup_body(name, n, queue))
    names = []
    for i in range(n):
        body = pod_body(f"{name}-{i}", gpus, group=name)
        body["spec"]["nodeSelector"] = dict(selector)
        kube.create(pods_path(ns), body)
        names.append(f"{name}-{i}")
    return names


def test_a_gang_no_node_fits_gets_nodes_from_karpenter_and_is_bound_there(
    kube: Kube, namespace: str, queues: Any, karpenter: Karpenter, run_scheduler: Any, priority_classes: Any
) -> None:
    team = queues("team", gpu_quota=16)
    run_scheduler(node_selector=karpenter.labels)
    created_before = karpenter.claims_created()
    pods = gang(kube, namespace, "g", team, 2, 8, karpenter.labels)

    placed = wait_until(
        "Karpenter to buy nodes and kai-ray to bind the gang on them",
        lambda: (lambda b: b if len(b) == 2 else None)(bound(kube, namespace, pods)),
        BUY,
        interval=0.5,
    )
    bought = {n["metadata"]["name"]: n for n in karpenter.nodes()}
    assert set(placed.values()) <= set(bought), f"bound on {placed}, Karpenter's nodes {sorted(bought)}"
    assert len(set(placed.values())) == 2  # 8 GPUs each on 8-GPU nodes: one node per pod
    assert all(bought[n]["metadata"]["labels"][NODEPOOL_LABEL] == karpenter.name for n in placed.values())
    assert karpenter.claims_created() - created_before == 2

"""Pods with ``spec.schedulingGates`` (GA since Kubernetes 1.30, still the way a controller holds a pod back in 1.37)
are never bound while gated, on the real kube-apiserver with KWOK nodes.

A gang counts only its non-gated pods towards ``minMember``: with one of its two pods gated it is not ready, nothing
of it is bound and its PodGroup says why; once the gate is removed (the API allows only removing gates) the whole
gang is bound.
"""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray.k8s.base.rest import Kube, podgroups_path, pods_path
from tests.k8s.helpers import bound, condition, pod_body, podgroup, podgroup_body, wait_until

pytestmark = pytest.mark.controlplane


def test_a_gated_pod_is_not_bound_and_holds_its_gang_until_the_gate_is_removed(
    kube: Kube, namespace: str, queues: Any, node_pool: Any, run_scheduler: Any, priority_classes: Any
) -> None:
    nodes, selector = node_pool(1, gpus=8)
    team = queues("team", gpu_quota=8)
    run_scheduler(node_selector=selector)
    kube.create(podgroups_path(namespace), podgroup_body("g", 2, team))
    kube.create(pods_path(namespace), pod_body("g-0", 1, group="g"))
    gated = pod_body("g-1", 1, group="g")
    gated["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
    kube.create(pods_path(namespace), gated)

    cond = wait_until(
        "the gang to say it is short of schedulable pods",
        lambda: (lambda cd: cd if cd and cd.get("status") == "False" else None)(
            condition(podgroup(kube, namespace, "g"), "Scheduled")
        ),
        60,
    )
    assert "non-gated" in cond["message"]
    assert bound(kube, namespace, ["g-0", "g-1"]) == {}

    kube.merge_patch(f"{pods_path(namespace)}/g-1", {"spec": {"schedulingGates": None}})
    placed = wait_until(
        "the whole gang to be bound",
        lambda: (lambda b: b if len(b) == 2 else None)(bound(kube, namespace, ["g-0", "g-1"])),
        60,
    )
    assert set(placed.values()) == {nodes[0]}

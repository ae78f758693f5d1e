"""Issue 25 through the real API server: the scheduler operator's bounded waits (KWOK nodes, real kube-apiserver)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from kai_ray import constants as c
from kai_ray.k8s.base.rest import Kube, pods_path
from tests.k8s.helpers import bound, condition, make_gang, podgroup, wait_until

pytestmark = [pytest.mark.raynative, pytest.mark.controlplane]


def _not_ready(kube: Kube, ns: str, name: str) -> None:
    """What a kubelet reports for a container that never starts (KWOK marks pods Ready once, then leaves them)."""
    kube.request(
        "PATCH",
        pods_path(ns, name) + "/status",
        body={"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}]}},
        content_type="application/strategic-merge-patch+json",
    )


def test_a_gang_bound_but_not_ready_past_the_ready_timeout_is_evicted_and_requeued_later(
    kube: Kube, namespace: str, queues: Any, node_pool: Any, run_scheduler: Any, priority_classes: Any
) -> None:
    _, selector = node_pool(1, gpus=8)
    queues("dept")
    team = queues("team", parent="dept")
    run_scheduler(node_selector=selector, ready_timeout=3.0, ready_timeout_backoff=600.0)
    names = make_gang(kube, namespace, "gang", pods=2, gpus=1, queue=team)
    wait_until("the gang to run", lambda: len(bound(kube, namespace, names)) == 2, 30)
    wait_until(
        "KWOK to mark the pods Ready",
        lambda: all(
            any(
                cd.get("type") == "Ready"
                for cd in (kube.get(pods_path(namespace, n)).get("status") or {}).get("conditions") or []
            )
            for n in names
        ),
        30,
    )
    _not_ready(kube, namespace, names[1])
    wait_until("the half-started gang to be evicted", lambda: bound(kube, namespace, names) == {}, 30)
    cond = wait_until("the Evicted condition", lambda: condition(podgroup(kube, namespace, "gang"), "Evicted"))
    assert cond["reason"] == "ReadyTimeout"
    assert "1 of 2 pods are not Ready" in cond["message"]
    ann = wait_until(
        "the requeue time on the PodGroup",
        lambda: (podgroup(kube, namespace, "gang")["metadata"].get("annotations") or {}).get(c.REQUEUE_AFTER),
    )
    assert ann.endswith("Z")


def test_ready_gangs_are_left_alone(
    kube: Kube, namespace: str, queues: Any, node_pool: Any, run_scheduler: Any, priority_classes: Any
) -> None:
    _, selector = node_pool(1, gpus=8)
    queues("dept")
    team = queues("team", parent="dept")
    op = run_scheduler(node_selector=selector, ready_timeout=1.0)
    names = make_gang(kube, namespace, "gang", pods=2, gpus=1, queue=team)
    wait_until("the gang to run", lambda: len(bound(kube, namespace, names)) == 2, 30)
    time.sleep(1.5)  # past the 1 s ready-timeout (a clock, not a wait for a condition)
    cycles = op.cycles
    op.wake()
    wait_until("a cycle after the timeout", lambda: op.cycles > cycles, 30)
    assert len(bound(kube, namespace, names)) == 2
    assert op.last_result is not None and not op.last_result.evictions

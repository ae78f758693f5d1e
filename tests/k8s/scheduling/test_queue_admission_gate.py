"""The queue-admission gate's operator behaviour on the real kube-apiserver with KWOK nodes: which gated pods wait on
the quota decision, and which the scheduler lets go whatever their queue's quota.

A pod carrying the gate whose queue does not gate (never opted in under ``queues``, or its opt-in label removed) is
ungated at once, without the admission stamp, and then waits at allocation like any pending pod; under ``all`` a pod
naming a queue that does not exist is gated at creation and stays gated, saying so, until the queue is created.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from kai_ray import constants as c
from kai_ray.k8s.base.rest import ApiError, Kube, podgroups_path, pods_path, queues_path
from kai_ray.k8s.podgrouping import admission
from kai_ray.k8s.scheduling.pod_explanation import explain
from kai_ray.testing.controlplane.harness import free_port
from tests.k8s.helpers import bound, condition, pod_body, podgroup, podgroup_body, wait_until

pytestmark = pytest.mark.controlplane


def gang(kube: Kube, ns: str, name: str, queue: str, gpus: int, *, gated: bool) -> str:
    """A one-pod PodGroup; the pod labelled with its queue (the webhook reads it) and, when ``gated``, created with
    the gate already on it (as pods gated before their queue stopped gating are)."""
    kube.create(podgroups_path(ns), podgroup_body(name, 1, queue))
    body = pod_body(f"{name}-0", gpus, group=name, labels={c.QUEUE_LABEL: queue, c.SKIP_PODGROUPER: "true"})
    if gated:
        body["spec"]["schedulingGates"] = [{"name": c.QUEUE_ADMISSION_GATE}]
    kube.create(pods_path(ns), body)
    return f"{name}-0"


def gates(kube: Kube, ns: str, name: str) -> list[str]:
    return [g["name"] for g in kube.get(pods_path(ns, name))["spec"].get("schedulingGates") or []]


def stamped(kube: Kube, ns: str, name: str) -> bool:
    return c.QUEUE_ADMITTED in (kube.get(pods_path(ns, name))["metadata"].get("annotations") or {})


def scheduled_message(kube: Kube, ns: str, group: str, part: str) -> dict[str, Any] | None:
    cond = condition(podgroup(kube, ns, group), "Scheduled")
    return cond if cond and part in cond.get("message", "") else None


def test_gated_pods_of_a_queue_that_does_not_gate_are_let_go_whatever_its_quota(
    kube: Kube, namespace: str, queues: Any, node_pool: Any, run_scheduler: Any, priority_classes: Any
) -> None:
    _, selector = node_pool(1, gpus=8)
    queues("dept", gpu_limit=8)
    a = queues("a", parent="dept")  # never opted in
    b = queues("b", parent="dept")  # opted in, until its label is removed
    kube.merge_patch(queues_path(b), {"metadata": {"labels": {c.QUEUE_ADMISSION_GATING_LABEL: "true"}}})
    run_scheduler(node_selector=selector, queue_admission_gating="queues")
    busy = gang(kube, namespace, "busy", a, 8, gated=False)
    wait_until("queue a's gang to fill the node (and dept's limit)", lambda: bound(kube, namespace, [busy]), 60)

    held = gang(kube, namespace, "held", b, 4, gated=True)
    free = gang(kube, namespace, "free", a, 4, gated=True)
    wait_until("the gate of queue a's pod to be lifted", lambda: gates(kube, namespace, free) == [], 60)
    assert not stamped(kube, namespace, free)  # let go, not admitted: it reserves nothing
    cond = wait_until(
        "queue b's gang to say its queue's quota holds it",
        lambda: scheduled_message(kube, namespace, "held", "gated: queue over quota"),
        60,
    )
    assert cond["reason"] == "OverLimit"
    status = wait_until(
        "queue b's status to count its gated demand as requested",
        lambda: (lambda st: st if (st.get("requested") or {}).get(c.GPU_RESOURCE) == "4" else None)(
            kube.get(queues_path(b)).get("status") or {}
        ),
        60,
    )
    assert (status.get("allocated") or {}).get(c.GPU_RESOURCE) in (None, "0")  # requested, never allocated
    wait_until(
        "queue a's pod, ungated, to be left pending by its queue's limit at allocation",
        lambda: (
            lambda cd: (
                cd
                if cd and cd.get("reason") == "OverLimit" and not cd["message"].startswith(("gated:", "ungated:"))
                else None
            )
        )(condition(podgroup(kube, namespace, "free"), "Scheduled")),
        60,
    )
    assert gates(kube, namespace, held) == [c.QUEUE_ADMISSION_GATE]
    assert bound(kube, namespace, [held, free]) == {}

    kube.merge_patch(queues_path(b), {"metadata": {"labels": {c.QUEUE_ADMISSION_GATING_LABEL: None}}})
    wait_until("queue b's gate to be lifted once b stops gating", lambda: gates(kube, namespace, held) == [], 60)
    assert not stamped(kube, namespace, held)
    kube.delete(pods_path(namespace, busy), {"gracePeriodSeconds": 0})
    wait_until(
        "both gangs to be bound once the limit frees",
        lambda: (lambda bd: bd if len(bd) == 2 else None)(bound(kube, namespace, [held, free])),
        90,
    )


def test_a_pod_whose_queue_does_not_exist_stays_gated_until_the_queue_is_created(
    kube: Kube,
    namespace: str,
    queues: Any,
    node_pool: Any,
    run_scheduler: Any,
    run_podgrouper: Any,
    priority_classes: Any,
) -> None:
    nodes, selector = node_pool(1, gpus=8)
    ghost = f"{namespace}-ghost"
    port = free_port()
    run_podgrouper(
        queue_admission_gating="all",
        webhook_port=port,
        webhook_url=f"https://127.0.0.1:{port}{admission.GATE_PATH}",
    )
    try:
        probe = pod_body("probe-0", 1, group="probe", labels={c.QUEUE_LABEL: ghost, c.SKIP_PODGROUPER: "true"})
        wait_until(
            "the webhook to gate a new pod of a missing queue (a dry run)",
            lambda: (
                c.QUEUE_ADMISSION_GATE
                in [
                    g["name"]
                    for g in kube.request("POST", pods_path(namespace), query={"dryRun": "All"}, body=probe)[
                        "spec"
                    ].get("schedulingGates")
                    or []
                ]
            ),
            60,
            interval=0.5,
        )
        run_scheduler(node_selector=selector, queue_admission_gating="all")
        pod = gang(kube, namespace, "g", ghost, 4, gated=False)  # the webhook gates it
        assert gates(kube, namespace, pod) == [c.QUEUE_ADMISSION_GATE]
        cond = wait_until(
            "the gang to say its queue does not exist, gated",
            lambda: scheduled_message(kube, namespace, "g", f"gated: queue {ghost!r} does not exist"),
            60,
        )
        assert cond["reason"] == "QueueDoesNotExist"
        assert f"gated: queue {ghost!r} does not exist" in explain(kube, namespace, pod)
        assert gates(kube, namespace, pod) == [c.QUEUE_ADMISSION_GATE]

        assert queues("ghost", gpu_quota=8) == ghost
        placed = wait_until("the gang to be ungated and bound", lambda: bound(kube, namespace, [pod]), 60)
        assert placed == {pod: nodes[0]}
        assert stamped(kube, namespace, pod)  # admitted by the quota decision
    finally:
        with contextlib.suppress(ApiError):
            kube.delete(f"{admission.CONFIGS_PATH}/{admission.CONFIG_NAME}")

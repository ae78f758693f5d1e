"""kai-ray with a real node autoscaler: Karpenter (KWOK provider) buys nodes for the gangs kai-ray cannot place.

The autoscaler acts on what the pods say: kai-ray marks a pod it leaves pending ``PodScheduled=False``/
``Unschedulable`` (as KAI does), so a gang whose queue has quota but which fits no node gets nodes, and kai-ray then
binds it there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from kai_ray import constants as c
from kai_ray.k8s.base.rest import ApiError, Kube, podgroups_path, pods_path, queues_path
from kai_ray.k8s.podgrouping import admission
from kai_ray.testing.controlplane.harness import free_port
from kai_ray.testing.controlplane.karpenter import NODEPOOL_LABEL, Karpenter
from tests.k8s.autoscaling.buying import BUY, bound_on_bought_nodes, consolidated, gang
from tests.k8s.helpers import bound, condition, pod_body, podgroup, podgroup_body, wait_until

pytestmark = pytest.mark.controlplane


def test_a_gang_no_node_fits_gets_nodes_from_karpenter_and_is_bound_there(
    kube: Kube, namespace: str, queues: Any, karpenter: Karpenter, run_scheduler: Any, priority_classes: Any
) -> None:
    team = queues("team", gpu_quota=16)
    run_scheduler(node_selector=karpenter.labels)
    created_before = karpenter.claims_created()
    pods = gang(kube, namespace, "g", team, 2, 8, karpenter.labels)

    placed = bound_on_bought_nodes(kube, namespace, pods, karpenter, created_before, claims=2)
    bought = {n["metadata"]["name"]: n for n in karpenter.nodes()}
    assert len(set(placed.values())) == 2  # 8 GPUs each on 8-GPU nodes: one node per pod
    assert all(bought[n]["metadata"]["labels"][NODEPOOL_LABEL] == karpenter.name for n in placed.values())
    assert karpenter.component is not None
    listening = karpenter.component.listening()
    assert listening and {addr for addr, _ in listening} == {"127.0.0.1"}, listening  # the build's loopback patch


@pytest.fixture
def gating_podgrouper(run_podgrouper: Any, kube: Kube) -> Iterator[Any]:
    """The podgrouper with its admission webhook adding the queue-admission gate (opted-in queues); the webhook
    registration is removed afterwards."""
    port = free_port()
    op = run_podgrouper(
        queue_admission_gating="queues",
        webhook_port=port,
        webhook_url=f"https://127.0.0.1:{port}{admission.GATE_PATH}",
    )
    yield op
    with contextlib.suppress(ApiError):
        kube.delete(f"{admission.CONFIGS_PATH}/{admission.CONFIG_NAME}")


def gated_pod(kube: Kube, ns: str, name: str, queue: str, gpus: int, selector: dict[str, str]) -> dict[str, Any]:
    body = pod_body(name, gpus, group=name.rsplit("-", 1)[0], labels={c.QUEUE_LABEL: queue, c.SKIP_PODGROUPER: "true"})
    body["spec"]["nodeSelector"] = dict(selector)
    return body


def labelled_gang(kube: Kube, ns: str, name: str, queue: str, n: int, gpus: int, selector: dict[str, str]) -> list[str]:
    """As :func:`~tests.k8s.autoscaling.buying.gang`, with the queue label the webhook reads (and the podgrouper told to leave the pods alone)."""
    kube.create(podgroups_path(ns), podgroup_body(name, n, queue))
    for i in range(n):
        kube.create(pods_path(ns), gated_pod(kube, ns, f"{name}-{i}", queue, gpus, selector))
    return [f"{name}-{i}" for i in range(n)]


def gates(kube: Kube, ns: str, name: str) -> list[str]:
    return [g["name"] for g in kube.get(pods_path(ns, name))["spec"].get("schedulingGates") or []]


def test_an_over_quota_gang_is_gated_buys_no_node_and_is_bound_on_existing_capacity_once_quota_frees(
    kube: Kube,
    namespace: str,
    queues: Any,
    karpenter: Karpenter,
    gpu_nodes: Any,
    run_scheduler: Any,
    gating_podgrouper: Any,
    priority_classes: Any,
) -> None:
    static = gpu_nodes(1, gpus=8, labels=dict(karpenter.labels))
    dept = queues("dept", gpu_limit=8)
    a = queues("a", parent="dept")
    b = queues("b", parent="dept")  # opts in: its pods are created gated
    ctl = queues("ctl", parent="dept")  # does not: the control, pending over quota as without gates
    kube.merge_patch(queues_path(b), {"metadata": {"labels": {c.QUEUE_ADMISSION_GATING_LABEL: "true"}}})
    assert dept
    wait_until(
        "the webhook to gate a new pod of the opted-in queue (a dry run)",
        lambda: (
            c.QUEUE_ADMISSION_GATE
            in [
                g["name"]
                for g in kube.request(
                    "POST",
                    pods_path(namespace),
                    query={"dryRun": "All"},
                    body=gated_pod(kube, namespace, "probe-0", b, 1, karpenter.labels),
                )["spec"].get("schedulingGates")
                or []
            ]
        ),
        60,
        interval=0.5,
    )
    run_scheduler(node_selector=karpenter.labels, queue_admission_gating="queues")
    created_before = karpenter.claims_created()

    running = labelled_gang(kube, namespace, "run", a, 1, 8, karpenter.labels)
    wait_until("queue a's gang to fill the static node", lambda: bound(kube, namespace, running) or None, 60)
    assert gates(kube, namespace, running[0]) == []  # queue a does not gate

    held = labelled_gang(kube, namespace, "held", b, 2, 4, karpenter.labels)
    assert all(gates(kube, namespace, p) == [c.QUEUE_ADMISSION_GATE] for p in held)
    control = labelled_gang(kube, namespace, "ctl", ctl, 1, 8, karpenter.labels)

    cond = wait_until(
        "the gated gang to say it is gated by its queue's quota",
        lambda: (lambda cd: cd if cd and "gated: queue over quota" in cd.get("message", "") else None)(
            condition(podgroup(kube, namespace, "held"), "Scheduled")
        ),
        60,
    )
    assert cond["reason"] == "OverLimit" and "limit" in cond["message"]
    # The control gang (over quota too, but visible) makes Karpenter buy a node nobody may use; in the same
    # provisioning the gated gang, pending since before, gets none.
    wait_until(
        "Karpenter to buy a node for the ungated over-quota gang",
        lambda: karpenter.claims_created() - created_before >= 1,
        BUY,
        interval=0.5,
    )
    assert karpenter.claims_created() - created_before == 1
    for p in held:
        ps = condition(kube.get(pods_path(namespace, p)), "PodScheduled")
        assert ps is not None and ps["reason"] == "SchedulingGated", ps
    kube.delete(pods_path(namespace, control[0]), {"gracePeriodSeconds": 0})

    kube.delete(pods_path(namespace, running[0]), {"gracePeriodSeconds": 0})  # queue a's work ends: quota frees
    placed = wait_until(
        "the gated gang to be ungated and bound",
        lambda: (lambda bd: bd if len(bd) == 2 else None)(bound(kube, namespace, held)),
        90,
        interval=0.5,
    )
    assert set(placed.values()) <= {*static, *(n["metadata"]["name"] for n in karpenter.nodes())}
    assert karpenter.claims_created() - created_before == 1  # nothing bought for it, before or after
    for p in held:
        pod = kube.get(pods_path(namespace, p))
        assert c.QUEUE_ADMITTED in pod["metadata"]["annotations"]


def test_an_ungated_gang_waiting_for_nodes_keeps_its_room_across_a_new_leader(
    kube: Kube,
    namespace: str,
    queues: Any,
    karpenter: Karpenter,
    run_scheduler: Any,
    gating_podgrouper: Any,
    priority_classes: Any,
) -> None:
    """Between its ungating and its binding a gang has consumed no quota; the room it was admitted into is held by
    the stamp on its pods, so a scheduler that replaces the leader meanwhile does not admit a second gang into it."""
    team = queues("team", gpu_limit=16)
    kube.merge_patch(queues_path(team), {"metadata": {"labels": {c.QUEUE_ADMISSION_GATING_LABEL: "true"}}})
    wait_until(
        "the webhook to gate a new pod of the opted-in queue (a dry run)",
        lambda: (
            c.QUEUE_ADMISSION_GATE
            in [
                g["name"]
                for g in kube.request(
                    "POST",
                    pods_path(namespace),
                    query={"dryRun": "All"},
                    body=gated_pod(kube, namespace, "probe-0", team, 1, karpenter.labels),
                )["spec"].get("schedulingGates")
                or []
            ]
        ),
        60,
        interval=0.5,
    )
    karpenter.set_gpu_limit(0)  # no node can be bought yet: the first gang waits, ungated, with its room reserved
    first = run_scheduler(node_selector=karpenter.labels, queue_admission_gating="queues")
    created_before = karpenter.claims_created()
    admitted = labelled_gang(kube, namespace, "first", team, 2, 8, karpenter.labels)
    wait_until("the first gang to be ungated", lambda: all(not gates(kube, namespace, p) for p in admitted), 60)
    first.stop()

    run_scheduler(node_selector=karpenter.labels, queue_admission_gating="queues")  # the new leader
    later = labelled_gang(kube, namespace, "later", team, 1, 8, karpenter.labels)
    cond = wait_until(
        "the later gang to be kept gated by the new leader",
        lambda: (lambda cd: cd if cd and "gated: queue over quota" in cd.get("message", "") else None)(
            condition(podgroup(kube, namespace, "later"), "Scheduled")
        ),
        60,
    )
    assert "allocated and reserved 16" in cond["message"] and not bound(kube, namespace, admitted)
    karpenter.set_gpu_limit(64)
    bound_on_bought_nodes(kube, namespace, admitted, karpenter, created_before, claims=2)  # none for the later one
    assert gates(kube, namespace, later[0]) == [c.QUEUE_ADMISSION_GATE]


def test_a_node_emptied_by_a_reclaim_is_consolidated_by_karpenter(
    kube: Kube,
    namespace: str,
    queues: Any,
    karpenter: Karpenter,
    gpu_nodes: Any,
    run_scheduler: Any,
    priority_classes: Any,
) -> None:
    """kai-ray takes back over-quota GPUs for a queue within its quota and places that queue's gang on the node that
    already runs work (binpack); the node Karpenter bought for the over-quota gang is left empty and Karpenter removes
    it. Nothing is bought for the reclaiming gang."""
    static = gpu_nodes(1, gpus=8, labels=dict(karpenter.labels))
    queues("dept", gpu_quota=8, gpu_limit=8)
    over = queues("over", parent="dept", gpu_quota=0)
    within = queues("within", parent="dept", gpu_quota=8)
    other = queues("other", gpu_quota=8)
    run_scheduler(node_selector=karpenter.labels)
    created_before = karpenter.claims_created()

    filler = gang(kube, namespace, "filler", other, 1, 4, karpenter.labels)
    wait_until("the filler on the static node", lambda: bound(kube, namespace, filler) or None, 60)
    burst = gang(kube, namespace, "burst", over, 1, 8, karpenter.labels)
    (bought,) = bound_on_bought_nodes(kube, namespace, burst, karpenter, created_before, claims=1).values()

    reclaimer = gang(kube, namespace, "reclaimer", within, 1, 4, karpenter.labels)
    done = wait_until(
        "the in-quota gang to take the GPUs back and run beside the filler",
        lambda: (lambda b: b if b and not bound(kube, namespace, burst) else None)(bound(kube, namespace, reclaimer)),
        90,
        interval=0.5,
    )
    assert set(done.values()) == set(static)
    consolidated(karpenter, bought)
    assert karpenter.claims_created() - created_before == 1

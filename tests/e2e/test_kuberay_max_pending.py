"""Ray-native scheduling: ``kai-ray.io/max-pending-action`` with the real KubeRay operator, kai-ray's podgrouper and scheduler on
a real API server (KWOK nodes).

A training RayJob that cannot start (32 GPUs asked, 8 in the pool) and may wait 5 s: with ``suspend`` kai-ray sets
``spec.suspend`` once, KubeRay suspends it (its cluster and pods go), the PodGroup says so and a Warning Event on the
RayJob names the time waited; with ``fail`` the PodGroup is also marked ``Failed`` and is never placed again.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kai_ray import constants as c
from kai_ray.k8s.base.rest import Kube, podgroups_path, ray_path
from kai_ray.k8s.ray.elastic import SUSPEND_ANNOTATION
from tests.e2e.test_kuberay_e2e import (  # noqa: F401
    GarbageCollector,
    _bound,
    _diagnosis,
    _example,
    _podgroup_of,
    _ray_pods,
    gc,
    kuberay,
)
from tests.k8s.helpers import condition, events, wait_until

pytestmark = [pytest.mark.controlplane, pytest.mark.kuberay, pytest.mark.raynative]


@pytest.mark.parametrize("action", ["suspend", "fail"])
def test_a_rayjob_past_its_max_pending_time_is_suspended_once(
    action: str,
    kube: Kube,
    namespace: str,
    queues: Any,
    node_pool: Any,
    run_podgrouper: Any,
    run_scheduler: Any,
    priority_classes: Any,
    kuberay: None,  # noqa: F811
    gc: GarbageCollector,  # noqa: F811
) -> None:
    _, selector = node_pool(1, gpus=8)
    queues("ml-platform", gpu_quota=32)
    training_q = queues("training", gpu_quota=32, parent="ml-platform")
    run_podgrouper()
    sched = run_scheduler(node_selector=selector)
    job = _example("rayjob-training.yaml", namespace, training_q)
    job["metadata"].setdefault("annotations", {}).update({c.MAX_PENDING_TIME: "5s", c.MAX_PENDING_ACTION: action})
    kube.create(ray_path("RayJob", namespace), job)
    name = job["metadata"]["name"]

    try:
        suspended = wait_until(
            "kai-ray to suspend the RayJob and KubeRay to report it Suspended",
            lambda: (
                lambda j: (
                    j
                    if j["spec"].get("suspend") and (j.get("status") or {}).get("jobDeploymentStatus") == "Suspended"
                    else None
                )
            )(kube.get(ray_path("RayJob", namespace, name))),
            120,
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_diagnosis(kube, namespace, name)}") from None
    assert suspended["spec"]["suspend"] is True
    pg = wait_until("the RayJob's PodGroup", lambda: _podgroup_of(kube, namespace, "RayJob", name))
    pg_name = pg["metadata"]["name"]
    record = json.loads(
        wait_until(
            "the action recorded on the PodGroup",
            lambda: (kube.get(podgroups_path(namespace, pg_name))["metadata"].get("annotations") or {}).get(
                c.MAX_PENDING_ACTED
            ),
            60,
        )
    )
    assert record["action"] == action and record["suspended"] is True
    want = "Failed" if action == "fail" else "Suspended"
    cond = wait_until(
        f"the {want} condition on the PodGroup",
        lambda: condition(kube.get(podgroups_path(namespace, pg_name)), want),
        60,
    )
    assert cond["status"] == "True" and cond["reason"] == "MaxPendingTimeExceeded"
    assert "beyond its max-pending-time 5s" in cond["message"]
    ev = wait_until(
        "a Warning Event on the RayJob naming the time waited",
        lambda: next(
            (
                e
                for e in events(kube, namespace, name, "MaxPendingTimeExceeded")
                if e["involvedObject"]["kind"] == "RayJob" and "spec.suspend set" in e["message"]
            ),
            None,
        ),
        60,
    )
    assert ev["type"] == "Warning"
    assert ev["message"].startswith("pending ") and "beyond its max-pending-time 5s" in ev["message"]
    if action == "fail":
        assert "marked failed" in ev["message"] and "delete and re-create the RayJob" in ev["message"]
    wait_until("KubeRay to remove the suspended job's pods", lambda: not _ray_pods(kube, namespace, name), 60)

    # Once: over more scheduling cycles the RayJob stays suspended, with exactly one action and one Event for it.
    cycles = sched.cycles
    wait_until("five more scheduling cycles", lambda: sched.cycles >= cycles + 5, 60)
    later = kube.get(ray_path("RayJob", namespace, name))
    assert later["spec"]["suspend"] is True
    acted = [e for e in events(kube, namespace, name, "MaxPendingTimeExceeded") if "spec.suspend set" in e["message"]]
    assert len(acted) == 1 and acted[0].get("count", 1) == 1
    again = json.loads(kube.get(podgroups_path(namespace, pg_name))["metadata"]["annotations"][c.MAX_PENDING_ACTED])
    assert again == record


def test_a_rayservice_that_cannot_suspend_is_reported_not_retried(
    kube: Kube,
    namespace: str,
    queues: Any,
    node_pool: Any,
    run_podgrouper: Any,
    run_scheduler: Any,
    priority_classes: Any,
    kuberay: None,  # noqa: F811
    gc: GarbageCollector,  # noqa: F811
) -> None:
    """KubeRay's RayService has ``spec.suspend`` only from v1.7; on an older CRD the API server drops the field, and
    kai-ray says so on the PodGroup (``Suspended`` False, ``MaxPendingActionRefused``) and on the RayService."""
    _, selector = node_pool(1, gpus=2)  # the service's 4-GPU worker never fits
    queues("ml-platform", gpu_quota=32)
    serving_q = queues("serving", gpu_quota=32, parent="ml-platform", priority=200)
    run_podgrouper()
    sched = run_scheduler(node_selector=selector)
    svc = _example("rayservice-vllm.yaml", namespace, serving_q)
    svc["metadata"].setdefault("annotations", {}).update({c.MAX_PENDING_TIME: "3s", c.MAX_PENDING_ACTION: "suspend"})
    kube.create(ray_path("RayService", namespace), svc)
    name = svc["metadata"]["name"]
    pg = wait_until("the RayService's PodGroup", lambda: _podgroup_of(kube, namespace, "RayService", name), 120)
    pg_name = pg["metadata"]["name"]
    cond = wait_until(
        "the refusal on the PodGroup",
        lambda: condition(kube.get(podgroups_path(namespace, pg_name)), "Suspended"),
        120,
    )
    if kube.get(ray_path("RayService", namespace, name))["spec"].get("suspend"):
        pytest.skip("this KubeRay's RayService has spec.suspend (v1.7+): the suspend path is the RayJob test's")
    assert cond["status"] == "False" and cond["reason"] == "MaxPendingActionRefused"
    assert "spec.suspend is not part of the installed RayService CRD" in cond["message"]
    ev = wait_until(
        "a Warning Event on the RayService",
        lambda: next(iter(events(kube, namespace, name, "MaxPendingActionRefused")), None),
        60,
    )
    assert ev["involvedObject"]["kind"] == "RayService" and "beyond its max-pending-time 3s" in ev["message"]
    record = json.loads(kube.get(podgroups_path(namespace, pg_name))["metadata"]["annotations"][c.MAX_PENDING_ACTED])
    assert record["suspended"] is False and "RayService" in record["refused"]
    scheduled = wait_until(
        "the scheduler's verdict to say it was not suspended",
        lambda: (lambda cd: cd if cd and "not suspended, reporting only" in cd.get("message", "") else None)(
            condition(kube.get(podgroups_path(namespace, pg_name)), "Scheduled")
        ),
        60,
    )
    assert scheduled["reason"] == "MaxPendingTimeExceeded" and scheduled["status"] == "False"
    cycles = sched.cycles
    wait_until("five more scheduling cycles", lambda: sched.cycles >= cycles + 5, 60)
    assert len(events(kube, namespace, name, "MaxPendingActionRefused")) == 1
    assert _ray_pods(kube, namespace, name), "its pods stay, pending"


def test_a_preempted_rayjob_waiting_too_long_is_no_longer_resumed(
    kube: Kube,
    namespace: str,
    queues: Any,
    node_pool: Any,
    run_podgrouper: Any,
    run_scheduler: Any,
    priority_classes: Any,
    kuberay: None,  # noqa: F811
    gc: GarbageCollector,  # noqa: F811
) -> None:
    """A RayJob that kai-ray suspended for a preemptor waits to be resumed; past its max-pending-time (counted from the
    eviction) with ``suspend``, kai-ray stops resuming it: it stays suspended when the room comes back."""
    _, selector = node_pool(1, gpus=8)
    queues("ml-platform", gpu_quota=8)
    training_q = queues("training", gpu_quota=4, parent="ml-platform", priority=50)
    serving_q = queues("serving", gpu_quota=4, parent="ml-platform", priority=200)
    run_podgrouper()
    sched = run_scheduler(node_selector=selector)
    job = _example("rayjob-training.yaml", namespace, training_q)
    group = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    group.update(replicas=1, minReplicas=1, maxReplicas=1)  # head + one 8-GPU worker: the whole node
    job["metadata"].setdefault("annotations", {}).update({c.MAX_PENDING_TIME: "4s", c.MAX_PENDING_ACTION: "suspend"})
    kube.create(ray_path("RayJob", namespace), job)
    name = job["metadata"]["name"]
    try:
        wait_until("the training gang to run", lambda: len(_bound(_ray_pods(kube, namespace, name))) == 2, 120)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_diagnosis(kube, namespace, name)}") from None
    pg_name = wait_until("the RayJob's PodGroup", lambda: _podgroup_of(kube, namespace, "RayJob", name))["metadata"][
        "name"
    ]

    svc = _example("rayservice-vllm.yaml", namespace, serving_q)
    kube.create(ray_path("RayService", namespace), svc)
    svc_name = svc["metadata"]["name"]
    wait_until(
        "the RayService to be bound in the training's room",
        lambda: len(_bound(_ray_pods(kube, namespace, svc_name))) == 2,
        120,
    )
    record = json.loads(
        wait_until(
            "the max-pending action on the suspended, waiting RayJob",
            lambda: (kube.get(podgroups_path(namespace, pg_name))["metadata"].get("annotations") or {}).get(
                c.MAX_PENDING_ACTED
            ),
            60,
        )
    )
    assert record["action"] == "suspend" and record["suspended"] is True
    annotations = kube.get(podgroups_path(namespace, pg_name))["metadata"]["annotations"]
    assert SUSPEND_ANNOTATION not in annotations, "kai-ray's own suspend record is dropped: it will not resume it"

    kube.delete(ray_path("RayService", namespace, svc_name))
    wait_until("the RayService's pods to go", lambda: not _ray_pods(kube, namespace, svc_name), 60)
    cycles = sched.cycles
    wait_until("ten more scheduling cycles with the room free", lambda: sched.cycles >= cycles + 10, 60)
    assert kube.get(ray_path("RayJob", namespace, name))["spec"]["suspend"] is True
    assert not _ray_pods(kube, namespace, name)
    assert sched.gangs is not None and not sched.gangs.resumed

"""kai-ray's podgrouper and scheduler on KAI Scheduler's own Queue and PodGroup CRDs instead of ours.

This is the cluster where KAI was installed first (its CRDs stay; README "Running next to KAI"). The CRDs are the
ones in KAI's Go module (``deployments/kai-scheduler/crds`` of ``github.com/NVIDIA/KAI-scheduler@v0.12.0``, the one
version the module proxy serves), downloaded at test time and never built. KubeRay's CRDs come from its module; the
KubeRay operator does not run (the test creates the pods it would create, as tests/k8s/test_podgrouper_operator.py).

KAI v0.12's schema differs from ours where it matters: ``minMember`` has minimum 1 (a zero is stored by leaving it
out), and Queue status has no ``fairShare`` and its conditions no ``transitionID``. The test proves that an elastic
RayCluster whose autoscaled group is at 0 replicas is grouped (the zero left out, read back as 0), scheduled, and
grows into that group; that what the schema prunes is found, reported once (one log line, one Event) and not
written again; and that an unchanged object costs no write.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from kai_ray.k8s.base.rest import Kube, events_path, podgroups_path, pods_path, queues_path, ray_path
from kai_ray.k8s.podgrouping.operator import PodgrouperOperator
from kai_ray.k8s.scheduling.operator import SchedulerOperator, build_scheduler
from kai_ray.testing.controlplane.harness import ControlPlane, kai_crd_files, kuberay_crd_files
from kai_ray.testing.inprocess import operator_config
from tests.k8s.helpers import (
    PRIORITY_CLASSES,
    bound,
    condition,
    gpu_use,
    kuberay_pods,
    pod_body,
    queue_body,
    wait_until,
)

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]

NS = "kai-crds"
QUEUE = "kai.scheduler/queue"


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    with ControlPlane(crds=[*kai_crd_files(), *kuberay_crd_files()]) as cp:
        yield cp


@pytest.fixture(scope="module")
def kube(plane: ControlPlane) -> Iterator[Kube]:
    k = Kube(plane.api_client(pool_size=8))
    yield k
    k.close()


class Collector(logging.Handler):
    """Every WARNING the operators log during the module (each report must appear once over their lifetime)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def count(self, *words: str) -> int:
        return sum(all(w in m for w in words) for m in self.messages)


@pytest.fixture(scope="module")
def warnings() -> Iterator[Collector]:
    collector = Collector()
    logger = logging.getLogger("kai_ray")
    logger.addHandler(collector)
    yield collector
    logger.removeHandler(collector)


@pytest.fixture(scope="module")
def operators(
    plane: ControlPlane, kube: Kube, warnings: Collector
) -> Iterator[tuple[PodgrouperOperator, SchedulerOperator]]:
    crds = {
        c["metadata"]["name"]: c for c in kube.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")["items"]
    }
    assert "app.kubernetes.io/part-of" not in (crds["queues.scheduling.run.ai"]["metadata"].get("labels") or {})
    kube.create("/api/v1/namespaces", {"metadata": {"name": NS}})
    for name, value in PRIORITY_CLASSES.items():
        kube.create(
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            {"metadata": {"name": name}, "value": value, "preemptionPolicy": "PreemptLowerPriority"},
        )
    kube.create(queues_path(), queue_body("dept"))
    kube.create(queues_path(), queue_body("team", gpu_quota=4, parent="dept"))
    plane.create_gpu_nodes(2, gpus=4)
    grouper = PodgrouperOperator(operator_config(plane, NS)).start()
    sched = build_scheduler(operator_config(plane, NS)).start()
    try:
        wait_until("both operators to lead and sync", lambda: grouper.synced() and sched.synced(), 60)
        yield grouper, sched
    finally:
        sched.stop()
        grouper.stop()


def _worker(name: str, replicas: int, min_replicas: int, max_replicas: int) -> dict[str, Any]:
    container = {
        "name": "ray-worker",
        "image": "rayproject/ray:2.52.0",
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    return {
        "groupName": name,
        "replicas": replicas,
        "minReplicas": min_replicas,
        "maxReplicas": max_replicas,
        "template": {"spec": {"schedulerName": "kai-scheduler", "containers": [container]}},
    }


def _pg_of(kube: Kube, prefix: str) -> dict[str, Any] | None:
    for pg in kube.get(podgroups_path(NS))["items"]:
        if pg["metadata"]["name"].startswith(prefix):
            result: dict[str, Any] = pg
            return result
    return None


def test_an_elastic_raycluster_is_grouped_and_scheduled_on_kais_crds(
    kube: Kube, operators: tuple[PodgrouperOperator, SchedulerOperator], warnings: Collector
) -> None:
    grouper, _ = operators
    head = {"spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "ray-head", "image": "rayproject/ray"}]}}
    cluster = kube.create(
        ray_path("RayCluster", NS),
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": "elastic", "labels": {QUEUE: "team", "priorityClassName": "train"}},
            "spec": {
                "enableInTreeAutoscaling": True,
                "headGroupSpec": {"template": head},
                "workerGroupSpecs": [_worker("gpu", 1, 1, 2), _worker("burst", 0, 0, 2)],
            },
        },
    )
    pg = wait_until("the PodGroup on KAI's CRD", lambda: _pg_of(kube, "pg-elastic-"), 60)
    subgroups = {sg["name"]: sg.get("minMember") for sg in pg["spec"]["subGroups"]}
    assert subgroups == {"headgroup": 1, "gpu": 1, "burst": None}, "a zero minMember is left out (KAI stores 0)"
    assert pg["spec"]["minMember"] == 2
    assert warnings.count("refuses minMember 0") == 1, "the schema's refusal is reported once"

    gang = kuberay_pods(kube, NS, cluster)
    wait_until("the gang (head + 1 GPU worker) to be bound", lambda: len(bound(kube, NS, gang)) == 2, 60)
    name = pg["metadata"]["name"]
    scheduled = wait_until("Scheduled=True", lambda: condition(kube.get(podgroups_path(NS, name)), "Scheduled"), 30)
    assert scheduled["status"] == "True"

    # The autoscaler grows the group that started at 0 replicas; its pod is an elastic extra of the running gang.
    current = kube.get(ray_path("RayCluster", NS, "elastic"))
    current["spec"]["workerGroupSpecs"][1]["replicas"] = 1
    current = kube.replace(ray_path("RayCluster", NS, "elastic"), current)
    extra = kuberay_pods(kube, NS, current)
    assert len(extra) == 1
    wait_until("the burst worker to be bound", lambda: bound(kube, NS, extra), 60)

    # Nothing changed: reconciling again writes nothing (no chase of the omitted zero).
    before = kube.get(podgroups_path(NS, name))["metadata"]["resourceVersion"]
    for pod in gang:
        grouper.reconcile_pod(f"{NS}/{pod}")
    assert kube.get(podgroups_path(NS, name))["metadata"]["resourceVersion"] == before
    assert warnings.count("refuses minMember 0") == 1


def _gpus(kube: Kube) -> float:
    return float(((kube.get(queues_path("team")).get("status") or {}).get("allocated") or {}).get("nvidia.com/gpu", 0))


def test_what_kais_schema_prunes_is_reported_once_and_not_written_again(
    kube: Kube, operators: tuple[PodgrouperOperator, SchedulerOperator], warnings: Collector
) -> None:
    grouper, sched = operators
    # A bare pod asks for a preemption delay: our PodGroup CRD stores spec.preemptionDelay, KAI v0.12's prunes it.
    solo_pod = pod_body("solo", 1, labels={QUEUE: "team"}, annotations={"kai.scheduler/preemption-delay": "30s"})
    kube.create(pods_path(NS), solo_pod)
    wait_until("the bare pod to be bound", lambda: bound(kube, NS, ["solo"]), 60)
    solo = wait_until("its PodGroup", lambda: _pg_of(kube, "pg-solo-"), 30)
    assert "preemptionDelay" not in solo["spec"]
    wait_until(
        "the pruned PodGroup field to be known", lambda: "spec.preemptionDelay" in grouper.pruned.known("PodGroup")
    )
    before = kube.get(podgroups_path(NS, solo["metadata"]["name"]))["metadata"]["resourceVersion"]
    for _ in range(3):
        grouper.reconcile_pod(f"{NS}/solo")
    after = kube.get(podgroups_path(NS, solo["metadata"]["name"]))["metadata"]["resourceVersion"]
    assert after == before, "an update never chases a field the server drops"
    assert warnings.count("PodGroup CRD does not store", "spec.preemptionDelay") == 1

    # The scheduler's Queue status: KAI's schema has no fairShare (nor a transitionID on conditions).
    wait_until("the Queue's status (allocated) to be written", lambda: _gpus(kube) > 0, 30)
    assert "fairShare" not in kube.get(queues_path("team"))["status"]
    pruned = wait_until("the pruned Queue fields to be known", lambda: sched.pruned.known("Queue"), 30)
    assert "status.fairShare" in pruned
    notices = wait_until(
        "the one Warning Event about it",
        lambda: [e for e in kube.get(events_path("default"))["items"] if e["reason"] == "StatusFieldsNotStored"],
        30,
    )
    assert len(notices) == 1 and "status.fairShare" in notices[0]["message"]
    assert notices[0]["involvedObject"]["kind"] == "Queue" and notices[0].get("count", 1) == 1

    # More work changes the queue's allocation: its status follows, never again with the pruned fields.
    sent: list[dict[str, Any]] = []
    patch = sched.kube.merge_patch

    def recording(path: str, body: dict[str, Any]) -> Any:
        if path == queues_path("team") + "/status":
            sent.append(body)
        return patch(path, body)

    sched.kube.merge_patch = recording  # type: ignore[method-assign]
    try:
        kube.create(pods_path(NS), pod_body("solo-2", 1, labels={QUEUE: "team"}))
        wait_until("the second pod to be bound", lambda: bound(kube, NS, ["solo-2"]), 60)
        in_use = sum(gpu_use(kube, [NS]).values())
        wait_until(f"the queue's allocation to follow ({in_use:g} GPUs bound)", lambda: _gpus(kube) == in_use, 30)
    finally:
        sched.kube.merge_patch = patch  # type: ignore[method-assign]
    assert sent and not any("fairShare" in body["status"] for body in sent), "pruned fields are not written again"
    assert warnings.count("Queue CRD does not store") == 1

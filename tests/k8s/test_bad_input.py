"""Bad input on the real API server: one object the API accepts but that cannot be scheduled is explained
(a Warning Event and a condition naming the field) and never stops the scheduling of the others.

Both operators run in-process against the real kube-apiserver + etcd with KubeRay's real CRDs and KWOK nodes; the
KubeRay operator does not run, so the test creates the pods KubeRay would create.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from kai_ray import constants as c
from kai_ray.headroom.contract import HEADROOM_ANNOTATION
from kai_ray.k8s.base.rest import ApiError, Kube, podgroups_path, pods_path, queues_path
from kai_ray.k8s.podgrouping.operator import PodgrouperOperator
from kai_ray.k8s.scheduling.operator import SchedulerOperator
from tests.k8s.helpers import bound, condition, events, kuberay_pods, make_gang, pod_body, podgroup_body, wait_until
from tests.k8s.podgrouping.test_podgrouper_operator import _cluster_spec, _create_ray, _kuberay_pods, _pg_for, _worker

QUEUE = c.QUEUE_LABEL
HUGE = 1_000_000_000
BYO = {"kai.scheduler/skip-podgrouper": "true"}  # bring-your-own PodGroups, as KAI requires


def _scheduled_condition(kube: Kube, ns: str, owner: str, status: str) -> dict[str, Any] | None:
    pg = _pg_for(kube, ns, owner)
    cond = condition(pg, "Scheduled") if pg else None
    return cond if cond and cond["status"] == status else None


def test_a_billion_replicas_leave_every_other_job_scheduling(
    kube: Kube,
    namespace: str,
    queues: Any,
    node_pool: Any,
    run_scheduler: Any,
    run_podgrouper: Any,
    priority_classes: Any,
) -> None:
    _, selector = node_pool(2, gpus=8)
    queues("dept")
    team = queues("team", parent="dept")
    sched: SchedulerOperator = run_scheduler(node_selector=selector, headroom_interval=0.2)
    run_podgrouper()
    labels = {QUEUE: team}

    huge = _create_ray(
        kube, namespace, "RayCluster", "huge", _cluster_spec(_worker("gpu", HUGE, 0, HUGE)), labels=labels
    )
    huge_pods = kuberay_pods(kube, namespace, huge, first_of_each_group=True)
    elastic_spec = {**_cluster_spec(_worker("gpu", 1, 1, HUGE)), "enableInTreeAutoscaling": True}
    elastic = _create_ray(kube, namespace, "RayCluster", "elastic", elastic_spec, labels=labels)
    elastic_pods = _kuberay_pods(kube, namespace, elastic)
    good = make_gang(kube, namespace, "good", pods=2, gpus=4, queue=team, labels=BYO)

    wait_until("the good gang to be bound", lambda: len(bound(kube, namespace, good)) == 2, 60)
    wait_until("the elastic cluster to be bound", lambda: len(bound(kube, namespace, elastic_pods)) == 2, 60)
    cond = wait_until(
        "the huge cluster's Scheduled=False condition",
        lambda: _scheduled_condition(kube, namespace, "huge", "False"),
        60,
    )
    assert "spec.workerGroupSpecs[0].replicas: 1000000000" in cond["message"], cond
    assert "at most 10000 pods per gang" in cond["message"], cond
    assert bound(kube, namespace, huge_pods) == {}
    ev = wait_until("a Warning Event on the RayCluster", lambda: events(kube, namespace, "huge", "PodGroupError"))
    assert ev[0]["type"] == "Warning" and "spec.workerGroupSpecs[0].replicas" in ev[0]["message"]
    pg_name = _pg_for(kube, namespace, "huge")["metadata"]["name"]  # type: ignore[index]
    wait_until("a Warning Event on the PodGroup", lambda: events(kube, namespace, pg_name, "Unschedulable"))

    # The elastic cluster with maxReplicas 10^9 gets a bounded headroom: the probe is one pod per group.
    def headroom() -> dict[str, Any] | None:
        pg = _pg_for(kube, namespace, "elastic") or {}
        text = (pg.get("metadata", {}).get("annotations") or {}).get(HEADROOM_ANNOTATION)
        return json.loads(text) if text else None

    published = wait_until("the elastic cluster's headroom", headroom, 60)
    assert 0 <= published["subgroups"]["gpu"]["headroom"] <= 32, published
    max_member = _pg_for(kube, namespace, "elastic")["metadata"]["annotations"][c.MAX_MEMBER]  # type: ignore[index]
    assert max_member == "10000"

    sched.health()  # raises when the loop is stuck
    more = make_gang(kube, namespace, "later", pods=1, gpus=4, queue=team, labels=BYO)
    wait_until("a gang created later to be bound", lambda: len(bound(kube, namespace, more)) == 1, 60)


def _pg_condition(kube: Kube, ns: str, name: str, reason: str | None = None) -> dict[str, Any] | None:
    try:
        pg = kube.get(podgroups_path(ns, name))
    except ApiError:
        return None
    cond = condition(pg, "Scheduled")
    if cond is None or cond["status"] != "False" or (reason is not None and cond["reason"] != reason):
        return None
    return cond


def _queue_invalid(kube: Kube, name: str) -> dict[str, Any] | None:
    cond = condition(kube.get(queues_path(name)), "Valid")
    return cond if cond and cond["status"] == "False" else None


def _event(kube: Kube, ns: str, name: str, reason: str) -> dict[str, Any]:
    evs: list[dict[str, Any]] = wait_until(f"a {reason} Event on {name}", lambda: events(kube, ns, name, reason), 60)
    assert evs[0]["type"] == "Warning", evs[0]
    return evs[0]


def test_every_class_of_accepted_bad_object_is_explained_and_the_rest_schedules(
    kube: Kube,
    namespace: str,
    queues: Any,
    node_pool: Any,
    run_scheduler: Any,
    run_podgrouper: Any,
    priority_classes: Any,
) -> None:
    """Objects the API server accepts but that cannot be scheduled as written: each gets a Warning Event and a
    PodGroup or Queue condition naming the field, while a good gang is scheduled meanwhile."""
    ns = namespace
    _, selector = node_pool(1, gpus=8)
    queues("dept")
    team = queues("team", parent="dept")
    loop_a = queues("loop-a", parent="loop-b")  # a parent cycle
    queues("loop-b", parent="loop-a")
    orphan = queues("orphan", parent="nowhere")  # an unknown parent
    negative = queues("negative", gpu_quota=-5, parent="dept")  # a negative quota (only -1 means unlimited)
    run_scheduler(node_selector=selector)
    grouper: PodgrouperOperator = run_podgrouper()
    grouper.parts.orphans.owner_grace = 1.0
    labels = {QUEUE: team}

    # Ray objects the podgrouper cannot group as written: a placeholder PodGroup carries the reason.
    _create_ray(kube, ns, "RayCluster", "neg", _cluster_spec(_worker("gpu", -1, 0)), labels=labels)
    _create_ray(kube, ns, "RayCluster", "inverted", _cluster_spec(_worker("gpu", 1, 5, 2)), labels=labels)
    # Pods: an absurd GPU request, an out-of-range gpu-fraction, a dangling owner reference.
    make_gang(kube, ns, "absurd", pods=1, gpus=100000, queue=team, labels=BYO)
    kube.create(podgroups_path(ns), podgroup_body("frac", 1, team))
    kube.create(pods_path(ns), pod_body("frac-0", 0, group="frac", labels=BYO, annotations={c.GPU_FRACTION: "1.5"}))
    ghost = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "ghost", "uid": str(uuid.uuid4())}
    lost = kube.create(pods_path(ns), pod_body("lost", 1, labels=labels, owner={**ghost, "controller": True}))
    ghost_job = {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "ghost-job", "uid": str(uuid.uuid4())}
    _create_ray(
        kube,
        ns,
        "RayCluster",
        "adrift",
        _cluster_spec(_worker("gpu", 1, 1)),
        labels=labels,
        ownerReferences=[{**ghost_job, "controller": True}],
    )
    # Jobs in the bad queues.
    in_loop = make_gang(kube, ns, "in-loop", pods=1, gpus=1, queue=loop_a, labels=BYO)
    in_orphan = make_gang(kube, ns, "in-orphan", pods=1, gpus=1, queue=orphan, labels=BYO)
    # A RayJob that cannot be suspended: admitted as non-preemptible, with a Warning saying why.
    job_spec = {
        "entrypoint": "python train.py",
        "shutdownAfterJobFinishes": False,
        "deletionStrategy": {"deletionRules": [{"policy": "DeleteCluster", "condition": {"jobStatus": "SUCCEEDED"}}]},
        "rayClusterSpec": _cluster_spec(_worker("gpu", 1, 1)),
    }
    _create_ray(kube, ns, "RayJob", "keep", job_spec, labels=labels)
    good = make_gang(kube, ns, "good", pods=2, gpus=2, queue=team, labels=BYO)

    wait_until("the good gang to be bound", lambda: len(bound(kube, ns, good)) == 2, 60)

    for owner, field in (
        ("neg", "workerGroupSpecs[0].replicas"),
        ("inverted", "workerGroupSpecs[0].minReplicas: 5 is greater than maxReplicas 2"),
    ):
        cond = wait_until(
            f"the {owner} PodGroup's condition", lambda o=owner: _scheduled_condition(kube, ns, o, "False"), 60
        )
        assert cond["reason"] == "InvalidPodGroup" and field in cond["message"], cond
        assert field in _event(kube, ns, owner, "PodGroupError")["message"]

    cond = wait_until("the absurd gang's condition", lambda: _pg_condition(kube, ns, "absurd"), 60)
    assert cond["reason"] == "NeverFits" and "nvidia.com/gpu" in cond["message"], cond
    assert "nvidia.com/gpu" in _event(kube, ns, "absurd", "Unschedulable")["message"]

    cond = wait_until("the gpu-fraction gang's condition", lambda: _pg_condition(kube, ns, "frac", "InvalidPodGroup"))
    assert "annotations[gpu-fraction]: '1.5' is not in (0, 1]" in cond["message"], cond
    assert "gpu-fraction" in _event(kube, ns, "frac", "Unschedulable")["message"]

    stand_in = f"pg-lost-{lost['metadata']['uid']}"
    cond = wait_until("the orphaned pod's condition", lambda: _pg_condition(kube, ns, stand_in, "InvalidPodGroup"), 60)
    assert "metadata.ownerReferences" in cond["message"] and "ghost" in cond["message"], cond
    assert "ghost" in _event(kube, ns, "lost", "OwnerNotFound")["message"]

    cond = wait_until(
        "the adrift RayCluster's condition", lambda: _scheduled_condition(kube, ns, "adrift", "False"), 60
    )
    assert "metadata.ownerReferences" in cond["message"] and "ghost-job" in cond["message"], cond
    assert "ghost-job" in _event(kube, ns, "adrift", "PodGroupError")["message"]

    for queue, field, job in (
        (loop_a, "spec.parentQueue: cycle", "in-loop"),
        (orphan, "spec.parentQueue: parent queue", "in-orphan"),
    ):
        qcond = wait_until(f"queue {queue}'s Valid=False condition", lambda q=queue: _queue_invalid(kube, q), 60)
        assert field in qcond["message"], qcond
        assert field in _event(kube, "default", queue, "InvalidQueue")["message"]
        jcond = wait_until(f"{job}'s condition", lambda j=job: _pg_condition(kube, ns, j, "QueueInvalid"), 60)
        assert queue in jcond["message"], jcond
    qcond = wait_until("the negative quota's Valid=False condition", lambda: _queue_invalid(kube, negative), 60)
    assert "spec.resources.gpu.quota" in qcond["message"], qcond
    _event(kube, "default", negative, "InvalidQueue")

    warned = _event(kube, ns, "keep", "NotPreemptible")
    assert "spec.deletionStrategy" in warned["message"], warned
    pg = wait_until("the RayJob's PodGroup", lambda: _pg_for(kube, ns, "keep"))
    assert pg["spec"]["preemptibility"] == "non-preemptible"

    assert bound(kube, ns, ["absurd-0", "frac-0", "lost", *in_loop, *in_orphan]) == {}
    assert len(bound(kube, ns, good)) == 2

    # Fixed objects are scheduled: the dangling owner appears, the fraction is corrected.
    kube.merge_patch(pods_path(ns, "frac-0"), {"metadata": {"annotations": {c.GPU_FRACTION: "0.5"}}})
    wait_until("the fixed gpu-fraction pod to be bound", lambda: bound(kube, ns, ["frac-0"]), 60)


def _resources_worker(resources: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    worker = _worker("gpu", 1, 1)
    template = worker["template"]
    template["spec"]["containers"][0]["resources"] = resources
    if annotations:
        template["metadata"] = {"annotations": annotations}
    return worker


def test_resources_kubernetes_would_refuse_are_explained_on_the_ray_cr(
    kube: Kube,
    namespace: str,
    queues: Any,
    node_pool: Any,
    run_scheduler: Any,
    run_podgrouper: Any,
    priority_classes: Any,
) -> None:
    """A negative or fractional whole-GPU count, a negative CPU request, a limit below its request and a
    gpu-fraction above 1 pass KubeRay's CRD schema (quantities as strings) but every pod KubeRay makes from such a
    template would be refused: the Ray CR gets a Warning Event and its PodGroup a condition naming the field, and
    the rest of the cluster schedules."""
    ns = namespace
    _, selector = node_pool(1, gpus=8)
    queues("dept")
    team = queues("team", parent="dept")
    run_scheduler(node_selector=selector)
    run_podgrouper()
    gpu = "nvidia.com/gpu"
    resources = "spec.workerGroupSpecs[0].template.spec.containers[0].resources"
    cases = {
        "neg-gpu": (_resources_worker({"limits": {gpu: "-8"}}), f"{resources}.limits[{gpu}]: '-8' is negative"),
        "half-gpus": (
            _resources_worker({"limits": {gpu: "2.5"}}),
            f"{resources}.limits[{gpu}]: '2.5' is not a whole number",
        ),
        "neg-cpu": (_resources_worker({"requests": {"cpu": "-1"}}), f"{resources}.requests[cpu]: '-1' is negative"),
        "low-limit": (
            _resources_worker({"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}),
            f"{resources}.requests[memory]: '2Gi' is above the limit '1Gi'",
        ),
        "big-fraction": (
            _resources_worker({}, {c.GPU_FRACTION: "1.5"}),
            "spec.workerGroupSpecs[0].template.metadata.annotations[gpu-fraction]: '1.5' is not in (0, 1]",
        ),
    }
    for name, (worker, _) in cases.items():
        _create_ray(kube, ns, "RayCluster", name, _cluster_spec(worker), labels={QUEUE: team})
    good = make_gang(kube, ns, "good", pods=2, gpus=2, queue=team, labels=BYO)
    wait_until("the good gang to be bound", lambda: len(bound(kube, ns, good)) == 2, 60)

    for name, (_, field) in cases.items():
        cond = wait_until(
            f"the {name} PodGroup's condition", lambda n=name: _scheduled_condition(kube, ns, n, "False"), 60
        )
        assert cond["reason"] == "InvalidPodGroup" and field in cond["message"], cond
        assert field in _event(kube, ns, name, "PodGroupError")["message"]

"""Bad input on the real API server (issue 12): one object the API accepts but that cannot be scheduled is explained
(a Warning Event and a condition naming the field) and never stops the scheduling of the others.

Both operators run in-process against the real kube-apiserver + etcd with KubeRay's real CRDs and KWOK nodes; the
KubeRay operator does not run, so the test creates the pods KubeRay would create.
"""

from __future__ import annotations

import json
from typing import Any

from kai_ray import constants as c
from kai_ray.api.loader import parse_object
from kai_ray.api.ray import RayCluster
from kai_ray.autoscaler.headroom import HEADROOM_ANNOTATION
from kai_ray.k8s.rest import Kube, pods_path
from kai_ray.k8s.scheduler import SchedulerOperator
from kai_ray.podgrouper import pod_templates
from tests.k8s.helpers import bound, condition, events, make_gang, wait_until
from tests.k8s.test_podgrouper_operator import _cluster_spec, _create_ray, _kuberay_pods, _pg_for, _worker

QUEUE = c.QUEUE_LABEL
HUGE = 1_000_000_000


def _first_pods(kube: Kube, ns: str, cluster: dict[str, Any]) -> list[str]:
    """The first pod of each group, as KubeRay would start creating them (one per group: the rest never exists
    here, as it would not for long in a real cluster asked for 10^9 replicas)."""
    model = parse_object({**cluster, "kind": "RayCluster"})
    assert isinstance(model, RayCluster)
    owner = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "name": cluster["metadata"]["name"],
        "uid": cluster["metadata"]["uid"],
        "controller": True,
    }
    names = []
    for t in pod_templates(model):
        body = t.pod.to_dict()
        body["metadata"]["ownerReferences"] = [owner]
        body["metadata"].pop("namespace", None)
        for ctr in body["spec"]["containers"]:
            ctr.setdefault("image", "rayproject/ray:2.49.0")
        kube.create(pods_path(ns), body)
        names.append(body["metadata"]["name"])
    return names


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
    huge_pods = _first_pods(kube, namespace, huge)
    elastic_spec = {**_cluster_spec(_worker("gpu", 1, 1, HUGE)), "enableInTreeAutoscaling": True}
    elastic = _create_ray(kube, namespace, "RayCluster", "elastic", elastic_spec, labels=labels)
    elastic_pods = _kuberay_pods(kube, namespace, elastic)
    good = make_gang(kube, namespace, "good", pods=2, gpus=4, queue=team)

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

    cycles = sched.cycles
    wait_until("the scheduler to keep cycling", lambda: sched.cycles >= cycles + 3, 30)
    more = make_gang(kube, namespace, "later", pods=1, gpus=4, queue=team)
    wait_until("a gang created later to be bound", lambda: len(bound(kube, namespace, more)) == 1, 60)

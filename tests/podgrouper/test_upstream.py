"""The podgrouper's gang in Kubernetes' workload API, and the admission answer that names it in a pod (pure)."""

from __future__ import annotations

import base64
import json

from kai_ray.api.podgroup import PodGroup
from kai_ray.k8s.podgrouping.admission import review_response
from kai_ray.podgrouper.workload_api import min_count, scheduling_group_patch, upstream_gang


def _pg() -> PodGroup:
    return PodGroup.model_validate(
        {
            "metadata": {
                "name": "pg-rc-1",
                "namespace": "team",
                "labels": {"team": "a"},
                "annotations": {"kai-ray.io/max-member": "5", "other": "x"},
                "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "rc", "uid": "u1"}],
            },
            "spec": {"minMember": 3, "queue": "q-a", "priorityClassName": "train"},
        }
    )


def test_the_gang_is_one_workload_template_and_one_podgroup_with_its_minimum_class_queue_and_ceiling() -> None:
    workload, pg = upstream_gang(_pg())
    assert min_count(workload) == min_count(pg) == 3
    assert workload["spec"]["controllerRef"] == {"apiGroup": "ray.io", "kind": "RayCluster", "name": "rc"}
    assert workload["spec"]["podGroupTemplates"][0]["priorityClassName"] == "train"
    assert pg["spec"]["workloadRef"] == {"workloadName": "pg-rc-1", "templateName": "ray"}
    assert pg["spec"]["disruptionMode"] == {"all": {}}
    assert pg["metadata"]["labels"] == {"team": "a", "kai.scheduler/queue": "q-a"}
    assert pg["metadata"]["annotations"] == {"kai-ray.io/max-member": "5"}
    assert pg["metadata"]["ownerReferences"][0]["uid"] == "u1"


def test_a_pod_is_named_into_the_gang_with_its_class_unless_it_names_a_group_already() -> None:
    pod = {"spec": {"containers": [], "priority": 0}}
    ops = scheduling_group_patch(pod, "pg-rc-1", "train", 50)
    assert {"op": "add", "path": "/spec/schedulingGroup", "value": {"podGroupName": "pg-rc-1"}} in ops
    assert {"op": "add", "path": "/spec/priority", "value": 50} in ops
    assert scheduling_group_patch({"spec": {"schedulingGroup": {"podGroupName": "mine"}}}, "pg-rc-1") == []
    same_class = {"spec": {"priorityClassName": "train", "priority": 50}}
    assert [o["path"] for o in scheduling_group_patch(same_class, "pg", "train", 50)] == ["/spec/schedulingGroup"]


def test_the_admission_answer_always_allows_and_carries_the_patch_or_nothing() -> None:
    review = {"request": {"uid": "r1", "operation": "CREATE", "namespace": "team", "object": {"spec": {}}}}
    out = review_response(review, lambda pod, ns: scheduling_group_patch(pod, f"{ns}-gang"))
    assert out["response"]["allowed"] and out["response"]["uid"] == "r1"
    assert json.loads(base64.b64decode(out["response"]["patch"]))[0]["value"] == {"podGroupName": "team-gang"}

    def broken(pod: object, ns: str) -> list[dict[str, object]]:
        raise RuntimeError("cache not synced")

    failed = review_response(review, broken)["response"]
    assert failed == {"uid": "r1", "allowed": True}, "an error admits the pod unchanged"

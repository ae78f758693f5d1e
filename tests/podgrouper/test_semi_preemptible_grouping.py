"""The semi-preemptible setting on the wire: KAI's label value on the Ray object, the podgrouper's core marks, the
queue's default, and what the scheduler's Job reads of them."""

from __future__ import annotations

import json

import pytest

from kai_ray import constants as c
from kai_ray.api import parse_object
from kai_ray.api.queue import Queue
from kai_ray.bridge import job_from_podgroup, queue_from_api
from kai_ray.podgrouper import GroupingError, group
from kai_ray.scheduler.snapshot import Preemptibility
from tests.podgrouper.raydocs import cluster_spec, ray_doc, worker

SEMI = {c.PREEMPTIBILITY_LABEL: "semi-preemptible"}


def test_the_label_value_semi_preemptible_reaches_the_podgroup_and_the_job() -> None:
    pg = group(
        parse_object(ray_doc("RayCluster", cluster_spec(worker("w", 4, minReplicas=2, maxReplicas=8)), labels=SEMI))
    )
    assert pg.spec.preemptibility == "semi-preemptible"
    job = job_from_podgroup(pg, [])
    assert job.preemptibility is Preemptibility.SEMI_PREEMPTIBLE and not job.preemptibility_derived
    assert {sg.name: sg.min_member for sg in job.subgroups} == {"headgroup": 1, "w": 2}  # the core: minReplicas


def test_a_rayjob_marks_its_submitter_as_core() -> None:
    pg = group(parse_object(ray_doc("RayJob", cluster_spec(worker("w", 2)), labels=SEMI)))
    assert json.loads(pg.metadata.annotations[c.SUBGROUP_CORE]) == {"submitter": 1}
    job = job_from_podgroup(pg, [])
    assert {sg.name: sg.core for sg in job.subgroups} == {"headgroup": None, "w": None, "submitter": 1}


def test_without_the_label_the_preemptibility_is_derived_and_a_queue_default_may_replace_it() -> None:
    pg = group(parse_object(ray_doc("RayCluster", cluster_spec(worker("w")))))
    job = job_from_podgroup(pg, [])
    assert job.preemptibility is Preemptibility.PREEMPTIBLE and job.preemptibility_derived
    explicit = group(
        parse_object(ray_doc("RayCluster", cluster_spec(worker("w")), labels={c.PREEMPTIBILITY_LABEL: "preemptible"}))
    )
    assert not job_from_podgroup(explicit, []).preemptibility_derived


def test_an_unknown_label_value_names_the_field_and_the_values() -> None:
    doc = ray_doc("RayCluster", cluster_spec(worker("w")), labels={c.PREEMPTIBILITY_LABEL: "semi"})
    with pytest.raises(GroupingError) as err:
        group(parse_object(doc))
    assert str(err.value) == (
        "RayCluster demo: metadata.labels[kai.scheduler/preemptibility]: 'semi' is not one of 'preemptible', "
        "'non-preemptible', 'semi-preemptible'"
    )


def _queue(default: str | None) -> Queue:
    ann = {c.DEFAULT_PREEMPTIBILITY: default} if default is not None else {}
    return Queue.model_validate({"metadata": {"name": "team", "annotations": ann}, "spec": {"resources": {}}})


def test_queue_default_preemptibility() -> None:
    assert queue_from_api(_queue("semi-preemptible")).default_preemptibility is Preemptibility.SEMI_PREEMPTIBLE
    assert queue_from_api(_queue(None)).default_preemptibility is None
    assert _queue("semi-preemptible").validate_spec() == []
    (err,) = _queue("sometimes").validate_spec()
    assert str(err) == (
        "metadata.annotations[kai-ray.io/default-preemptibility]: 'sometimes' is not one of 'preemptible', "
        "'non-preemptible', 'semi-preemptible'"
    )


def test_a_bound_pod_carries_its_bind_time() -> None:
    from kai_ray.api.meta import Pod as ApiPod
    from kai_ray.bridge import pod_from_api

    pod = ApiPod.model_validate(
        {
            "metadata": {"name": "w", "namespace": "ns", "uid": "u"},
            "spec": {"nodeName": "n0", "containers": [{"name": "c"}]},
            "status": {
                "phase": "Running",
                "startTime": "2026-01-01T00:00:09Z",
                "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:10Z"},
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:02Z"},
                ],
            },
        }
    )
    got = pod_from_api(pod, "ns/pg")
    assert got.bound_at is not None and got.start_time is not None and got.start_time - got.bound_at == 7


def test_an_explicit_or_forced_preemptibility_is_marked_on_the_podgroup() -> None:
    from kai_ray.api.meta import Pod as ApiPod

    pod = ApiPod.model_validate({"metadata": {"name": "h", "labels": {c.PREEMPTIBILITY_LABEL: "semi-preemptible"}}})
    from_pod = group(parse_object(ray_doc("RayCluster", cluster_spec(worker("w")))), pod=pod)
    assert from_pod.metadata.labels[c.PREEMPTIBILITY_LABEL] == "semi-preemptible"
    assert not job_from_podgroup(from_pod, []).preemptibility_derived
    # a RayJob kai-ray cannot suspend is non-preemptible, label or queue default notwithstanding
    spec = {
        "entrypoint": "x",
        "rayClusterSpec": cluster_spec(worker("w")),
        "deletionStrategy": {"deletionRules": [{"policy": "DeleteCluster"}]},
    }
    doc = ray_doc("RayJob", cluster_spec(worker("w")), labels=SEMI)
    doc["spec"] = spec
    forced = group(parse_object(doc))
    assert forced.spec.preemptibility == "non-preemptible"
    assert forced.metadata.labels[c.PREEMPTIBILITY_LABEL] == "non-preemptible"
    assert not job_from_podgroup(forced, []).preemptibility_derived

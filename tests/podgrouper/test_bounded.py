"""Work per Ray object is bounded: a RayCluster asking for 10^9 replicas is grouped in the time and memory
of one asking for one, refused with a reason naming the field, and never expanded pod by pod."""

from __future__ import annotations

import time
import tracemalloc
from typing import Any

import pytest

from kai_ray import constants as c
from kai_ray.api.loader import parse_object
from kai_ray.api.meta import ObjectMeta
from kai_ray.api.ray import RayCluster, RayJob
from kai_ray.podgrouper import (
    GroupingError,
    PodgrouperConfig,
    expand_pods,
    group,
    placeholder_group,
    pod_templates,
    stamp,
)

HUGE = 1_000_000_000


def _cluster(kind: str = "RayCluster", **worker: Any) -> RayCluster | RayJob:
    wg = {
        "groupName": "gpu",
        "template": {"spec": {"containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}},
        **worker,
    }
    spec = {"headGroupSpec": {"template": {"spec": {"containers": [{"name": "h"}]}}}, "workerGroupSpecs": [wg]}
    body: dict[str, Any] = {"apiVersion": "ray.io/v1", "kind": kind, "metadata": {"name": "big", "uid": "u1"}}
    body["spec"] = spec if kind == "RayCluster" else {"entrypoint": "x", "rayClusterSpec": spec}
    obj = parse_object(body)
    assert isinstance(obj, RayCluster | RayJob)
    return obj


@pytest.mark.parametrize(
    ("worker", "field"),
    [
        ({"replicas": HUGE}, "spec.workerGroupSpecs[0].replicas: 1000000000 = 1000000000 pods"),
        ({"replicas": HUGE, "minReplicas": 1, "maxReplicas": HUGE}, "spec.workerGroupSpecs[0].replicas"),
        ({"replicas": 1, "minReplicas": HUGE, "maxReplicas": 2**31 - 1}, "spec.workerGroupSpecs[0].minReplicas"),
        ({"replicas": 2**31 - 1, "numOfHosts": 2**31 - 1}, "x numOfHosts 2147483647"),
    ],
)
def test_a_gang_beyond_the_ceiling_is_refused_naming_the_field_at_once(worker: dict[str, Any], field: str) -> None:
    obj = _cluster(**worker)
    tracemalloc.start()
    t0 = time.perf_counter()
    pg = group(obj)
    templates = pod_templates(obj)
    took = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    problem = pg.metadata.annotations[c.INVALID]
    assert field in problem and "at most 10000 pods per gang" in problem, problem
    assert pg.spec.min_member is not None and pg.spec.min_member <= 2**31 - 1, "the API server's int32 limit"
    assert all((sg.min_member or 0) <= 2**31 - 1 for sg in pg.spec.sub_groups or [])
    assert int(pg.metadata.annotations[c.MAX_MEMBER]) <= c.DEFAULT_MAX_GANG_PODS
    assert len(templates) == 2 and templates[1].count > c.DEFAULT_MAX_GANG_PODS
    assert peak < 5 * 2**20, f"grouping allocated {peak} bytes"
    assert took < 5.0  # generous: it is milliseconds; 10^9 pods would take hours
    with pytest.raises(GroupingError, match="at most 10000 pods per gang"):
        expand_pods(obj)


def test_an_elastic_ceiling_beyond_the_limit_is_capped_not_refused() -> None:
    obj = _cluster(replicas=2, minReplicas=1, maxReplicas=HUGE)
    obj.spec.enable_in_tree_autoscaling = True  # type: ignore[union-attr]
    pg = group(obj)
    assert c.INVALID not in pg.metadata.annotations
    assert pg.spec.min_member == 2
    assert pg.metadata.annotations[c.MAX_MEMBER] == str(c.DEFAULT_MAX_GANG_PODS)
    assert '"gpu": 10000' in pg.metadata.annotations[c.SUBGROUP_MAX]


def test_the_ceiling_is_configurable_and_a_gang_at_it_is_fine() -> None:
    config = PodgrouperConfig(max_gang_pods=5)
    assert c.INVALID not in group(_cluster(replicas=4), config=config).metadata.annotations  # head + 4
    job = group(_cluster("RayJob", replicas=4), config=config)  # head + 4 + the submitter
    assert "make a gang of 6 pods; at most 5 pods per gang" in job.metadata.annotations[c.INVALID]
    assert len(expand_pods(_cluster(replicas=4), config=config)) == 5


def test_templates_give_the_same_pods_as_the_expansion() -> None:
    obj = _cluster(replicas=3, numOfHosts=2)
    pods = expand_pods(obj)
    names = [t.name(i) for t in pod_templates(obj) for i in range(t.count)]
    assert names == [p.metadata.name for p in pods]
    assert names[1:3] == ["big-gpu-worker-0-0", "big-gpu-worker-0-1"]


def test_annotations_the_podgrouper_owns_cannot_be_set_through_the_ray_object() -> None:
    obj = _cluster(replicas=1)
    obj.metadata.annotations = {c.INVALID: "mine", c.SUBGROUP_NAMES: "not json", c.MAX_MEMBER: "7"}
    pg = group(obj)
    assert c.INVALID not in pg.metadata.annotations
    assert c.SUBGROUP_NAMES not in pg.metadata.annotations
    assert pg.metadata.annotations[c.MAX_MEMBER] == "2"
    pod = expand_pods(obj)[1]
    pg.metadata.annotations[c.SUBGROUP_NAMES] = "{broken"  # e.g. written by hand on the PodGroup
    assert stamp(pod, pg).labels == {c.SUBGROUP_LABEL: "gpu"}


def test_a_placeholder_says_why_from_metadata_only() -> None:
    meta = ObjectMeta(name="bad", namespace="ns", uid="u9", labels={c.QUEUE_LABEL: "team", c.PRIORITY_LABEL: "build"})
    pg = placeholder_group(meta, "RayJob", "RayJob bad: spec.rayClusterSpec: missing")
    assert pg.metadata.name == "pg-bad-u9"
    assert pg.metadata.annotations[c.INVALID] == "RayJob bad: spec.rayClusterSpec: missing"
    assert pg.spec.queue == "team" and pg.spec.priority_class_name == "build"
    assert pg.metadata.owner_references and pg.metadata.owner_references[0].kind == "RayJob"
    assert pg.validate_spec() == []

"""The one queue rule (KAI's ``CalcPodGroupQueue``): owner's queue label, pod's, ``project`` (with the pod's pool),
then the default queue; a queue label that is there but empty wins, an empty ``project`` does not."""

from __future__ import annotations

import pytest

from kai_ray.api.meta import ObjectMeta, Pod
from kai_ray.api.ray import RayCluster
from kai_ray.podgrouper import group
from kai_ray.podgrouper.defaultgrouper import single_pod_group
from kai_ray.podgrouper.grouper_config import PodgrouperConfig
from kai_ray.podgrouper.queue_rule import resolve_queue

CONFIG = PodgrouperConfig()
Q = CONFIG.queue_label_key


def meta(**labels: str) -> ObjectMeta:
    return ObjectMeta(name="x", namespace="ns", labels=dict(labels))


def pod(**labels: str) -> Pod:
    return Pod(metadata=meta(**labels))


def q(**labels: str) -> dict[str, str]:
    return {Q: labels.pop("queue"), **labels} if "queue" in labels else labels


@pytest.mark.parametrize(
    ("owner", "pod_labels", "expected"),
    [
        ({"queue": "team-a"}, {"queue": "team-b"}, "team-a"),  # the owner's label first
        ({}, {"queue": "team-b"}, "team-b"),  # then the pod's
        ({"queue": ""}, {"queue": "team-b"}, ""),  # a label that is there wins, even empty
        ({}, {"queue": ""}, ""),
        ({"project": "p"}, {"queue": "team-b"}, "team-b"),  # any queue label before any project
        ({"project": "p"}, {"project": "other"}, "p"),  # the owner's project first
        ({}, {"project": "p"}, "p"),
        ({"project": "p"}, {"runai/node-pool": "gpu"}, "p-gpu"),  # the pod's pool splits a project
        ({"project": ""}, {"project": "p"}, CONFIG.default_queue),  # an empty project is none (KAI: found, empty)
        ({}, {"runai/node-pool": "gpu"}, CONFIG.default_queue),  # a pool alone says nothing
        ({}, {}, CONFIG.default_queue),
    ],
)
def test_precedence(owner: dict[str, str], pod_labels: dict[str, str], expected: str) -> None:
    assert resolve_queue(meta(**q(**owner)), pod(**q(**pod_labels)), CONFIG) == expected


def test_without_a_pod_only_the_owner_counts() -> None:
    assert resolve_queue(meta(**q(queue="team-a")), None, CONFIG) == "team-a"
    assert resolve_queue(meta(**q(queue="")), None, CONFIG) == ""
    assert resolve_queue(meta(project="p"), None, CONFIG) == "p"
    assert resolve_queue(meta(), None, CONFIG) == CONFIG.default_queue


def test_an_ownerless_pod_is_its_own_top_owner() -> None:
    p = pod(project="p", **{"runai/node-pool": "a100"})
    assert resolve_queue(p.metadata, p, CONFIG) == "p-a100"


def test_the_configured_label_key_is_the_queue_label() -> None:
    config = PodgrouperConfig(queue_label_key="example.com/queue", default_queue="fallback")
    assert resolve_queue(meta(**{"example.com/queue": "mine", Q: "theirs"}), None, config) == "mine"
    assert resolve_queue(meta(**{Q: "theirs"}), None, config) == "fallback"


def ray_cluster(**labels: str) -> RayCluster:
    return RayCluster.model_validate(
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": "rc", "namespace": "ns", "uid": "u1", "labels": labels},
            "spec": {
                "headGroupSpec": {"template": {"spec": {"containers": [{"name": "head", "image": "ray"}]}}},
                "workerGroupSpecs": [],
            },
        }
    )


def test_the_ray_grouper_and_the_ownerless_pod_rule_use_it() -> None:
    assert group(ray_cluster(project="vision"), config=CONFIG).spec.queue == "vision"
    assert group(ray_cluster(**{Q: ""}), config=CONFIG).spec.queue == ""
    lone = pod(project="vision", **{"runai/node-pool": "a100"})
    lone.metadata.uid = "u2"
    assert single_pod_group(lone, CONFIG).spec.queue == "vision-a100"

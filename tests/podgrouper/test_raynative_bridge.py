"""Ray-native scheduling: the Ray object's kai-ray.io annotations reach the core through the podgrouper and the bridge."""

from __future__ import annotations

import pytest

from kai_ray import constants as c
from kai_ray.api import Pod, parse_object
from kai_ray.bridge import job_from_podgroup, parse_time, pod_ready
from kai_ray.podgrouper import group
from kai_ray.podgrouper.grouper import GroupingError

pytestmark = pytest.mark.raynative


def _rayjob(annotations: dict[str, str]) -> dict[str, object]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {
            "name": "train",
            "namespace": "ml",
            "uid": "u1",
            "annotations": annotations,
            "labels": {"kai.scheduler/queue": "team"},
            "creationTimestamp": "2026-11-27T10:00:00Z",
        },
        "spec": {
            "entrypoint": "python train.py",
            "rayClusterSpec": {
                "headGroupSpec": {"template": {"spec": {"containers": [{"name": "head", "image": "ray"}]}}},
                "workerGroupSpecs": [
                    {
                        "groupName": "gpu",
                        "replicas": 2,
                        "minReplicas": 2,
                        "maxReplicas": 2,
                        "template": {"spec": {"containers": [{"name": "w", "image": "ray"}]}},
                    }
                ],
            },
        },
    }


def test_annotations_on_the_ray_object_become_the_jobs_ray_native_facts() -> None:
    obj = parse_object(
        _rayjob(
            {
                c.LAST_CHECKPOINT: "2026-11-27T10:30:00Z",
                c.READY_TIMEOUT: "5m",
                c.MAX_PENDING_TIME: "1h",
                c.MAX_RUNTIME: "2h30m",
            }
        ),
        "RayJob train",
    )
    pg = group(obj)  # type: ignore[arg-type]
    problems: list[str] = []
    job = job_from_podgroup(pg, [], problems=problems)
    assert problems == []
    facts = job.raynative
    assert facts is not None
    assert facts.last_checkpoint == parse_time("2026-11-27T10:30:00Z")
    assert (facts.ready_timeout, facts.max_pending_time, facts.max_runtime) == (300.0, 3600.0, 9000.0)
    assert facts.pending_since is None  # the core counts from the PodGroup's creation, or its last eviction
    pg.metadata.annotations[c.LAST_EVICTION] = "2026-11-27T10:40:00Z"
    facts = job_from_podgroup(pg, []).raynative
    assert facts is not None and facts.pending_since == parse_time("2026-11-27T10:40:00Z")


def test_no_annotations_no_facts_and_a_bad_one_is_named() -> None:
    pg = group(parse_object(_rayjob({}), "RayJob train"))  # type: ignore[arg-type]
    assert job_from_podgroup(pg, []).raynative is None
    pg = group(parse_object(_rayjob({c.READY_TIMEOUT: "soon", c.LAST_CHECKPOINT: "yesterday"}), "RayJob train"))  # type: ignore[arg-type]
    problems: list[str] = []
    assert job_from_podgroup(pg, [], problems=problems).raynative is None
    assert any("annotations[kai-ray.io/ready-timeout]: 'soon' is not a duration" in p for p in problems)
    assert any("annotations[kai-ray.io/last-checkpoint-time]: not an RFC 3339 time" in p for p in problems)


def test_the_scheduler_written_annotations_are_read_back() -> None:
    pg = group(parse_object(_rayjob({}), "RayJob train"))  # type: ignore[arg-type]
    pg.metadata.annotations.update(
        {c.ADMITTED_SECONDS: "1234.5", c.REQUEUE_AFTER: "2026-11-27T11:00:00Z", c.UPGRADE_SURGE_OF: "pg-svc-u0"}
    )
    facts = job_from_podgroup(pg, []).raynative
    assert facts is not None
    assert facts.admitted_seconds == 1234.5
    assert facts.backoff_until == parse_time("2026-11-27T11:00:00Z")
    assert facts.upgrade_of == "ml/pg-svc-u0"


def test_pod_readiness_comes_from_its_ready_condition() -> None:
    pod = Pod.model_validate({"metadata": {"name": "p"}, "spec": {"containers": []}})
    assert pod_ready(pod) is None
    pod = Pod.model_validate(
        {
            "metadata": {"name": "p"},
            "spec": {"containers": []},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]},
        }
    )
    assert pod_ready(pod) is False


def test_the_max_pending_action_and_its_record_are_read_back() -> None:
    pg = group(parse_object(_rayjob({c.MAX_PENDING_TIME: "10m", c.MAX_PENDING_ACTION: "fail"}), "RayJob train"))  # type: ignore[arg-type]
    facts = job_from_podgroup(pg, []).raynative
    assert facts is not None and facts.max_pending_action == "fail" and facts.max_pending_acted is None
    pg.metadata.annotations[c.MAX_PENDING_ACTED] = '{"action": "fail", "at": "2026-11-27T11:00:00Z", "waited": "10m2s"}'
    facts = job_from_podgroup(pg, []).raynative
    assert facts is not None and facts.max_pending_failed
    assert facts.max_pending_acted == parse_time("2026-11-27T11:00:00Z")
    pg = group(parse_object(_rayjob({c.MAX_PENDING_TIME: "10m", c.MAX_PENDING_ACTION: ""}), "RayJob train"))  # type: ignore[arg-type]
    facts = job_from_podgroup(pg, []).raynative
    assert facts is not None and facts.max_pending_action is None  # "": report only


def test_a_bad_max_pending_action_is_refused_at_the_podgrouper_naming_the_field() -> None:
    with pytest.raises(GroupingError) as err:
        group(parse_object(_rayjob({c.MAX_PENDING_ACTION: "kill"}), "RayJob train"))  # type: ignore[arg-type]
    assert str(err.value) == (
        "RayJob train: metadata.annotations[kai-ray.io/max-pending-action]: 'kill' is not one of '', 'suspend', 'fail'"
    )
    # a PodGroup written by hand (or an older podgrouper) is refused by the scheduler, naming it too
    pg = group(parse_object(_rayjob({}), "RayJob train"))  # type: ignore[arg-type]
    pg.metadata.annotations.update({c.MAX_PENDING_ACTION: "Suspend", c.MAX_PENDING_ACTED: "yes"})
    problems: list[str] = []
    job_from_podgroup(pg, [], problems=problems)
    assert any("annotations[kai-ray.io/max-pending-action]: 'Suspend' is not one of" in p for p in problems)
    assert any("annotations[kai-ray.io/max-pending-acted]: not JSON with an 'at'" in p for p in problems)


def test_the_ray_object_cannot_forge_the_acted_record() -> None:
    pg = group(
        parse_object(_rayjob({c.MAX_PENDING_ACTED: '{"action": "fail", "at": "2026-11-27T11:00:00Z"}'}), "RayJob train")
    )  # type: ignore[arg-type]
    assert c.MAX_PENDING_ACTED not in pg.metadata.annotations

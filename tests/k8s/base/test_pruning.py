"""What the installed CRD prunes is found from a write's answer, and stripped from every later write (pure)."""

from __future__ import annotations

import logging

import pytest

from kai_ray.api.podgroup import PodGroup, SubGroup, leaf_min_member
from kai_ray.k8s.base.pruning import PruneGuard, pruned_paths, strip
from kai_ray.k8s.base.rest import ApiError
from kai_ray.podgrouper.defaultgrouper import refuses_zero_min_member, without_zero_min_member

SENT = {
    "status": {
        "allocated": {"nvidia.com/gpu": "2"},
        "fairShare": {"nvidia.com/gpu": "4"},
        "conditions": [{"type": "Valid", "status": "True", "transitionID": "ab12"}],
        "gone": None,
    }
}
STORED = {
    "metadata": {"name": "team", "resourceVersion": "7"},
    "status": {"allocated": {"nvidia.com/gpu": "2"}, "conditions": [{"type": "Valid", "status": "True"}]},
}


def test_paths_sent_and_not_stored_are_pruned() -> None:
    assert pruned_paths(SENT, STORED) == {"status.fairShare", "status.conditions[].transitionID"}
    assert pruned_paths(STORED, STORED) == set()


def test_strip_removes_exactly_those_paths_and_leaves_the_input_alone() -> None:
    out = strip(SENT, {"status.fairShare", "status.conditions[].transitionID"})
    assert out["status"] == {
        "allocated": {"nvidia.com/gpu": "2"},
        "conditions": [{"type": "Valid", "status": "True"}],
        "gone": None,
    }
    assert "fairShare" in SENT["status"] and "transitionID" in SENT["status"]["conditions"][0]


def test_guard_reports_each_path_once(caplog: pytest.LogCaptureFixture) -> None:
    guard = PruneGuard()
    with caplog.at_level(logging.WARNING, logger="kai_ray.k8s.base.pruning"):
        assert guard.check("Queue", SENT, STORED, "Queue team") == {
            "status.fairShare",
            "status.conditions[].transitionID",
        }
        assert guard.check("Queue", SENT, STORED, "Queue other") == set()
    assert len(caplog.records) == 1 and "status.fairShare" in caplog.text
    assert "fairShare" not in guard.strip("Queue", SENT)["status"]
    assert guard.strip("PodGroup", SENT) is SENT


def test_zero_min_member_is_left_out_and_read_back_as_zero() -> None:
    pg = PodGroup.model_validate(
        {
            "spec": {
                "minMember": 2,
                "subGroups": [{"name": "headgroup", "minMember": 1}, {"name": "elastic", "minMember": 0}],
            }
        }
    )
    lean = without_zero_min_member(pg)
    assert lean.to_dict()["spec"]["subGroups"] == [{"name": "headgroup", "minMember": 1}, {"name": "elastic"}]
    assert pg.spec.sub_groups is not None and pg.spec.sub_groups[1].min_member == 0, "input unchanged"
    assert without_zero_min_member(lean) is lean
    assert lean.validate_spec() == []
    assert leaf_min_member(SubGroup(name="elastic"), has_children=False) == 0
    assert leaf_min_member(SubGroup(name="parent"), has_children=True) is None


def test_the_schema_refusal_is_recognised() -> None:
    kai = ApiError(
        422,
        "Invalid",
        'PodGroup.scheduling.run.ai "pg-x" is invalid: spec.subGroups[1].minMember: Invalid value: 0: '
        "spec.subGroups[1].minMember in body should be greater than or equal to 1",
    )
    assert refuses_zero_min_member(kai)
    assert not refuses_zero_min_member(ApiError(422, "Invalid", "spec.queue: Required value"))
    assert not refuses_zero_min_member(ApiError(409, "AlreadyExists", "minMember greater than or equal to 1"))

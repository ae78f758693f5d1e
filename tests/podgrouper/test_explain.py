"""Every accepted Ray object explained: legal objects whose gang is likely not what their author expects each get
their own finding (an Event reason on the object), never only the generic "not ready for scheduling"."""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray.api.loader import parse_object
from kai_ray.api.ray import RayCluster, RayJob
from kai_ray.podgrouper import group
from kai_ray.podgrouper.gang_findings import MANY_GROUPS, explain


def _worker(name: str, replicas: int = 1, **meta: Any) -> dict[str, Any]:
    return {
        "groupName": name,
        "replicas": replicas,
        "template": {"metadata": meta, "spec": {"containers": [{"name": "w"}]}},
    }


def _obj(*workers: dict[str, Any], kind: str = "RayCluster", **top: Any) -> RayCluster | RayJob:
    spec: dict[str, Any] = {
        "headGroupSpec": {"template": {"spec": {"containers": [{"name": "h"}]}}},
        "workerGroupSpecs": list(workers),
    }
    body: dict[str, Any] = {
        "apiVersion": "ray.io/v1",
        "kind": kind,
        "metadata": {"name": "rc", **top.pop("metadata", {})},
        "spec": spec if kind == "RayCluster" else {"entrypoint": "x", "rayClusterSpec": spec, **top},
    }
    obj = parse_object(body)
    assert isinstance(obj, RayCluster | RayJob)
    return obj


def _reasons(obj: RayCluster | RayJob, **kw: Any) -> dict[str, str]:
    return {f.reason: f"{f.type}: {f.message}" for f in explain(obj, group(obj), **kw)}


def test_an_ordinary_cluster_needs_no_explaining() -> None:
    assert _reasons(_obj(_worker("gpu", 2))) == {}


@pytest.mark.parametrize(
    ("obj", "reason", "message"),
    [
        (_obj(), "HeadOnlyGang", "Normal: spec.workerGroupSpecs: none; the gang is the head pod alone"),
        (
            _obj(_worker("a", 0), _worker("b", 0)),
            "HeadOnlyGang",
            "Normal: spec.workerGroupSpecs: no group has replicas (a, b); the gang is the head pod alone",
        ),
        (
            _obj(*(_worker(f"g{i}") for i in range(MANY_GROUPS + 4))),
            "GangShape",
            f"Normal: spec.workerGroupSpecs: {MANY_GROUPS + 4} worker groups; the gang is {MANY_GROUPS + 5} subgroups "
            f"with {MANY_GROUPS + 5} pods at least",
        ),
        (
            _obj(_worker("GPU_Workers")),
            "SubGroupRenamed",
            "groupName: 'GPU_Workers' is not a DNS label; its subgroup is",
        ),
        (_obj(_worker("a b")), "SubGroupRenamed", "spec.workerGroupSpecs[0].groupName: 'a b' is not a DNS label"),
        (
            _obj(_worker("gpu"), metadata={"annotations": {"kai.scheduler/staleness-grace-period": ""}}),
            "BadAnnotation",
            "Warning: metadata.annotations[kai.scheduler/staleness-grace-period]: is empty; the scheduler's default "
            "grace period applies",
        ),
        (
            _obj(_worker("gpu", annotations={"gpu-fraction": "1e-9"})),
            "GPUFractionTooSmall",
            "Warning: spec.workerGroupSpecs[0].template.metadata.annotations[gpu-fraction]: '1e-9' is less than 1 MiB",
        ),
        (
            _obj(_worker("gpu"), kind="RayJob", suspend=True),
            "Suspended",
            "Normal: spec.suspend is true: KubeRay creates no pods until it is resumed",
        ),
    ],
)
def test_each_surprise_has_its_own_reason(obj: RayCluster | RayJob, reason: str, message: str) -> None:
    found = _reasons(obj)
    assert reason in found, found
    assert message in found[reason]


def test_a_rayjob_kai_ray_suspended_is_not_reported_as_the_authors() -> None:
    assert "Suspended" not in _reasons(_obj(_worker("gpu"), kind="RayJob", suspend=True), suspended_by_kai=True)


def test_a_usable_fraction_is_not_reported() -> None:
    assert _reasons(_obj(_worker("gpu", annotations={"gpu-fraction": "0.25"}))) == {}

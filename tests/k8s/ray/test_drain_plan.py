"""The order in which kai-ray drains the Ray nodes of one RayCluster: the head last.

A draining Ray node takes no new actor. Ray Train v2 places a new actor (its preemption watcher, which polls Ray for
drains and hands the workers their notice) each time it starts a worker group; a suspend that drained the head with
the workers left it no node, and the notice never came.
"""

from __future__ import annotations

from typing import Any

from kai_ray import constants as c
from kai_ray.k8s.ray.drainfirst import drain_plan


def _pod(name: str, node_type: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {c.RAY_CLUSTER: "rc", c.RAY_NODE_TYPE: node_type}}}


def _names(pods: list[Any]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def test_the_workers_are_drained_first_and_the_head_after_them() -> None:
    first, last = drain_plan([_pod("head", "head"), _pod("w1", "worker"), _pod("w2", "worker")])
    assert _names(first) == ["w1", "w2"]
    assert _names(last) == ["head"]


def test_a_head_alone_is_drained_at_once() -> None:
    first, last = drain_plan([_pod("head", "head")])
    assert _names(first) == ["head"] and last == []


def test_workers_alone_are_drained_at_once() -> None:
    first, last = drain_plan([_pod("w1", "worker")])
    assert _names(first) == ["w1"] and last == []

"""Bind on release, on the scheduler's cache alone (no API server): the plan a cycle leaves and when it may be bound
before the next cycle. The whole path (eviction, victims gone, binding) runs on the control plane in
``test_scheduler_operator.py``'s preemption tests."""

from __future__ import annotations

from typing import Any

from kai_ray.k8s.base.informer import DELETE, UPSERT
from kai_ray.k8s.config import OperatorConfig
from kai_ray.k8s.scheduling.cache import SchedulerCache
from kai_ray.k8s.scheduling.entries import SnapshotView
from kai_ray.k8s.scheduling.release_binds import ReleasePlan, can_bind, plan_of
from kai_ray.scheduler import snapshot as s
from kai_ray.scheduler.decisions import Bind, CycleResult


def _node(name: str, gpus: int = 8, cordoned: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _pod(
    name: str, group: str, gpus: int, node: str | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"u-{name}",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {"pod-group-name": group, **(annotations or {})},
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": "Pending"},
    }
    if node:
        pod["spec"]["nodeName"] = node
        pod["status"] = {"phase": "Running", "startTime": "2026-01-01T00:00:05Z"}
    return pod


def _pg(name: str, priority: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"g-{name}", "generation": 1},
        "spec": {"minMember": 1, "queue": "team", "priorityClassName": priority},
    }


def _cluster() -> SchedulerCache:
    """One 8-GPU node full of training (two 4-GPU victims); an 8-GPU inference pod waits for it."""
    cache = SchedulerCache(OperatorConfig(leader_elect=False))
    cache.on_node(UPSERT, "n1", _node("n1"))
    cache.on_queue(
        UPSERT, "team", {"metadata": {"name": "team", "uid": "q", "generation": 1}, "spec": {"resources": {}}}
    )
    cache.on_podgroup(UPSERT, "ns/train", _pg("train", "train"))
    cache.on_podgroup(UPSERT, "ns/serve", _pg("serve", "inference"))
    for v in ("v1", "v2"):
        cache.on_pod(UPSERT, f"ns/{v}", _pod(v, "train", 4, node="n1"))
    cache.on_pod(UPSERT, "ns/s", _pod("s", "serve", 8))
    return cache


def _plan(cache: SchedulerCache, view: SnapshotView | None = None) -> ReleasePlan:
    view = view or cache.build(s.SchedulerConfig())
    result = CycleResult(binds=[Bind("u-s", "ns/serve", "n1", pipelined=True)])
    plan = plan_of(view, result)
    assert plan is not None
    return plan


def _victims_gone(cache: SchedulerCache) -> None:
    for v in ("v1", "v2"):
        cache.on_pod(DELETE, f"ns/{v}", _pod(v, "train", 4, node="n1"))


def test_the_plan_is_the_cycles_pipelined_binds_and_waits_for_the_room() -> None:
    cache = _cluster()
    plan = _plan(cache)
    assert [(b.key, b.uid, b.node, b.job) for b in plan.binds] == [("ns/s", "u-s", "n1", "ns/serve")]
    assert plan.starting == ("ns/serve",), "the gang has no pod running: binding it starts it"
    assert not can_bind(plan, cache), "the victims still hold the node"
    cache.on_pod(DELETE, "ns/v1", _pod("v1", "train", 4, node="n1"))
    assert not can_bind(plan, cache), "one victim still holds half of it"
    cache.on_pod(DELETE, "ns/v2", _pod("v2", "train", 4, node="n1"))
    assert can_bind(plan, cache)
    assert cache.assume("ns/s", "u-s", "n1")
    assert not can_bind(plan, cache), "already on its way: never bound twice"


def test_anything_the_plan_relied_on_that_moved_leaves_it_to_the_next_cycle() -> None:
    cache = _cluster()
    plan = _plan(cache)
    _victims_gone(cache)
    cache.on_pod(UPSERT, "ns/other", _pod("other", "elsewhere", 1, node="n1"))  # another scheduler's, or no gang
    assert not can_bind(plan, cache), "a pod that took part of the room since"
    cache.on_pod(DELETE, "ns/other", _pod("other", "elsewhere", 1, node="n1"))
    assert can_bind(plan, cache)

    cache.on_node(UPSERT, "n1", _node("n1", cordoned=True))
    assert not can_bind(plan, cache), "the node changed since the plan's snapshot"
    cache.on_node(UPSERT, "n1", _node("n1"))
    assert not can_bind(plan, cache), "even back as it was: the plan is from before"
    assert can_bind(_plan(cache), cache), "a plan from a snapshot after the change"

    cache.on_pod(DELETE, "ns/s", _pod("s", "serve", 8))
    replaced = _pod("s", "serve", 8)
    replaced["metadata"]["uid"] = "u-s2"
    cache.on_pod(UPSERT, "ns/s", replaced)
    assert not can_bind(plan, cache), "a pod recreated under the same name is not the one planned"


def test_only_plain_pods_are_bound_early() -> None:
    """A shared GPU, an extended resource or a DRA claim needs the session's accounting: the cycle binds those."""
    cache = _cluster()
    cache.on_pod(UPSERT, "ns/s", _pod("s", "serve", 0, annotations={"gpu-fraction": "0.5"}))
    view = cache.build(s.SchedulerConfig())
    assert plan_of(view, CycleResult(binds=[Bind("u-s", "ns/serve", "n1", pipelined=True)])) is None
    assert plan_of(view, CycleResult(binds=[Bind("u-s", "ns/serve", "n1", gpu_group="g0", pipelined=True)])) is None
    assert plan_of(view, CycleResult(binds=[Bind("u-s", "ns/serve", "n1")])) is None, "nothing pipelined"

"""Bind on release, on the scheduler's cache alone (no API server): the plan a cycle leaves and when it may be bound
before the next cycle. The whole path (eviction, victims gone, binding) runs on the control plane in
``test_scheduler_operator.py``'s preemption tests."""

from __future__ import annotations

from kai_ray.k8s.base.informer import DELETE, UPSERT
from kai_ray.k8s.config import OperatorConfig
from kai_ray.k8s.scheduling.cache import SchedulerCache
from kai_ray.k8s.scheduling.entries import SnapshotView
from kai_ray.k8s.scheduling.release_binds import AwaitedVictims, ReleasePlan, can_bind, plan_of
from kai_ray.scheduler import snapshot as s
from kai_ray.scheduler.decisions import Bind, CycleResult
from tests.k8s.scheduling.objects import node, pod, podgroup


def _cluster() -> SchedulerCache:
    """One 8-GPU node full of training (two 4-GPU victims); an 8-GPU inference pod waits for it."""
    cache = SchedulerCache(OperatorConfig(leader_elect=False))
    cache.on_node(UPSERT, "n1", node("n1"))
    cache.on_queue(
        UPSERT, "team", {"metadata": {"name": "team", "uid": "q", "generation": 1}, "spec": {"resources": {}}}
    )
    cache.on_podgroup(UPSERT, "ns/train", podgroup("train", priority="train"))
    cache.on_podgroup(UPSERT, "ns/serve", podgroup("serve", priority="inference"))
    for v in ("v1", "v2"):
        cache.on_pod(UPSERT, f"ns/{v}", pod(v, "train", gpus=4, node="n1"))
    cache.on_pod(UPSERT, "ns/s", pod("s", "serve", gpus=8))
    return cache


def _plan(cache: SchedulerCache, view: SnapshotView | None = None) -> ReleasePlan:
    view = view or cache.build(s.SchedulerConfig())
    result = CycleResult(binds=[Bind("u-s", "ns/serve", "n1", pipelined=True)])
    plan = plan_of(view, result)
    assert plan is not None
    return plan


def _victims_gone(cache: SchedulerCache) -> None:
    for v in ("v1", "v2"):
        cache.on_pod(DELETE, f"ns/{v}", pod(v, "train", gpus=4, node="n1"))


def test_the_plan_is_the_cycles_pipelined_binds_and_waits_for_the_room() -> None:
    cache = _cluster()
    plan = _plan(cache)
    assert [(b.key, b.uid, b.node, b.job) for b in plan.binds] == [("ns/s", "u-s", "n1", "ns/serve")]
    assert plan.starting == ("ns/serve",), "the gang has no pod running: binding it starts it"
    assert not can_bind(plan, cache), "the victims still hold the node"
    cache.on_pod(DELETE, "ns/v1", pod("v1", "train", gpus=4, node="n1"))
    assert not can_bind(plan, cache), "one victim still holds half of it"
    cache.on_pod(DELETE, "ns/v2", pod("v2", "train", gpus=4, node="n1"))
    assert can_bind(plan, cache)
    assert cache.assume("ns/s", "u-s", "n1")
    assert not can_bind(plan, cache), "already on its way: never bound twice"


def test_anything_the_plan_relied_on_that_moved_leaves_it_to_the_next_cycle() -> None:
    cache = _cluster()
    plan = _plan(cache)
    _victims_gone(cache)
    cache.on_pod(UPSERT, "ns/other", pod("other", "elsewhere", gpus=1, node="n1"))  # another scheduler's, or no gang
    assert not can_bind(plan, cache), "a pod that took part of the room since"
    assert cache.on_nodes["n1"] == {"ns/other"}, "the node's pods, as the cache indexes them"
    cache.on_pod(DELETE, "ns/other", pod("other", "elsewhere", gpus=1, node="n1"))
    assert can_bind(plan, cache)

    cache.on_node(UPSERT, "n1", node("n1", cordoned=True))
    assert not can_bind(plan, cache), "the node changed since the plan's snapshot"
    cache.on_node(UPSERT, "n1", node("n1"))
    assert not can_bind(plan, cache), "even back as it was: the plan is from before"
    assert can_bind(_plan(cache), cache), "a plan from a snapshot after the change"

    cache.on_pod(DELETE, "ns/s", pod("s", "serve", gpus=8))
    replaced = pod("s", "serve", gpus=8)
    replaced["metadata"]["uid"] = "u-s2"
    cache.on_pod(UPSERT, "ns/s", replaced)
    assert not can_bind(plan, cache), "a pod recreated under the same name is not the one planned"


def test_only_plain_pods_are_bound_early() -> None:
    """A shared GPU, an extended resource or a DRA claim needs the session's accounting: the cycle binds those."""
    cache = _cluster()
    cache.on_pod(UPSERT, "ns/s", pod("s", "serve", gpus=0, annotations={"gpu-fraction": "0.5"}))
    view = cache.build(s.SchedulerConfig())
    assert plan_of(view, CycleResult(binds=[Bind("u-s", "ns/serve", "n1", pipelined=True)])) is None
    assert plan_of(view, CycleResult(binds=[Bind("u-s", "ns/serve", "n1", gpu_group="g0", pipelined=True)])) is None
    assert plan_of(view, CycleResult(binds=[Bind("u-s", "ns/serve", "n1")])) is None, "nothing pipelined"


def test_the_victims_are_awaited_until_the_last_leaves_and_one_that_stays_is_not() -> None:
    cache = _cluster()
    awaited = AwaitedVictims()
    assert not awaited.gone(cache), "nothing awaited: no plan to bind"
    awaited.add(["ns/v1", "ns/v2"])
    cache.on_pod(DELETE, "ns/v1", pod("v1", "train", gpus=4, node="n1"))
    assert not awaited.gone(cache) and awaited.pending(), "one victim still there"
    awaited.drop("ns/v2")  # its eviction was refused (a PDB): it stays
    assert awaited.gone(cache), "the only victim still awaited has left"
    assert not awaited.pending() and not awaited.gone(cache), "told once"

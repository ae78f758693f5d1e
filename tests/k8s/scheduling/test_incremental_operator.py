"""The leader keeps its incremental session across cycles and decides exactly as a from-scratch cycle would.

Real API server and KWOK nodes; every cycle of the operator is checked, on its own snapshot, against
``run_cycle`` without state, while a sequence of events goes by: gangs arrive, a node is cordoned (a node change
the kept node arrays must see) and uncordoned, pods go away, a queue's quota changes.
"""

from __future__ import annotations

from typing import Any

from kai_ray.k8s.base.rest import Kube, queues_path
from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.decisions import CycleResult
from kai_ray.scheduler.snapshot import Snapshot
from tests.k8s.helpers import bound, make_gang, wait_until


def _decisions(r: CycleResult) -> tuple[Any, ...]:
    return (r.binds, r.evictions, r.jobs, r.queues, r.findings)


def test_the_kept_session_decides_as_a_fresh_cycle_over_a_sequence_of_events(
    kube: Kube, namespace: str, queues: Any, node_pool: Any, run_scheduler: Any, priority_classes: Any
) -> None:
    _, selector = node_pool(3, gpus=8)
    queues("dept", gpu_quota=24)
    team = queues("team", gpu_quota=24, parent="dept")
    op = run_scheduler(node_selector=selector)
    recorder = op.cache.recorder
    incremental = recorder.run
    cycles: list[tuple[bool, bool]] = []  # (decisions equal, node arrays kept from the cycle before)
    differing: list[tuple[Snapshot, CycleResult, CycleResult]] = []

    def checked(snap: Snapshot) -> CycleResult:
        before = recorder.state.node_base
        got = incremental(snap)
        want = run_cycle(snap)
        same = _decisions(got) == _decisions(want)
        if not same:
            differing.append((snap, got, want))
        cycles.append((same, before is not None and recorder.state.node_base is before))
        return got

    op.quarantine.run_cycle = checked

    first = make_gang(kube, namespace, "first", pods=1, gpus=4, queue=team)
    on = wait_until("the first pod to be bound", lambda: bound(kube, namespace, first).get(first[0]), 30)

    # Binpacking prefers the half-full node; cordoned, it must not get the next pod.
    kube.merge_patch(f"/api/v1/nodes/{on}", {"spec": {"unschedulable": True}})
    wait_until("the cordon to reach the cache", lambda: op.cache.nodes[on].unschedulable, 30)
    second = make_gang(kube, namespace, "second", pods=1, gpus=4, queue=team)
    where = wait_until("the second pod to be bound", lambda: bound(kube, namespace, second).get(second[0]), 30)
    assert where != on

    kube.merge_patch(f"/api/v1/nodes/{on}", {"spec": {"unschedulable": False}})
    wait_until("the uncordon to reach the cache", lambda: not op.cache.nodes[on].unschedulable, 30)
    third = make_gang(kube, namespace, "third", pods=1, gpus=8, queue=team)
    empty = wait_until("the whole-node pod to be bound", lambda: bound(kube, namespace, third).get(third[0]), 30)
    assert empty not in (on, where)

    for name in second:  # the node it leaves is the only one a whole-node pod fits on
        kube.delete_pod(namespace, name, None, grace_seconds=0)
    fourth = make_gang(kube, namespace, "fourth", pods=1, gpus=8, queue=team)
    assert wait_until("the fourth pod to be bound", lambda: bound(kube, namespace, fourth).get(fourth[0]), 30) == where

    kube.merge_patch(
        queues_path(team), {"spec": {"resources": {"gpu": {"quota": 8, "limit": 8, "overQuotaWeight": 1}}}}
    )
    fifth = make_gang(kube, namespace, "fifth", pods=1, gpus=1, queue=team)
    wait_until("the over-limit gang to be held", lambda: _held(op, "fifth"), 30)

    assert not differing, differing[0]
    assert len(cycles) >= 5
    assert any(kept for _, kept in cycles), "the node arrays were never kept across cycles"
    assert bound(kube, namespace, fifth) == {}


def _held(op: Any, name: str) -> bool:
    r = op.last_result
    return r is not None and any(not st.scheduled and key.endswith(f"/{name}") for key, st in r.jobs.items())

"""PodGroup status writes scale with changes, not with pods or cycles, on the real API server.

A watch of the PodGroups counts every stored change of their ``status``: a gang's pods being bound is one write on
its PodGroup (not one per pod), and a gang whose verdict does not change is not written again, however many cycles
run; its Unschedulable Event is one Event.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from kai_ray.k8s.base.informer import Informer
from kai_ray.k8s.base.rest import Kube, podgroups_path
from tests.k8s.helpers import bound, condition, events, make_gang, podgroup, wait_until

NodePool = Callable[..., tuple[list[str], dict[str, str]]]


class StatusChanges:
    """Every distinct ``status`` each PodGroup of a namespace had, in the order the watch delivered them."""

    def __init__(self, kube: Kube, ns: str) -> None:
        self.seen: dict[str, list[str]] = defaultdict(list)
        self.lock = threading.Lock()
        self.informer = Informer(kube, podgroups_path(ns), name="test-podgroups", handler=self._on)

    def _on(self, event: str, key: str, obj: dict[str, Any]) -> None:
        if event == "DELETE":
            return
        status = json.dumps(obj.get("status") or {}, sort_keys=True)
        with self.lock:
            if not self.seen[key] or self.seen[key][-1] != status:
                self.seen[key].append(status)

    def writes(self, key: str) -> int:
        """Status changes stored after the PodGroup's creation."""
        with self.lock:
            history = self.seen.get(key) or []
        return max(0, len(history) - 1) if history and history[0] == "{}" else len(history)


def test_a_gang_costs_one_status_write_and_an_unchanged_verdict_none(
    kube: Kube, namespace: str, queues: Any, node_pool: NodePool, run_scheduler: Any, priority_classes: Any
) -> None:
    _, selector = node_pool(1, gpus=8)
    queues("dept")
    team = queues("team", parent="dept")
    watch = StatusChanges(kube, namespace)
    watch.informer.start()
    try:
        op = run_scheduler(node_selector=selector)
        gang = make_gang(kube, namespace, "gang", pods=6, gpus=1, queue=team)
        huge = make_gang(kube, namespace, "huge", pods=2, gpus=8, queue=team)  # 16 GPUs on an 8-GPU cluster
        wait_until("the gang bound", lambda: len(bound(kube, namespace, gang)) == 6, 30)

        def says(name: str, status: str) -> bool:
            return (condition(podgroup(kube, namespace, name), "Scheduled") or {}).get("status") == status

        wait_until("the gang's Scheduled=True", lambda: says("gang", "True"), 30)
        wait_until("the huge gang's Scheduled=False", lambda: says("huge", "False"), 30)
        wait_until("the writer idle", lambda: not op.writer.busy(), 30)
        key_gang, key_huge = f"{namespace}/gang", f"{namespace}/huge"
        wait_until("the watch caught up", lambda: watch.writes(key_gang) >= 1 and watch.writes(key_huge) >= 1, 30)
        gang_writes, huge_writes = watch.writes(key_gang), watch.writes(key_huge)
        # once the scheduler's own watch has brought its writes back, it keeps no copy of them
        wait_until("the scheduler's copies of its writes dropped", lambda: op.reporter.status_copies == 0, 30)
        # six pods bound: one write says so (two if the gang was seen pending for longer than the report delay)
        assert 1 <= gang_writes <= 2, watch.seen[key_gang]
        assert 1 <= huge_writes <= 2, watch.seen[key_huge]

        cycles = op.cycles
        wait_until("ten more cycles (the huge gang keeps them periodic)", lambda: op.cycles >= cycles + 10, 60)
        wait_until("the writer idle", lambda: not op.writer.busy(), 30)
        assert watch.writes(key_gang) == gang_writes, "a scheduled gang is not written again"
        assert watch.writes(key_huge) == huge_writes, "an unchanged pending verdict is not written again"
        assert len(events(kube, namespace, "huge", "Unschedulable")) == 1

        pg = podgroup(kube, namespace, "gang")
        assert pg["status"]["phase"] == "Running" and not pg["status"].get("schedulingConditions")
        pg = podgroup(kube, namespace, "huge")
        assert pg["status"]["phase"] == "Pending"
        assert pg["status"]["schedulingConditions"][0]["reasons"][0]["reason"] == "NeverFits"
        assert bound(kube, namespace, huge) == {}
    finally:
        watch.informer.stop()


def test_a_pending_gang_that_gets_room_is_written_scheduled_with_kai_conditions_cleared(
    kube: Kube, namespace: str, queues: Any, node_pool: NodePool, run_scheduler: Any, priority_classes: Any
) -> None:
    """The verdict's status is built when it is written, on the stored status: the pending verdict's KAI
    ``schedulingConditions`` are cleared and the phase follows."""
    _, selector = node_pool(1, gpus=8)
    queues("dept")
    team = queues("team", parent="dept")
    run_scheduler(node_selector=selector)
    first = make_gang(kube, namespace, "first", pods=2, gpus=4, queue=team)
    # bound before the second exists: two gangs created in the same second tie on age and either may go first
    wait_until("the first gang bound", lambda: len(bound(kube, namespace, first)) == 2, 30)
    second = make_gang(kube, namespace, "second", pods=2, gpus=4, queue=team)
    wait_until(
        "the second gang pending",
        lambda: (condition(podgroup(kube, namespace, "second"), "Scheduled") or {}).get("status") == "False",
        30,
    )
    for name in ("first-0", "first-1"):
        kube.delete_pod(namespace, name, None, grace_seconds=0)
    wait_until("the second gang bound once room appears", lambda: len(bound(kube, namespace, second)) == 2, 30)
    pg = wait_until(
        "the second gang's Scheduled=True",
        lambda: (lambda g: g if (condition(g, "Scheduled") or {}).get("status") == "True" else None)(
            podgroup(kube, namespace, "second")
        ),
        30,
    )
    assert pg["status"]["phase"] == "Running" and pg["status"].get("schedulingConditions") in (None, [])


def test_a_change_the_stored_status_already_says_is_not_a_write() -> None:
    """The writer's last check before a PodGroup status write: the verdict's body built on the stored status is
    equal to it when the verdict did not change (its transition kept), and differs as soon as anything does."""
    from kai_ray.k8s.scheduling import status as st
    from kai_ray.scheduler.decisions import JobStatus, Reason

    pending = JobStatus("ns/g", False, Reason.GANG_DOES_NOT_FIT, "2 of 3 pods fit")
    stored = st.podgroup_status({}, pending, "2026-11-28T09:00:00Z")
    again = st.podgroup_status(stored, pending, "2026-11-28T09:05:00Z")
    assert st.status_says(stored, again), "same verdict: same transition time and ID, nothing to write"
    moved = st.podgroup_status(stored, JobStatus("ns/g", False, Reason.GANG_DOES_NOT_FIT, "1 of 3 pods fit"), "now")
    assert not st.status_says(stored, moved)
    scheduled = st.podgroup_status(stored, JobStatus("ns/g", True, Reason.SCHEDULED, "bound"), "now")
    assert not st.status_says(stored, scheduled) and st.status_says({**stored, **scheduled}, scheduled)
    assert st.status_says({"phase": "Running"}, {"phase": "Running", "schedulingConditions": []})

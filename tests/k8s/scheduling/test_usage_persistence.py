"""Time-based fair share without Prometheus (``--usage-db=internal``) on the real API server: the scheduler keeps
each queue's usage in the Queue status, and a new leader (after the old one crashed) or a restarted scheduler picks
the history up from there instead of starting from zero."""

from __future__ import annotations

import time
from typing import Any

from kai_ray.k8s.base.rest import Kube, pods_path, queues_path
from kai_ray.k8s.scheduling.operator import SchedulerOperator
from tests.k8s.helpers import bound, make_gang, wait_until

USAGE = {
    "usage_db": "internal",
    "usage_window_size": "1h",
    "usage_fetch_interval": "1s",  # refresh and persist every second (KAI's default is a minute)
    "k_value": 1.0,
}


def _status(kube: Kube, name: str) -> dict[str, Any]:
    return dict(kube.get(queues_path(name)).get("status") or {})


def _gpu_usage(status: dict[str, Any]) -> float | None:
    usage = status.get("usage") or {}
    value = usage.get("nvidia.com/gpu")
    return None if value is None else float(value)


def test_usage_survives_a_leader_change_and_a_restart(
    kube: Kube, namespace: str, queues: Any, node_pool: Any, run_scheduler: Any, priority_classes: Any
) -> None:
    _, selector = node_pool(1, gpus=8)
    dept = queues("dept")
    a = queues("a", parent="dept")
    b = queues("b", parent="dept")
    lease = {"leader_elect": True, "lease_name": f"{namespace}-sched", "node_selector": selector, **USAGE}
    first: SchedulerOperator = run_scheduler(identity="first", **lease)

    job = make_gang(kube, namespace, "a-train", pods=1, gpus=8, queue=a)
    wait_until("queue a's job to hold the node", lambda: len(bound(kube, namespace, job)) == 1, 45)
    wait_until("queue a's usage to pass half the cluster", lambda: (_gpu_usage(_status(kube, a)) or 0) >= 0.5, 90)
    st = _status(kube, a)
    assert st["usageLedger"]["level"][0] == 8 and st["usageLedger"]["buckets"]
    assert set(st["usage"]) == {"nvidia.com/gpu", "cpu", "memory"}
    wait_until("queue b's usage (none) to be written", lambda: _gpu_usage(_status(kube, b)) == 0.0, 60)
    top = wait_until(  # each Queue's status is its own write: the parent's may come a moment later
        "the top queue's capacity series",
        lambda: (lambda t: t if ((t.get("usageLedger") or {}).get("capacity") or {}).get("level") else None)(
            _status(kube, dept)
        ),
        60,
    )
    assert top["usageLedger"]["capacity"]["level"][0] == 8  # the cluster's capacity series lives on top-level queues
    assert _gpu_usage(top) == _gpu_usage(st) or (_gpu_usage(top) or 0) >= 0.5  # a parent's usage is its subtree's

    # queue a stops; its idle level is recorded; then the leader dies without giving up its Lease
    kube.delete(pods_path(namespace, job[0]), {"gracePeriodSeconds": 0})
    wait_until("queue a's idle level to be recorded", lambda: _status(kube, a)["usageLedger"]["level"][0] == 0, 60)
    crashed_at = time.time()
    second: SchedulerOperator = run_scheduler(wait_leader=False, identity="second", **lease)
    first.stop(release=False)
    wait_until("the second replica to take over", lambda: second.is_leader() and second.synced(), 60)

    # A fresh history would give queue a exactly 0: it has held nothing since the new scheduler started. An idle
    # queue's own record is not rewritten (it stays valid); the top-level capacity record shows who wrote last.
    def restored_by(op: SchedulerOperator, since: float, before: float | None) -> float | None:
        if float(_status(kube, dept)["usageLedger"]["capacity"]["time"]) <= since:
            return None  # the new scheduler has not written yet
        current = getattr(op.usage, "current", {}).get(a)
        written = _gpu_usage(_status(kube, a))
        if current is None or current.gpu <= 0 or not written or written == before:
            return None
        return written

    before = _gpu_usage(_status(kube, a))
    after_takeover = wait_until(
        "the new leader to report queue a's restored usage", lambda: restored_by(second, crashed_at, before), 60
    )
    assert 0 < after_takeover < 1

    # ... and the same after a plain restart of the only scheduler
    stopped_at = time.time()
    second.stop()
    third: SchedulerOperator = run_scheduler(identity="third", **lease)
    after_restart = wait_until(
        "the restarted scheduler to report it again", lambda: restored_by(third, stopped_at, after_takeover), 60
    )
    assert 0 < after_restart < after_takeover  # a stayed idle: its share of the window only shrinks

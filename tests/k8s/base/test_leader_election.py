"""Scheduler replicas and restarts on the real API server: one leader at a time, no double binding, no over-commit.

What is real: the coordination.k8s.io Lease, the Binding subresource (which refuses a second binding with 409, so a
double bind attempt shows up as a conflict in the schedulers' counters), watches and KWOK. A "crash" is a replica
stopped without releasing its Lease while its bindings are in flight.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kai_ray.k8s.base.rest import Kube
from kai_ray.k8s.scheduling.operator import SchedulerOperator
from tests.k8s.helpers import bound, gpu_use, make_gang, wait_until

NodePool = Callable[..., tuple[list[str], dict[str, str]]]


def _binds(op: SchedulerOperator, result: str) -> float:
    return op.metrics.value("kai_ray_binds_total", {"result": result})


def test_restart_mid_run_never_double_binds_nor_overcommits(
    kube: Kube, namespace: str, queues: Any, node_pool: NodePool, run_scheduler: Any, priority_classes: Any
) -> None:
    _, selector = node_pool(3, gpus=8)  # 24 GPUs
    queues("dept")
    team = queues("team", parent="dept")
    ha = {"node_selector": selector, "leader_elect": True, "lease_name": "sched", "bind_workers": 2}
    a: SchedulerOperator = run_scheduler(**ha, identity="replica-a")
    b: SchedulerOperator = run_scheduler(**ha, identity="replica-b", wait_leader=False)

    wave1 = [p for i in range(30) for p in make_gang(kube, namespace, f"w1-{i}", pods=1, gpus=1, queue=team)]
    wait_until("the leader to be binding", lambda: len(bound(kube, namespace, wave1)) >= 5, 30, interval=0.02)
    assert a.is_leader() and not b.is_leader()
    assert _binds(b, "ok") == 0, "the follower must not bind while the leader holds the Lease"

    a.stop(release=False)  # crash: bindings in flight, Lease kept until it expires
    crashed_with = len(bound(kube, namespace, wave1))
    wave2 = [p for i in range(20) for p in make_gang(kube, namespace, f"w2-{i}", pods=1, gpus=1, queue=team)]
    wait_until("the follower to take over after the Lease expires", b.is_leader, 30)
    wait_until("the cluster to fill up", lambda: len(bound(kube, namespace, wave1 + wave2)) == 24, 60)

    use = gpu_use(kube, [namespace])
    assert sum(use.values()) == 24 and all(v <= 8 for v in use.values()), use
    # A binding is counted when its answer is back, which may be after the watch has shown the pod bound.
    wait_until("every binding to be counted", lambda: _binds(a, "ok") + _binds(b, "ok") >= 24, 30)
    assert _binds(a, "conflict") == 0 and _binds(b, "conflict") == 0, "a pod was bound twice"
    assert _binds(a, "ok") + _binds(b, "ok") == 24, "every bound pod was bound exactly once"
    assert _binds(a, "ok") >= 5 and crashed_with < 30

    # A graceful hand-over: the new replica takes over without waiting for expiry and keeps the rules.
    c: SchedulerOperator = run_scheduler(**ha, identity="replica-c", wait_leader=False)
    wait_until("replica c to sync", c.synced, 30)
    assert not c.is_leader()
    b.stop(release=True)
    wait_until("replica c to lead", c.is_leader, 10)
    gone = list(bound(kube, namespace, wave1))[:4]
    for name in gone:
        kube.delete_pod(namespace, name, None, grace_seconds=0)
    wait_until(
        "replica c to fill the freed GPUs",
        lambda: len(bound(kube, namespace, wave1 + wave2)) == 24 and not set(gone) & set(bound(kube, namespace)),
        60,
    )
    use = gpu_use(kube, [namespace])
    assert all(v <= 8 for v in use.values()), use
    wait_until("replica c's bindings to be counted", lambda: _binds(c, "ok") >= 4, 30)
    assert _binds(c, "ok") == 4 and _binds(c, "conflict") == 0


def _binding_conflicts(kube: Kube) -> float:
    """409 answers of the API server to ``pods/binding`` so far: a second binding of a bound pod is refused so."""
    resp = kube.pool.request("GET", kube.url("/metrics"), headers=kube._headers(None), retries=False)
    total = 0.0
    for line in resp.data.decode().splitlines():
        if line.startswith("apiserver_request_total{") and 'subresource="binding"' in line and 'code="409"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_graceful_handover_is_immediate_and_never_binds_twice(
    kube: Kube, namespace: str, queues: Any, node_pool: NodePool, run_scheduler: Any, priority_classes: Any
) -> None:
    """Leases far too long for expiry or polling to explain a quick takeover: only the release (seen through the
    follower's Lease watch) and the warm follower can. Gangs keep arriving across the hand-over."""
    _, selector = node_pool(4, gpus=8)  # 32 GPUs
    queues("dept")
    team = queues("team", parent="dept")
    slow = {"lease_duration": 60.0, "renew_deadline": 40.0, "retry_period": 20.0}
    ha = {"node_selector": selector, "leader_elect": True, "lease_name": "warm", "bind_workers": 4, **slow}
    conflicts0 = _binding_conflicts(kube)
    a: SchedulerOperator = run_scheduler(**ha, identity="warm-a")
    b: SchedulerOperator = run_scheduler(**ha, identity="warm-b", wait_leader=False)
    wait_until("the follower to sync", b.synced, 30)

    wave1 = [p for i in range(16) for p in make_gang(kube, namespace, f"h1-{i}", pods=1, gpus=1, queue=team)]
    wait_until("the leader to bind the first wave", lambda: len(bound(kube, namespace, wave1)) == 16, 30)
    assert a.is_leader() and not b.is_leader()

    wave2 = [p for i in range(16) for p in make_gang(kube, namespace, f"h2-{i}", pods=1, gpus=1, queue=team)]
    a.stop(release=True)  # SIGTERM: stops binding, lets its bindings come back, releases the Lease with a note
    stopped = time.monotonic()
    wait_until("the follower to lead", b.is_leader, 15, interval=0.01)
    took = time.monotonic() - stopped
    assert took < 5.0, f"took {took:.1f}s: the release was not seen (retry period 20s, lease 60s)"
    wait_until("the new leader to fill the cluster", lambda: len(bound(kube, namespace, wave1 + wave2)) == 32, 30)

    lease = kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/warm")
    assert lease["spec"]["holderIdentity"] == "warm-b"
    assert not [k for k in (lease["metadata"].get("annotations") or {}) if k.startswith("handover.")], lease
    use = gpu_use(kube, [namespace])
    assert sum(use.values()) == 32 and all(v <= 8 for v in use.values()), use
    wait_until("every binding to be counted", lambda: _binds(a, "ok") + _binds(b, "ok") >= 32, 30)
    assert _binds(a, "ok") + _binds(b, "ok") == 32, "every bound pod was bound exactly once"
    assert _binding_conflicts(kube) == conflicts0, "the API server refused a second binding of a pod"

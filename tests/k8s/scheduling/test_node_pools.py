"""Node pools (KAI's SchedulingShard): one scheduler per pool on the real API server.

Each scheduler sees only the nodes, Queues and PodGroups labelled ``kai.scheduler/node-pool=<its pool>`` (the
``default`` pool: those without the label), so two pools never place on each other's nodes, and a pool's preemption
only ever picks victims in its own pool. Pods are the podgrouper's (bring-your-own PodGroups labelled with the pool).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import generate_latest

from kai_ray import constants as c
from kai_ray.k8s.base.rest import ApiError, Kube, podgroups_path, pods_path, queues_path
from kai_ray.k8s.scheduling.operator import SchedulerOperator
from tests.k8s.helpers import bound, pod_body, podgroup_body, queue_body, wait_until

POOL = c.NODE_POOL_LABEL


@pytest.fixture
def pools(kube: Kube, namespace: str, gpu_nodes: Any) -> Iterator[Any]:
    """``pools(name, nodes)`` -> (pool value, its nodes, its Queue): nodes and a Queue labelled with the pool."""
    made: list[str] = []

    def make(name: str, nodes: int) -> tuple[str, list[str], str]:
        value = f"{namespace}-{name}"
        names = gpu_nodes(nodes, gpus=8, labels={POOL: value})
        for queue, parent in ((f"{value}-dept", None), (f"{value}-team", f"{value}-dept")):
            body = queue_body(queue, parent=parent)
            body["metadata"]["labels"] = {POOL: value}
            kube.create(queues_path(), body)
            made.append(queue)
        return value, names, f"{value}-team"

    yield make
    for queue in reversed(made):
        with contextlib.suppress(ApiError):
            kube.delete(queues_path(queue))


def _gang(kube: Kube, ns: str, name: str, pool: str, queue: str, pods: int, gpus: float, priority: str) -> list[str]:
    body = podgroup_body(name, pods, queue, priority)
    body["metadata"]["labels"] = {POOL: pool}
    kube.create(podgroups_path(ns), body)
    names = [f"{name}-{i}" for i in range(pods)]
    for pod in names:
        kube.create(pods_path(ns), pod_body(pod, gpus, group=name))
    return names


def _scheduler(run_scheduler: Any, pool: str) -> SchedulerOperator:
    op: SchedulerOperator = run_scheduler(node_pool=pool, leader_elect=True)
    return op


def test_two_pools_never_touch_each_others_nodes(
    kube: Kube, namespace: str, pools: Any, run_scheduler: Any, priority_classes: Any
) -> None:
    a, nodes_a, queue_a = pools("a", 2)
    b, nodes_b, queue_b = pools("b", 2)
    op_a = _scheduler(run_scheduler, a)
    op_b = _scheduler(run_scheduler, b)
    assert op_a.elector is not None and op_b.elector is not None
    assert op_a.elector.cfg.name != op_b.elector.cfg.name, "one Lease per pool: both lead at once"

    in_a = [p for i in range(6) for p in _gang(kube, namespace, f"a{i}", a, queue_a, pods=2, gpus=1, priority="train")]
    in_b = [p for i in range(6) for p in _gang(kube, namespace, f"b{i}", b, queue_b, pods=2, gpus=1, priority="train")]
    # a gang of pool b that names pool a's Queue: pool b's scheduler does not know the Queue, pool a's not the gang
    astray = _gang(kube, namespace, "astray", b, queue_a, pods=1, gpus=1, priority="train")
    wait_until("both pools to bind their gangs", lambda: len(bound(kube, namespace, in_a + in_b)) == 24, 45)

    placed = bound(kube, namespace)
    assert {placed[p] for p in in_a} <= set(nodes_a)
    assert {placed[p] for p in in_b} <= set(nodes_b)
    assert not set(astray) & set(placed), "a gang whose Queue is in another pool is never placed"
    wait_until(
        "both schedulers to have counted their own bindings",
        lambda: (
            op_a.metrics.value("kai_ray_binds_total", {"result": "ok"}) == 12
            and op_b.metrics.value("kai_ray_binds_total", {"result": "ok"}) == 12
        ),
        30,
    )


def test_preemption_in_one_pool_never_evicts_in_another(
    kube: Kube, namespace: str, pools: Any, run_scheduler: Any, priority_classes: Any
) -> None:
    a, nodes_a, queue_a = pools("pa", 1)
    b, nodes_b, queue_b = pools("pb", 1)
    op_a = _scheduler(run_scheduler, a)
    op_b = _scheduler(run_scheduler, b)
    train_a = _gang(kube, namespace, "train-a", a, queue_a, pods=2, gpus=4, priority="train")
    train_b = _gang(kube, namespace, "train-b", b, queue_b, pods=2, gpus=4, priority="train")
    wait_until("training to fill both pools", lambda: len(bound(kube, namespace, train_a + train_b)) == 4, 45)
    uids_b = {n: kube.get(pods_path(namespace, n))["metadata"]["uid"] for n in train_b}

    serving = _gang(kube, namespace, "serving-a", a, queue_a, pods=1, gpus=4, priority="inference")
    wait_until("inference to be bound in pool a", lambda: len(bound(kube, namespace, serving)) == 1, 45)
    assert bound(kube, namespace)[serving[0]] in nodes_a
    assert len(bound(kube, namespace, train_a)) < 2, "pool a made room by preempting its own training"
    assert op_a.metrics.value("kai_ray_evictions_total", {"action": "preempt", "result": "ok"}) >= 1
    assert op_b.metrics.value("kai_ray_evictions_total", {"action": "preempt", "result": "ok"}) == 0
    still = {n: kube.get(pods_path(namespace, n)) for n in train_b}
    assert all(
        p["metadata"]["uid"] == uids_b[n] and not p["metadata"].get("deletionTimestamp") for n, p in still.items()
    )
    assert {p["spec"]["nodeName"] for p in still.values()} <= set(nodes_b)
    status = wait_until(
        "pool a's verdicts to name their pool",
        lambda: kube.get(podgroups_path(namespace, "train-a")).get("status", {}).get("schedulingConditions"),
        30,
    )
    assert status[0]["nodePool"] == a


def test_pool_selectors_and_bad_names(capsys: pytest.CaptureFixture[str]) -> None:
    """KAI's semantics: a named pool selects its label value, ``default`` what carries no label, none everything."""
    from kai_ray.cli import main
    from kai_ray.k8s.config import OperatorConfig

    assert OperatorConfig().pool_selector() is None
    assert OperatorConfig(node_pool="a100").pool_selector() == f"{POOL}=a100"
    assert OperatorConfig(node_pool="default").pool_selector() == f"!{POOL}"
    assert OperatorConfig(node_pool="a100", node_pool_label_key="x/pool").lease("scheduler")[0] == (
        "kai-ray-scheduler-a100"
    )
    assert OperatorConfig(node_pool="a100").lease("podgrouper")[0] == "kai-ray-podgrouper"
    with pytest.raises(SystemExit) as exit_:
        main(["operator", "scheduler", "--node-pool", "bad name!"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "kai-ray: error: --node-pool: 'bad name!' is not a label value (letters, digits, '-', '_', '.')"
    )


def test_a_pools_metrics_name_the_pool(run_scheduler: Any, namespace: str) -> None:
    op: SchedulerOperator = run_scheduler(node_pool=f"{namespace}-m")
    text = generate_latest(op.metrics.registry).decode()
    assert f'target_info{{node_pool="{namespace}-m"}} 1.0' in text

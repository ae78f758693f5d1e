"""Fixtures for the operator tests on the real control plane (kube-apiserver + etcd + KWOK).

Each test gets its own namespace, its own KWOK GPU nodes (the scheduler under test only sees them, through a node
selector on their batch label), and its own Queues; operators run in-process with short periods and are stopped
before the namespace is cleared.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kai_ray.k8s.base.rest import ApiError, Kube, queues_path
from kai_ray.k8s.podgrouping.operator import PodgrouperOperator
from kai_ray.k8s.scheduling.operator import SchedulerOperator, build_scheduler
from kai_ray.testing.controlplane.harness import NODE_BATCH_LABEL, ControlPlane
from kai_ray.testing.inprocess import operator_config
from kai_ray.testing.testbed import queue_body
from tests.k8s.helpers import PRIORITY_CLASSES, wait_until


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane) -> Iterator[Kube]:
    k = Kube(control_plane.api_client(pool_size=32))
    yield k
    k.close()


@pytest.fixture(scope="module")
def priority_classes(kube: Kube) -> Iterator[dict[str, int]]:
    """KAI's PriorityClasses (train 50 ... inference 125); the ones this module created are removed afterwards."""
    created = []
    for name, value in PRIORITY_CLASSES.items():
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
            "preemptionPolicy": "PreemptLowerPriority",
        }
        try:
            kube.create("/apis/scheduling.k8s.io/v1/priorityclasses", body)
            created.append(name)
        except ApiError as exc:
            if not exc.conflict:
                raise
    yield dict(PRIORITY_CLASSES)
    for name in created:
        with contextlib.suppress(ApiError):
            kube.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")


@pytest.fixture
def queues(kube: Kube, namespace: str) -> Iterator[Callable[..., str]]:
    """``queues(name, gpu_quota=..., parent=...)`` creates a Queue named ``<namespace>-<name>``; removed afterwards."""
    made: list[str] = []

    def make(name: str, **kwargs: Any) -> str:
        full = f"{namespace}-{name}"
        parent = kwargs.pop("parent", None)
        body = queue_body(full, parent=f"{namespace}-{parent}" if parent else None, **kwargs)
        kube.create(queues_path(), body)
        made.append(full)
        return full

    yield make
    for name in reversed(made):
        with contextlib.suppress(ApiError):
            kube.delete(queues_path(name))


@pytest.fixture
def node_pool(gpu_nodes: Callable[..., list[str]], kube: Kube) -> Callable[..., tuple[list[str], dict[str, str]]]:
    """``node_pool(n, gpus=8)`` -> (node names, a node selector matching exactly them)."""

    def make(n: int, **kwargs: Any) -> tuple[list[str], dict[str, str]]:
        names = gpu_nodes(n, **kwargs)
        batch = kube.get(f"/api/v1/nodes/{names[0]}")["metadata"]["labels"][NODE_BATCH_LABEL]
        return names, {NODE_BATCH_LABEL: batch}

    return make


@pytest.fixture
def run_scheduler(control_plane: ControlPlane, namespace: str) -> Iterator[Callable[..., SchedulerOperator]]:
    """``run_scheduler(node_selector=..., **config)`` starts a scheduler in-process; all are stopped at teardown."""
    started: list[SchedulerOperator] = []

    def start(wait_leader: bool = True, **overrides: Any) -> SchedulerOperator:
        op = build_scheduler(operator_config(control_plane, namespace, **overrides)).start()
        started.append(op)
        if wait_leader:
            wait_until("the scheduler to lead and sync", lambda: op.is_leader() and op.synced(), 30)
        return op

    yield start
    for op in started:
        op.stop()


@pytest.fixture
def run_podgrouper(control_plane: ControlPlane, namespace: str) -> Iterator[Callable[..., PodgrouperOperator]]:
    started: list[PodgrouperOperator] = []

    def start(**overrides: Any) -> PodgrouperOperator:
        op = PodgrouperOperator(operator_config(control_plane, namespace, **overrides)).start()
        started.append(op)
        wait_until("the podgrouper to lead and sync", lambda: op.is_leader() and op.synced(), 30)
        return op

    yield start
    for op in started:
        op.stop()

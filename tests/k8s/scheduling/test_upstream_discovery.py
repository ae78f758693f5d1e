"""Upstream gangs on a server that does not serve them: the shipped 1.37 kube-apiserver (``GenericWorkload`` off by
default, so no ``scheduling.k8s.io/v1beta1`` PodGroups). Discovery says so in one log line, no informer is started
for them, and the scheduler schedules KAI gangs as before."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from kai_ray.k8s.base.rest import Kube, serves
from kai_ray.k8s.scheduling import upstream_gangs
from tests.k8s.helpers import bound, make_gang, wait_until

pytestmark = pytest.mark.controlplane


def test_without_the_api_the_scheduler_says_so_once_and_schedules_as_before(
    kube: Kube,
    namespace: str,
    queues: Any,
    node_pool: Any,
    run_scheduler: Any,
    priority_classes: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert not serves(kube, upstream_gangs.VERSION, "podgroups")
    nodes, selector = node_pool(1, gpus=8)
    team = queues("team", gpu_quota=8)
    with caplog.at_level(logging.INFO, logger=upstream_gangs.__name__):
        op = run_scheduler(node_selector=selector)
    lines = [r.getMessage() for r in caplog.records if r.name == upstream_gangs.__name__]
    assert lines == [
        f"upstream gangs: the API server does not serve {upstream_gangs.VERSION} PodGroups (gate GenericWorkload off)"
    ]
    assert not [i for i in op.informers if "upstream" in i.name or "workloads" in i.name]
    names = make_gang(kube, namespace, "g", 2, 4, team)
    placed = wait_until(
        "the KAI gang to be bound", lambda: (lambda b: b if len(b) == 2 else None)(bound(kube, namespace, names)), 60
    )
    assert set(placed.values()) == set(nodes)

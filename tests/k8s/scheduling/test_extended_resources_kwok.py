"""Every resource a pod asks for, on the real API server: KWOK nodes advertise a TPU, an AMD GPU and MIG slices.

Real: the API server, etcd, the Binding subresource and KWOK's nodes, whose allocatable carries the extended
resources as a device plugin would publish them. Fake: the devices themselves (no container runs)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from kai_ray.k8s.base.rest import Kube, podgroups_path, pods_path
from tests.k8s.helpers import bound, condition, pod_body, podgroup, podgroup_body, wait_until

POOL_LABEL = "kai-ray.test/extended-pool"


def _gang(kube: Kube, ns: str, name: str, pods: int, resource: str, amount: str, queue: str) -> list[str]:
    kube.create(podgroups_path(ns), podgroup_body(name, pods, queue))
    names = [f"{name}-{i}" for i in range(pods)]
    for pod in names:
        body = pod_body(pod, 0, group=name)
        body["spec"]["containers"][0]["resources"] = {
            "requests": {"cpu": "1", resource: amount},
            "limits": {resource: amount},
        }
        kube.create(pods_path(ns), body)
    return names


def test_tpu_amd_and_mig_gangs_bind_only_where_the_resource_exists(
    kube: Kube, namespace: str, queues: Any, gpu_nodes: Callable[..., list[str]], run_scheduler: Any
) -> None:
    pool = {POOL_LABEL: uuid.uuid4().hex[:8]}
    cpu_nodes = gpu_nodes(1, gpus=0, labels=pool, prefix="cpu")
    tpu_nodes = gpu_nodes(1, gpus=0, labels=pool, prefix="tpu", extra_resources={"google.com/tpu": "4"})
    amd_nodes = gpu_nodes(1, gpus=0, labels=pool, prefix="amd", extra_resources={"amd.com/gpu": "8"})
    mig_nodes = gpu_nodes(1, gpus=0, labels=pool, prefix="mig", extra_resources={"nvidia.com/mig-1g.10gb": "7"})
    team = queues("team", gpu_quota=-1)
    run_scheduler(node_selector=pool)

    tpu = _gang(kube, namespace, "tpu", 1, "google.com/tpu", "4", team)
    amd = _gang(kube, namespace, "amd", 2, "amd.com/gpu", "4", team)
    mig = _gang(kube, namespace, "mig", 2, "nvidia.com/mig-1g.10gb", "3", team)
    wait_until("all three gangs to be bound", lambda: len(bound(kube, namespace)) == 5, 60)
    where = bound(kube, namespace)
    assert {where[p] for p in tpu} == set(tpu_nodes)
    assert {where[p] for p in amd} == set(amd_nodes)
    assert {where[p] for p in mig} == set(mig_nodes)
    assert not set(where.values()) & set(cpu_nodes)

    # one more TPU gang: the only TPU node is full, and no node could ever hold 8 TPUs
    more = _gang(kube, namespace, "tpu-big", 1, "google.com/tpu", "8", team)
    pg = wait_until(
        "the big TPU gang's Scheduled=False condition",
        lambda: (lambda g: g if (condition(g, "Scheduled") or {}).get("status") == "False" else None)(
            podgroup(kube, namespace, "tpu-big")
        ),
        60,
    )
    assert bound(kube, namespace, more) == {}
    cond = condition(pg, "Scheduled")
    assert cond is not None and "no node has google.com/tpu 8" in cond["message"], cond

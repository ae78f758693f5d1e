"""Ray-native scheduling through the real API server: the scheduler operator's bounded waits (KWOK nodes, real kube-apiserver)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from kai_ray import constants as c
from kai_ray.k8s.base.rest import Kube, pods_path, ray_path
from tests.autoscaler.conftest import OBJECT_STORE
from tests.k8s.helpers import bound, condition, make_gang, podgroup, wait_until

pytestmark = [pytest.mark.raynative, pytest.mark.controlplane]


def _not_ready(kube: Kube, ns: str, name: str) -> None:
    """What a kubelet reports for a container that never starts (KWOK marks pods Ready once, then leaves them)."""
    kube.request(
        "PATCH",
        pods_path(ns, name) + "/status",
        body={"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}]}},
        content_type="application/strategic-merge-patch+json",
    )


def test_a_gang_bound_but_not_ready_past_the_ready_timeout_is_evicted_and_requeued_later(
    kube: Kube, namespace: str, queues: Any, node_pool: Any, run_scheduler: Any, priority_classes: Any
) -> None:
    _, selector = node_pool(1, gpus=8)
    queues("dept")
    team = queues("team", parent="dept")
    run_scheduler(node_selector=selector, ready_timeout=3.0, ready_timeout_backoff=600.0)
    names = make_gang(kube, namespace, "gang", pods=2, gpus=1, queue=team)
    wait_until("the gang to run", lambda: len(bound(kube, namespace, names)) == 2, 30)
    wait_until(
        "KWOK to mark the pods Ready",
        lambda: all(
            any(
                cd.get("type") == "Ready"
                for cd in (kube.get(pods_path(namespace, n)).get("status") or {}).get("conditions") or []
            )
            for n in names
        ),
        30,
    )
    _not_ready(kube, namespace, names[1])
    wait_until("the half-started gang to be evicted", lambda: bound(kube, namespace, names) == {}, 30)
    cond = wait_until("the Evicted condition", lambda: condition(podgroup(kube, namespace, "gang"), "Evicted"))
    assert cond["reason"] == "ReadyTimeout"
    assert "1 of 2 pods are not Ready" in cond["message"]
    ann = wait_until(
        "the requeue time on the PodGroup",
        lambda: (podgroup(kube, namespace, "gang")["metadata"].get("annotations") or {}).get(c.REQUEUE_AFTER),
    )
    assert ann.endswith("Z")


def test_ready_gangs_are_left_alone(
    kube: Kube, namespace: str, queues: Any, node_pool: Any, run_scheduler: Any, priority_classes: Any
) -> None:
    _, selector = node_pool(1, gpus=8)
    queues("dept")
    team = queues("team", parent="dept")
    op = run_scheduler(node_selector=selector, ready_timeout=1.0)
    names = make_gang(kube, namespace, "gang", pods=2, gpus=1, queue=team)
    wait_until("the gang to run", lambda: len(bound(kube, namespace, names)) == 2, 30)
    time.sleep(1.5)  # past the 1 s ready-timeout (a clock, not a wait for a condition)
    cycles = op.cycles
    op.wake()
    wait_until("a cycle after the timeout", lambda: op.cycles > cycles, 30)
    assert len(bound(kube, namespace, names)) == 2
    assert op.last_result is not None and not op.last_result.evictions


def _ray_cluster_object(kube: Kube, ns: str, name: str, port: str) -> None:
    head = {"rayStartParams": {"port": port}, "template": {"spec": {"containers": [{"name": "h", "image": "ray"}]}}}
    body = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name},
        "spec": {"headGroupSpec": head},
    }
    kube.create(ray_path("RayCluster", ns), body)


@pytest.mark.ray
@pytest.mark.slow
def test_the_victim_is_the_cluster_ray_reports_idle(
    kube: Kube,
    namespace: str,
    queues: Any,
    node_pool: Any,
    run_scheduler: Any,
    priority_classes: Any,
    ray_cluster: Any,
    ray_env: Path,
) -> None:
    """Real Ray (a local cluster whose nodes stand for the two head pods: RAY_CLOUD_INSTANCE_ID is the pod name) and a
    real API server: the scheduler reads Ray's idle/busy state from the GCS at the head pod's IP and the RayCluster's
    port, and preempts the idle cluster although KAI's order (newest first) would take the busy one."""
    import ray

    cluster = ray_cluster()
    for pod, res in (("old-0", "old"), ("new-0", "new")):
        cluster.add_node(
            num_cpus=0, resources={res: 1}, object_store_memory=OBJECT_STORE, env_vars={"RAY_CLOUD_INSTANCE_ID": pod}
        )
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    release = ray_env / "release"

    @ray.remote(num_cpus=0, resources={"new": 1})
    def hold() -> None:
        end = time.monotonic() + 120
        while not release.exists() and time.monotonic() < end:
            time.sleep(0.05)

    ref = hold.remote()
    host, _, port = cluster.address.rpartition(":")
    _, selector = node_pool(1, gpus=8)
    queues("dept")
    team = queues("team", parent="dept")
    op = run_scheduler(node_selector=selector, ray_activity_interval=0.5)
    for name in ("old", "new"):  # two equal RayClusters of 4 GPUs; "new" is the newer
        _ray_cluster_object(kube, namespace, name, port)
        make_gang(
            kube, namespace, name, pods=1, gpus=4, queue=team, labels={c.RAY_CLUSTER: name, c.RAY_NODE_TYPE: "head"}
        )
        pod = f"{name}-0"
        wait_until(f"{pod} to run", lambda p=pod: bound(kube, namespace, [p]), 30)
        wait_until(f"KWOK to start {pod}", lambda p=pod: (kube.get(pods_path(namespace, p))["status"]).get("podIP"), 30)
        kube.request(
            "PATCH",
            pods_path(namespace, pod) + "/status",
            body={"status": {"podIP": host, "podIPs": [{"ip": host}]}},
            content_type="application/merge-patch+json",
        )
    keys = {f"{namespace}/old-0", f"{namespace}/new-0"}
    acts = wait_until(
        "Ray's answer for both pods",
        lambda: (
            (a := dict(op.cache.ray_activity))
            and keys <= set(a)
            and a[f"{namespace}/new-0"].idle_seconds == 0
            and a[f"{namespace}/old-0"].idle_seconds > 0
            and a
        ),
        60,
    )
    assert acts[f"{namespace}/old-0"].idle_seconds > 0
    make_gang(kube, namespace, "serve", pods=1, gpus=4, queue=team, priority="inference")
    wait_until("the idle cluster to be preempted", lambda: not bound(kube, namespace, ["old-0"]), 30)
    assert bound(kube, namespace, ["new-0"])
    cond = wait_until("the Evicted condition", lambda: condition(podgroup(kube, namespace, "old"), "Evicted"))
    assert "idle in Ray" in cond["message"]
    wait_until("the service to run", lambda: bound(kube, namespace, ["serve-0"]), 30)
    release.touch()
    ray.get(ref)

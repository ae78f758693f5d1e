"""Draining Ray nodes through the GCS with the preemption reason, on real Ray processes (``ray.cluster_utils.Cluster``).

What is real: Ray 2.x raylets, GCS, workers, actors and tasks on this machine. What stands in for Kubernetes:
``Cluster.remove_node`` plays KubeRay deleting the pod after the shrink (the caller kills the node at the deadline).
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest

from kai_ray.k8s.ray import raygcs
from kai_ray.testing.controlplane.processes import free_port
from tests.autoscaler.conftest import OBJECT_STORE

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def _node(cluster: Any, pod: str, **resources: float) -> Any:
    cpus = resources.pop("CPU", 0)
    return cluster.add_node(
        num_cpus=cpus, resources=resources, object_store_memory=OBJECT_STORE, env_vars={"RAY_CLOUD_INSTANCE_ID": pod}
    )


def test_preemption_drain_moves_work_and_reports_actors_preempted(ray_cluster: Any, ray_env: Path) -> None:
    import ray
    from ray.core.generated import common_pb2

    cluster = ray_cluster()
    pod_a = _node(cluster, "pod-a", actor=1)
    pod_b = _node(cluster, "pod-b", CPU=1, work=1)
    _node(cluster, "pod-idle", idle=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)

    @ray.remote(num_cpus=0)
    class Pinned:
        def node(self) -> str:
            return str(ray.get_runtime_context().get_node_id())

    @ray.remote(num_cpus=0, max_retries=2)
    def long_task(marker: str, release: str) -> str:
        """Runs until ``release`` exists (the node it started on is gone by then)."""
        Path(marker).touch()
        end = time.monotonic() + 120
        while not Path(release).exists() and time.monotonic() < end:
            time.sleep(0.05)
        return str(ray.get_runtime_context().get_node_id())

    @ray.remote(num_cpus=0)
    def where() -> str:
        return str(ray.get_runtime_context().get_node_id())

    actor = Pinned.options(resources={"actor": 1}).remote()
    actor_node = ray.get(actor.node.remote())
    marker = ray_env / "started"
    release = ray_env / "release"
    running = long_task.options(resources={"work": 0.5}).remote(str(marker), str(release))
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert time.monotonic() < deadline, "the long task never started"
        time.sleep(0.1)
    _node(cluster, "pod-d", CPU=1, work=1)  # where moved work can go
    cluster.wait_for_nodes()

    grace = 4.0
    t0 = time.monotonic()
    out = raygcs.drain_ray_nodes(cluster.gcs_address, ["pod-a", "pod-b", "pod-idle"], "kai-ray: reclaimed", grace)
    drain_latency = time.monotonic() - t0
    drain_at = time.time()
    by_pod = {o.pod: o for o in out}
    assert {o.status for o in out} == {raygcs.ACCEPTED}, out
    assert by_pod["pod-a"].node_id == actor_node
    draining = ray._private.state.state.get_draining_nodes()
    assert {by_pod["pod-a"].node_id, by_pod["pod-b"].node_id} <= set(draining)  # the idle one may be gone already
    print(f"\ndrain_ray_nodes for 3 pods: {drain_latency * 1000:.0f} ms")

    # A draining node takes no new work: b has room for this task but it lands on d.
    d_node = ray.get(where.options(resources={"work": 0.5}).remote(), timeout=60)
    assert d_node not in {by_pod["pod-b"].node_id, by_pod["pod-a"].node_id}

    # The idle node exits by itself (usually well before the deadline: the figure is printed, not asserted, since a
    # loaded machine may take longer); the busy ones do not exit by themselves, even past the deadline.
    left = raygcs.wait_drained(cluster.gcs_address, [by_pod["pod-idle"].node_id], drain_at + 120)
    idle_exit = time.time() - drain_at
    assert not left, "the idle drained node never exited"
    busy = [by_pod["pod-a"].node_id, by_pod["pod-b"].node_id]
    left = raygcs.wait_drained(cluster.gcs_address, busy, max(time.time(), drain_at + grace) + 0.5)
    assert set(left) == set(busy)  # an actor and a running task keep them up until KubeRay deletes the pods
    print(f"idle drained node exited after {idle_exit:.1f} s; busy ones held past the {grace:.0f} s deadline")

    # KubeRay deletes the pods after the deadline: the nodes die.
    cluster.remove_node(pod_a)
    cluster.remove_node(pod_b)
    with pytest.raises(ray.exceptions.RayActorError) as err:
        ray.get(actor.node.remote(), timeout=60)
    assert err.value.preempted, str(err.value)
    release.touch()
    assert ray.get(running, timeout=120) == d_node  # retried on the node that was not drained
    dead = {n["NodeID"]: n for n in ray.nodes() if not n["Alive"]}
    preempted = common_pb2.NodeDeathInfo.Reason.Value("AUTOSCALER_DRAIN_PREEMPTED")
    assert dead[by_pod["pod-a"].node_id]["DeathReason"] == preempted
    assert dead[by_pod["pod-a"].node_id]["DeathReasonMessage"].startswith("kai-ray: reclaimed")


def test_pods_without_a_ray_node_are_reported_not_drained(ray_cluster: Any) -> None:
    cluster = ray_cluster()
    _node(cluster, "pod-a", actor=1)
    cluster.wait_for_nodes()
    out = raygcs.drain_ray_nodes(cluster.gcs_address, ["pod-a", "no-such-pod"], "kai-ray: test", 1.0)
    assert [(o.pod, o.status) for o in out] == [("pod-a", raygcs.ACCEPTED), ("no-such-pod", raygcs.NOT_FOUND)]


def test_unreachable_gcs_returns_fast(ray_env: Path) -> None:
    t0 = time.monotonic()
    out = raygcs.drain_ray_nodes(f"127.0.0.1:{free_port()}", ["p1", "p2"], "kai-ray: test", 30, timeout_s=2)
    took = time.monotonic() - t0
    assert [o.status for o in out] == [raygcs.UNREACHABLE] * 2
    assert "unreachable" in out[0].message and took < 3, took

    # Something listens but never answers (a hung GCS): bounded by the timeout too.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        t0 = time.monotonic()
        out = raygcs.drain_ray_nodes(f"127.0.0.1:{silent.getsockname()[1]}", ["p1"], "kai-ray: test", 30, timeout_s=1)
        took = time.monotonic() - t0
    assert [o.status for o in out] == [raygcs.UNREACHABLE]
    assert took < 4, took
    print(f"\nunreachable GCS: answered in {took:.1f} s")

"""Ray-native scheduling: Ray's own idle/busy answer per Ray node (the GCS autoscaler state) as the scheduler's snapshot facts.

Real Ray processes (``ray.cluster_utils.Cluster``): a node running a task is busy, one running nothing is idle."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from kai_ray.k8s.ray.raygcs import ActivityTracker, ray_node_activity
from tests.autoscaler.conftest import OBJECT_STORE
from tests.k8s.helpers import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.raynative]


def test_a_busy_node_and_an_idle_node_as_ray_reports_them(ray_cluster: Any, ray_env: Path) -> None:
    import ray

    cluster = ray_cluster()
    for pod, res in (("pod-busy", "busy"), ("pod-idle", "idle")):
        cluster.add_node(
            num_cpus=0, resources={res: 1}, object_store_memory=OBJECT_STORE, env_vars={"RAY_CLOUD_INSTANCE_ID": pod}
        )
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    release = ray_env / "release"
    started = ray_env / "started"

    @ray.remote(num_cpus=0, resources={"busy": 1})
    def hold() -> None:
        started.touch()
        end = time.monotonic() + 120
        while not release.exists() and time.monotonic() < end:
            time.sleep(0.05)

    ref = hold.remote()
    wait_until("the task to run", started.exists, 60)
    tracker = ActivityTracker()

    def answer() -> dict[str, Any] | None:
        nodes = ray_node_activity(cluster.address)
        if nodes is None:
            return None
        acts = tracker.update(time.time(), ["pod-busy", "pod-idle"], nodes)
        ok = set(acts) == {"pod-busy", "pod-idle"} and acts["pod-idle"].idle_seconds > 0
        return acts if ok and acts["pod-busy"].idle_seconds == 0 else None

    acts = wait_until("Ray to report one node busy and one idle", answer, 60, interval=0.5)
    busy_since = acts["pod-busy"].busy_since  # unknown if busy at the first answer, else when it was seen turning busy
    assert busy_since is None or busy_since <= time.time()
    release.touch()
    ray.get(ref)
    acts = wait_until(
        "the busy node to turn idle",
        lambda: (
            (a := answer_all(cluster.address, tracker)) and a.get("pod-busy") and a["pod-busy"].idle_seconds > 0 and a
        ),
        60,
        interval=0.5,
    )
    assert acts["pod-idle"].idle_seconds > 0


def answer_all(address: str, tracker: ActivityTracker) -> dict[str, Any] | None:
    nodes = ray_node_activity(address)
    return None if nodes is None else tracker.update(time.time(), ["pod-busy", "pod-idle"], nodes)


def test_an_unreachable_gcs_is_no_answer() -> None:
    assert ray_node_activity("127.0.0.1:9", timeout_s=1.0) is None


def test_the_tracker_remembers_when_a_node_turned_busy() -> None:
    t = ActivityTracker()
    assert t.observe("p", 100.0, 0).busy_since is None  # busy when first seen
    assert t.observe("p", 110.0, 5000).idle_seconds == 5.0
    assert t.observe("p", 120.0, 0).busy_since == 120.0
    assert t.observe("p", 130.0, 0).busy_since == 120.0
    t.forget([])
    assert t.observe("p", 140.0, 0).busy_since is None

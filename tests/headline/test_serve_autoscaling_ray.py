"""The headline's Serve app autoscales on real Ray as the shipped RayService configures it: client load takes it from
``min_replicas`` to ``max_replicas``, and it goes back when the load stops.

What is real: a Ray head and two worker nodes with one logical GPU each (the RayService's ``gpu`` group at its
``maxReplicas``), Ray Serve's controller, autoscaler and HTTP proxy, the app imported from ``PYTHONPATH`` with the
deployment options of ``serveConfigV2`` (``ray_actor_options`` and ``autoscaling_config``), HTTP clients. What stands
in: local Ray nodes for the RayService's pods (no Kubernetes here), both workers already up (on a cluster Ray's
autoscaler adds the second when kai-ray's hook finds headroom: tests/autoscaler and the real-node lane check that
part), the proxy on 127.0.0.1, and Serve's delays shortened so the test takes seconds, not minutes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import pytest

from tests.autoscaler.conftest import OBJECT_STORE
from tests.headline.serve_load import (
    APP,
    QUIET,
    SHORT_DELAYS,
    Load,
    free_port,
    running_replicas,
    seconds_until,
    serve_environment,
    shipped_deployment,
)

pytestmark = [pytest.mark.ray, pytest.mark.slow]

LOAD_BOUND_S = 150.0


def test_load_grows_serve_to_max_replicas_and_it_shrinks_back_when_load_stops(
    ray_cluster: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray
    from ray import serve

    serve_environment(monkeypatch, fast_metrics=True)
    serve_app = importlib.import_module("serve_app")
    shipped = shipped_deployment()
    scaling = {**shipped["autoscaling_config"], **SHORT_DELAYS}
    low, high = scaling["min_replicas"], scaling["max_replicas"]
    assert low < high

    cluster = ray_cluster()
    for _ in range(high):  # one GPU worker per replica, as the RayService's group at maxReplicas
        cluster.add_node(num_cpus=0, num_gpus=1, object_store_memory=OBJECT_STORE)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    try:
        serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
        deployment = serve_app.Classifier.options(
            ray_actor_options=shipped["ray_actor_options"], autoscaling_config=scaling, logging_config=QUIET
        )
        serve.run(deployment.bind(), name=APP, route_prefix="/", blocking=False)
        seconds_until(f"{low} running replica(s)", lambda: running_replicas(serve) == low, 180)
        warm = Load(url, threads=1, seconds=60, max_requests=1, retries=50, backoff_s=0.1).start()
        assert warm.stop().ok == 1, "the proxy never routed a request"
        assert running_replicas(serve) == low

        # Enough clients, each sending a small batch, to keep more than target_ongoing_requests on one replica.
        load = Load(url, threads=3 * high * int(scaling["target_ongoing_requests"]), seconds=LOAD_BOUND_S, rows=64)
        load.start()
        try:
            grew = seconds_until(f"{high} running replicas under load", lambda: running_replicas(serve) == high, 120)
        finally:
            under_load = load.stop()
        shrank = seconds_until(f"back to {low} replica(s) without load", lambda: running_replicas(serve) == low, 120)
        assert not under_load.failed, under_load.failed[:5]
        print(
            f"\nServe autoscaling {low}->{high}->{low}: grew {grew:.1f}s after the load began, shrank {shrank:.1f}s "
            f"after it stopped; {under_load.ok} requests, p50 {under_load.percentile(50) * 1000:.0f} ms, "
            f"p99 {under_load.percentile(99) * 1000:.0f} ms, {under_load.retries} retries, 0 failed"
        )
    finally:
        serve.shutdown()

"""The headline's Ray Serve app (``examples/headline/serve_app.py``) deployed on real Ray, answering HTTP.

What is real: a Ray head and a worker node with one logical GPU (the RayService's ``gpu`` worker), Ray Serve's
controller and HTTP proxy, the app imported by module name from ``PYTHONPATH`` as the RayService's
``import_path: serve_app:app`` does, with the actor options its ``serveConfigV2`` sets. What stands in: the HTTP
proxy listens on 127.0.0.1 instead of behind the RayService's Kubernetes Service.
"""

from __future__ import annotations

import importlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray.testing.controlplane.processes import free_port
from tests.autoscaler.conftest import OBJECT_STORE

pytestmark = [pytest.mark.ray, pytest.mark.slow]

HEADLINE = Path(__file__).resolve().parents[2] / "examples" / "headline"


def _serve_deployment_options() -> dict[str, Any]:
    """The actor options the shipped RayService gives the app's deployment."""
    svc = yaml.safe_load((HEADLINE / "rayservice-cpu.yaml").read_text())
    (application,) = yaml.safe_load(svc["spec"]["serveConfigV2"])["applications"]
    assert application["import_path"] == "serve_app:app"
    (deployment,) = application["deployments"]
    return dict(deployment["ray_actor_options"])


def _post(url: str, body: Any, deadline: float) -> dict[str, Any]:
    """POST (GET when ``body`` is None) until the proxy routes to a running replica (it answers 503/404 while the app
    is starting, and a loaded machine may have it restarting)."""
    data = None if body is None else json.dumps(body).encode()
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=10) as resp:
                answer: dict[str, Any] = json.loads(resp.read())
                return answer
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            last = exc
            time.sleep(0.2)
    pytest.fail(f"no answer from {url}: {last}")


def test_the_classifier_answers_http_on_the_gpu_worker(
    ray_cluster: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray
    from ray import serve

    monkeypatch.setenv("PYTHONPATH", str(HEADLINE))  # what the RayService's pods get; Ray's workers inherit it
    # Serve's proxy checks (5 s ready, 10 s health) fail on a loaded 2-core CI machine and restart the proxy mid-test
    monkeypatch.setenv("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", "60")
    monkeypatch.setenv("RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S", "60")
    monkeypatch.syspath_prepend(str(HEADLINE))
    serve_app = importlib.import_module("serve_app")
    options = _serve_deployment_options()
    assert options == {"num_cpus": 0, "num_gpus": 1}

    cluster = ray_cluster()
    worker = cluster.add_node(num_cpus=0, num_gpus=1, object_store_memory=OBJECT_STORE)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    port = free_port()
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        t0 = time.monotonic()
        serve.run(serve_app.Classifier.options(ray_actor_options=options).bind(), name="classifier", route_prefix="/")
        answer = _post(f"http://127.0.0.1:{port}/", {"features": [5.1, 3.5, 1.4, 0.2]}, time.monotonic() + 120)
        first_answer = time.monotonic() - t0
        (prediction,) = answer["predictions"]
        weights, bias = serve_app.model()
        assert prediction == serve_app.predict(weights, bias, [[5.1, 3.5, 1.4, 0.2]])[0]
        assert abs(sum(prediction["scores"]) - 1) < 1e-5

        info = _post(f"http://127.0.0.1:{port}/", None, time.monotonic() + 60)
        assert info["node"] == worker.node_id  # the replica holds the worker's GPU, as on the RayService
        bad = _post(f"http://127.0.0.1:{port}/", {"rows": []}, time.monotonic() + 30)
        assert "expected" in bad["error"]
        print(f"\nserve.run to first answer: {first_answer:.1f} s")
    finally:
        serve.shutdown()

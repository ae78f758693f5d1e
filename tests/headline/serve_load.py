"""Client load on the headline's Serve app, as a RayService's clients would send it, and the app deployed as the
shipped ``serveConfigV2`` configures it.

The load is bounded twice (a few threads, each stopping at a wall-clock end or on ``stop()``, and at most
``max_requests`` each) so a test never loops forever on a loaded machine. A request is retried, a bounded number of
times, on what a well-behaved client retries: 503 (no replica ready, the proxy draining), a reset or refused
connection, a timeout. A request that still fails after its retries counts as failed.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray.testing.controlplane.processes import free_port as free_port  # the tests' one source of ports
from tests.k8s.helpers import wait_until

HEADLINE = Path(__file__).resolve().parents[2] / "examples" / "headline"
ROW = [5.1, 3.5, 1.4, 0.2]
RETRIABLE_STATUS = (502, 503, 504)
APP, DEPLOYMENT = "classifier", "Classifier"
QUIET = {"enable_access_log": False}  # thousands of requests: no access-log line for each in the test's output
# Serve's defaults wait 30 s to upscale and 600 s to downscale on metrics pushed every 10 s; the test keeps the
# shipped range and target and shortens the waits. Ray 2.60 deprecates ``metrics_interval_s`` for the two push-interval
# environment variables but still wants it below ``look_back_period_s``: both are set.
SHORT_DELAYS = {"upscale_delay_s": 1.0, "downscale_delay_s": 3.0, "look_back_period_s": 2.0, "metrics_interval_s": 0.5}
METRIC_PUSH_S = {
    "RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S": "0.5",
    "RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S": "0.5",
}


def serve_environment(monkeypatch: pytest.MonkeyPatch, fast_metrics: bool = False) -> None:
    """What the RayService's pods get (the app on ``PYTHONPATH``, which Ray's workers inherit), proxy checks patient
    enough for a loaded 2-core CI machine (no proxy restarts), and, for the autoscaling tests, Serve's metrics pushed
    every 0.5 s."""
    monkeypatch.setenv("PYTHONPATH", str(HEADLINE))
    monkeypatch.setenv("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", "60")
    monkeypatch.setenv("RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S", "60")
    for name, value in (METRIC_PUSH_S if fast_metrics else {}).items():
        monkeypatch.setenv(name, value)
    monkeypatch.syspath_prepend(str(HEADLINE))


def running_replicas(serve: Any) -> int:
    app = serve.status().applications.get(APP)
    if app is None or DEPLOYMENT not in app.deployments:
        return 0
    return int(app.deployments[DEPLOYMENT].replica_states.get("RUNNING", 0))


def seconds_until(what: str, check: Callable[[], bool], timeout: float, poll: float = 0.25) -> float:
    """Seconds until ``check()`` held (a figure the tests report); fails after ``timeout``."""
    t0 = time.monotonic()
    wait_until(what, check, timeout, poll)
    return time.monotonic() - t0


def shipped_deployment() -> dict[str, Any]:
    """The app's one deployment as ``examples/headline/rayservice-cpu.yaml`` configures it."""
    svc = yaml.safe_load((HEADLINE / "rayservice-cpu.yaml").read_text())
    (application,) = yaml.safe_load(svc["spec"]["serveConfigV2"])["applications"]
    assert application["import_path"] == "serve_app:app"
    (deployment,) = application["deployments"]
    return dict(deployment)


@dataclass
class Request:
    started: float  # monotonic
    seconds: float  # client-perceived, retries included
    retries: int
    ok: bool
    error: str = ""


@dataclass
class LoadResult:
    requests: list[Request] = field(default_factory=list)

    @property
    def ok(self) -> int:
        return sum(r.ok for r in self.requests)

    @property
    def failed(self) -> list[Request]:
        return [r for r in self.requests if not r.ok]

    @property
    def retries(self) -> int:
        return sum(r.retries for r in self.requests)

    def between(self, start: float, end: float) -> LoadResult:
        """The requests started in [start, end] (monotonic seconds)."""
        return LoadResult([r for r in self.requests if start <= r.started <= end])

    def percentile(self, q: float) -> float:
        """The ``q``-th percentile (0-100) of the successful requests' latency, nearest rank; 0 when none."""
        lat = sorted(r.seconds for r in self.requests if r.ok)
        if not lat:
            return 0.0
        rank = max(1, min(len(lat), int(-(-q * len(lat) // 100))))
        return lat[rank - 1]


class Load:
    """``threads`` clients POSTing ``rows`` feature rows to ``url`` until ``seconds`` pass or :meth:`stop`."""

    def __init__(
        self,
        url: str,
        *,
        threads: int,
        seconds: float,
        rows: int = 1,
        retries: int = 5,
        backoff_s: float = 0.2,
        timeout_s: float = 30.0,
        max_requests: int = 20_000,
    ) -> None:
        self.url, self.threads, self.seconds = url, threads, seconds
        self.body = json.dumps({"features": [ROW] * rows}).encode()
        self.retries, self.backoff_s, self.timeout_s, self.max_requests = retries, backoff_s, timeout_s, max_requests
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._workers: list[threading.Thread] = []
        self.result = LoadResult()

    def _attempt(self) -> str | None:
        """None when the app answered with predictions; otherwise why not, prefixed ``retry:`` when retriable."""
        req = urllib.request.Request(self.url, data=self.body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                answer = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return f"{'retry:' if exc.code in RETRIABLE_STATUS else ''}HTTP {exc.code}"
        except (urllib.error.URLError, ConnectionError, TimeoutError, http.client.HTTPException) as exc:
            return f"retry:{type(exc).__name__}: {exc}"
        return None if "predictions" in answer else f"bad answer: {answer}"

    def _one(self) -> Request:
        t0 = time.monotonic()
        retries = 0
        while True:
            why = self._attempt()
            if why is None:
                return Request(t0, time.monotonic() - t0, retries, True)
            if not why.startswith("retry:") or retries >= self.retries:
                return Request(t0, time.monotonic() - t0, retries, False, why)
            retries += 1
            time.sleep(self.backoff_s * retries)

    def _client(self, end: float) -> None:
        for _ in range(self.max_requests):
            if self._stop.is_set() or time.monotonic() >= end:
                return
            done = self._one()
            with self._lock:
                self.result.requests.append(done)

    def start(self) -> Load:
        end = time.monotonic() + self.seconds
        for i in range(self.threads):
            t = threading.Thread(target=self._client, args=(end,), name=f"serve-load-{i}", daemon=True)
            t.start()
            self._workers.append(t)
        return self

    def stop(self) -> LoadResult:
        """Stop sending and wait for the requests in flight (each bounded by its timeout and retries)."""
        self._stop.set()
        bound = (self.timeout_s + self.backoff_s * self.retries) * (self.retries + 1) + 5
        for t in self._workers:
            t.join(bound)
        with self._lock:
            return LoadResult(list(self.result.requests))

    def snapshot(self) -> LoadResult:
        with self._lock:
            return LoadResult(list(self.result.requests))

"""The optional Prometheus usage source (``--usage-db=prometheus``): KAI's query against a Prometheus HTTP API.

The Prometheus here is a tiny HTTP server on 127.0.0.1 that answers ``/api/v1/query`` in Prometheus' response shape
(what cannot run here is Prometheus itself, with KAI's queue metrics in it); it records the PromQL it was asked so the
test can hold the queries to KAI's (metric names, window, resolution, decay).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from kai_ray.cli import CliError
from kai_ray.cli.operator import parse_args
from kai_ray.k8s.usagedb import PrometheusClient, PrometheusUsage, UsageSourceError, make_source
from kai_ray.scheduler.snapshot import Resources
from kai_ray.scheduler.usage import UsageParams

NOW = 1_767_571_200.0 + 5 * 3600  # 2026-01-05T05:00:00Z


class FakePrometheus:
    """Answers instant queries: capacity sums, and per-queue allocation sums labelled ``queue_name``."""

    def __init__(self) -> None:
        self.queries: list[str] = []
        self.fail: str | None = None
        self.capacity = {"nvidia_com_gpu": 160.0, '"cpu"': 1000.0, '"memory"': 1e12}
        self.allocated = {"kai_queue_allocated_gpus": {"team-a": 40.0, "team-b": 120.0}}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urlparse(self.path)
                query = parse_qs(url.query).get("query", [""])[0]
                outer.queries.append(query)
                if url.path != "/api/v1/query":
                    self._send(404, {"status": "error", "errorType": "not_found", "error": url.path})
                elif outer.fail is not None:
                    self._send(400, {"status": "error", "errorType": "bad_data", "error": outer.fail})
                else:
                    self._send(
                        200, {"status": "success", "data": {"resultType": "vector", "result": outer.rows(query)}}
                    )

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def rows(self, query: str) -> list[dict[str, Any]]:
        if "kube_node_status_capacity" in query:
            return [{"metric": {}, "value": [NOW, str(v)]} for k, v in self.capacity.items() if k in query]
        for metric, per_queue in self.allocated.items():
            if metric in query:
                return [{"metric": {"queue_name": q}, "value": [NOW, str(v)]} for q, v in per_queue.items()]
        return []

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def prom() -> Iterator[FakePrometheus]:
    p = FakePrometheus()
    yield p
    p.close()


def test_usage_is_each_queues_sum_over_the_capacity_sum(prom: FakePrometheus) -> None:
    client = PrometheusClient(prom.url, UsageParams())
    usage = client.usage(NOW)
    assert usage == {"team-a": (0.25, 0.0, 0.0), "team-b": (0.75, 0.0, 0.0)}
    # KAI's queries: sliding window of windowSize at the 1m resolution, no decay by default
    assert 'sum_over_time((sum(kube_node_status_capacity{resource="nvidia_com_gpu"}))[604800s:60s])' in prom.queries
    assert "sum_over_time((kai_queue_allocated_gpus)[604800s:60s])" in prom.queries
    assert any("kai_queue_allocated_cpu_cores" in q for q in prom.queries)
    assert any("kai_queue_allocated_memory_bytes" in q for q in prom.queries)


def test_decay_tumbling_window_and_metric_overrides(prom: FakePrometheus) -> None:
    prom.allocated = {"my_gpus": {"team-a": 80.0}}
    start = NOW - 5 * 3600 - 86400.0  # the windows reset every day from here: the current one began 5 h ago
    params = UsageParams(
        window_type="tumbling", window_size=86400.0, half_life_period=600.0, tumbling_window_start_time=start
    )
    client = PrometheusClient(prom.url, params, {"gpuAllocationMetric": "my_gpus", "queryResolution": "30s"})
    assert client.usage(NOW) == {"team-a": (0.5, 0.0, 0.0)}
    # KAI's decay factor, and a window from the last tumbling reset (5 h ago) up to now
    decay = f"0.5^(({int(NOW)} - time()) / 600.000000)"
    assert f"sum_over_time((((my_gpus) * ({decay})))[18000s:30s])" in prom.queries


def test_errors_keep_the_last_good_answer(prom: FakePrometheus) -> None:
    source = PrometheusUsage(prom.url, UsageParams(), clock=lambda: NOW)
    assert source.fetch_once()
    before = source.before_cycle(NOW, {})
    assert before == {"team-a": Resources(0.25, 0, 0), "team-b": Resources(0.75, 0, 0)}
    prom.fail = 'invalid parameter "query": parse error'
    assert not source.fetch_once()
    assert source.last_error is not None and "bad_data" in source.last_error
    assert source.before_cycle(NOW + 600, {}) == before  # stale, still used (KAI does the same)
    with pytest.raises(UsageSourceError, match="no data for the gpu capacity"):
        prom.fail = None
        prom.capacity = {}
        PrometheusClient(prom.url, UsageParams()).usage(NOW)


def test_unreachable_prometheus_is_an_error_not_a_crash() -> None:
    source = make_source("prometheus", UsageParams(), "http://127.0.0.1:9")
    assert isinstance(source, PrometheusUsage)
    assert not source.fetch_once()
    assert source.before_cycle(NOW, {}) == {}


@pytest.mark.parametrize(
    "args,flag",
    [
        (["--usage-db=influx"], "--usage-db"),
        (["--usage-db=prometheus"], "--usage-db-url"),
        (["--usage-db=prometheus", "--usage-db-url=http://p:9090", "--usage-extra-param=gpuMetric=x"], "--usage-extra"),
        (["--usage-db=internal", "--usage-extra-param=queryResolution=1m"], "--usage-extra-param"),
        (["--usage-db=internal", "--usage-window-size=a-week"], "--usage-window-size"),
        (["--usage-db=internal", "--usage-window-type=cron"], "--usage-cron-string"),
        (["--usage-db=internal", "--usage-tumbling-window-start-time=monday"], "--usage-tumbling-window-start-time"),
        (["--k-value=-0.5"], "--k-value"),
    ],
)
def test_bad_usage_flags_name_the_flag(args: list[str], flag: str) -> None:
    with pytest.raises(CliError, match=f"^{flag}"):
        parse_args("scheduler", args)

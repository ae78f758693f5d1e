"""The scheduler operator's usage source for time-based fair share (KAI's ``usageDBConfig.clientType``).

``internal`` (kai-ray's own, no Prometheus): the leader feeds every cycle's queue allocations and the nodes' capacity
to a :class:`~kai_ray.scheduler.usage.UsageLedger` and persists the ledger in the Queue status, so the history
survives a restart and a change of leader. Each queue keeps its own series in ``status.usageLedger``; top-level
queues also carry the cluster's capacity series (``status.usageLedger.capacity``) that every usage is normalised
by. A new leader restores the ledger from the statuses it lists and fills the gap since the last write with the
levels recorded then (the pods kept running while no scheduler watched). Writes ride on the Queue status writes the
scheduler makes anyway (``queues/status`` patch, already in its RBAC), at most once per ``fetchInterval`` per queue,
and only for queues whose record changed: an idle queue's record stays valid as it is.

``prometheus``: KAI's own query against a Prometheus the user already runs (KAI's queue metrics and
kube-state-metrics), polled every ``fetchInterval`` in the background, as KAI's scheduler does.

Both make ``status.usage`` (normalised usage per resource, the ``U'`` the division used; written by
:func:`kai_ray.k8s.scheduling.status.queue_status`) appear next to ``status.fairShare``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any, Protocol

from kai_ray.durations import parse_duration
from kai_ray.scheduler.decisions import CycleResult
from kai_ray.scheduler.snapshot import Node, Resources
from kai_ray.scheduler.usage import UsageLedger, UsageParams, Vec

log = logging.getLogger(__name__)

LEDGER_FIELD = "usageLedger"
CLIENT_TYPES = ("none", "internal", "prometheus")

# KAI's defaults for the Prometheus client (usageDBConfig.usageParams.extraParams overrides them)
PROMETHEUS_DEFAULTS = {
    "gpuAllocationMetric": "kai_queue_allocated_gpus",
    "cpuAllocationMetric": "kai_queue_allocated_cpu_cores",
    "memoryAllocationMetric": "kai_queue_allocated_memory_bytes",
    "gpuCapacityMetric": 'sum(kube_node_status_capacity{resource="nvidia_com_gpu"})',
    "cpuCapacityMetric": 'sum(kube_node_status_capacity{resource="cpu"})',
    "memoryCapacityMetric": 'sum(kube_node_status_capacity{resource="memory"})',
    "queryResolution": "1m",
    "usageQueryTimeout": "10s",
}
QUEUE_LABEL = "queue_name"


class UsageSourceError(RuntimeError):
    """The usage source could not answer (Prometheus down, a bad query); the last good data stays in use."""


class UsageSource(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...

    def before_cycle(self, now: float, statuses: Mapping[str, Mapping[str, Any]]) -> dict[str, Resources]: ...

    def after_cycle(self, now: float, capacity: Vec, result: CycleResult) -> None: ...

    def ledger_status(self, name: str, top_level: bool) -> dict[str, Any] | None: ...

    def forget(self) -> None: ...


class InternalUsage:
    """kai-ray's own accounting (``clientType: internal``), persisted in the Queue status. Used by the leader only;
    :meth:`forget` when leadership is lost (the next leader, maybe this one again, restores from the statuses)."""

    def __init__(self, params: UsageParams) -> None:
        self.params = params
        self.ledger: UsageLedger | None = None
        self.current: dict[str, Resources] = {}
        self._refreshed: float | None = None
        self._persisted_at: float | None = None
        self._records: dict[str, dict[str, Any]] = {}
        self._cluster: dict[str, Any] | None = None

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def forget(self) -> None:
        self.ledger = None
        self._refreshed = self._persisted_at = None
        self._records = {}
        self._cluster = None

    def restore(self, statuses: Mapping[str, Mapping[str, Any]]) -> UsageLedger:
        """The ledger from the queues' ``status.usageLedger`` records (the newest capacity record wins)."""
        records: dict[str, Mapping[str, Any]] = {}
        cluster: Mapping[str, Any] | None = None
        for name, status in statuses.items():
            rec = (status or {}).get(LEDGER_FIELD)
            if not isinstance(rec, Mapping):
                continue
            records[name] = rec
            cap = rec.get("capacity")
            if isinstance(cap, Mapping) and (cluster is None or _time(cap) > _time(cluster)):
                cluster = cap
        ledger, problems = UsageLedger.restore(self.params, cluster, records)
        for line in problems:
            log.warning("usage history: %s", line)
        if ledger.capacity is not None:
            log.info(
                "usage history restored for %d queues (recorded up to %s)", len(ledger.queues), ledger.capacity.time
            )
        self._records = {
            n: {k: v for k, v in r.items() if k != "capacity"} for n, r in records.items() if n in ledger.queues
        }
        return ledger

    def before_cycle(self, now: float, statuses: Mapping[str, Mapping[str, Any]]) -> dict[str, Resources]:
        ledger = self.ledger  # forget() may run on the elector's thread: work on one ledger throughout
        if ledger is None:
            ledger = self.ledger = self.restore(statuses)
        if self._refreshed is None or now - self._refreshed >= self.params.fetch_interval:
            if ledger.capacity is not None:
                self.current = {q: Resources(*u) for q, u in ledger.usage(now).items()}
            self._refreshed = now
        return self.current

    def after_cycle(self, now: float, capacity: Vec, result: CycleResult) -> None:
        ledger = self.ledger
        if ledger is None:
            return
        allocated = {name: _vec(qs.allocated) for name, qs in result.queues.items()}
        ledger.observe(now, allocated, capacity)
        if self._persisted_at is None or now - self._persisted_at >= self.params.fetch_interval:
            self._persist_view(ledger)
            self._persisted_at = now

    def _persist_view(self, ledger: UsageLedger) -> None:
        ledger.forget_empty()
        records: dict[str, dict[str, Any]] = {}
        for name in ledger.queues:
            prev = self._records.get(name)
            rec = ledger.queue_state(name)
            if rec is None:
                continue
            if prev is not None and _idle(prev) and _idle(rec) and prev.get("params") == rec.get("params"):
                rec = prev  # an idle queue's old record still restores to the same history: no write
            records[name] = rec
        self._records = records
        self._cluster = ledger.cluster_state()

    def ledger_status(self, name: str, top_level: bool) -> dict[str, Any] | None:
        rec = self._records.get(name)
        if rec is None and not (top_level and self._cluster is not None):
            return None
        out = dict(rec) if rec is not None else {"params": self.params.fingerprint(), "time": 0.0, "level": [0, 0, 0]}
        out.setdefault("buckets", [])
        if top_level and self._cluster is not None:
            out["capacity"] = self._cluster
        return out


def _idle(rec: Mapping[str, Any]) -> bool:
    return all(float(x) == 0.0 for x in rec.get("level") or ())


def _time(rec: Mapping[str, Any]) -> float:
    try:
        return float(rec.get("time") or 0.0)
    except (TypeError, ValueError):
        return 0.0


def _vec(values: Mapping[str, float]) -> Vec:
    return (float(values.get("gpu", 0.0)), float(values.get("cpu", 0.0)), float(values.get("memory", 0.0)))


# --- Prometheus -------------------------------------------------------------------------------------------------


class PrometheusUsage:
    """KAI's Prometheus usage client (``clientType: prometheus``): polls in the background every ``fetchInterval``;
    the scheduler uses the last good answer, logging when it is older than ``stalenessPeriod`` (as KAI does)."""

    def __init__(
        self,
        url: str,
        params: UsageParams,
        extra: Mapping[str, str] | None = None,
        clock: Any = time.time,
    ) -> None:
        self.client = PrometheusClient(url, params, extra)
        self.params = params
        self.clock = clock
        self.current: dict[str, Resources] = {}
        self.fetched_at: float | None = None
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._warned_stale = False

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="usage-prometheus", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def forget(self) -> None:
        pass

    def _run(self) -> None:
        while not self._stop.is_set():
            self.fetch_once()
            self._stop.wait(self.params.fetch_interval)

    def fetch_once(self) -> bool:
        now = float(self.clock())
        try:
            usage = self.client.usage(now)
        except UsageSourceError as exc:
            if str(exc) != self.last_error:
                log.warning("usage from Prometheus: %s (the last good data stays in use)", exc)
            self.last_error = str(exc)
            return False
        with self._lock:
            self.current = {q: Resources(*u) for q, u in usage.items()}
            self.fetched_at = now
            self.last_error = None
            self._warned_stale = False
        return True

    def before_cycle(self, now: float, statuses: Mapping[str, Mapping[str, Any]]) -> dict[str, Resources]:
        with self._lock:
            stale = self.fetched_at is not None and now - self.fetched_at > self.params.staleness_period
            if stale and not self._warned_stale and self.fetched_at is not None:
                log.warning("usage data is stale: last fetched %.0fs ago", now - self.fetched_at)
                self._warned_stale = True
            return dict(self.current)

    def after_cycle(self, now: float, capacity: Vec, result: CycleResult) -> None:
        pass

    def ledger_status(self, name: str, top_level: bool) -> dict[str, Any] | None:
        return None


class PrometheusClient:
    """KAI's usage query over Prometheus' HTTP API (``/api/v1/query``): per resource, the decayed ``sum_over_time``
    of each queue's allocation metric in the window, over the same sum of the capacity metric."""

    def __init__(self, url: str, params: UsageParams, extra: Mapping[str, str] | None = None) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"connectionString: {url!r} is not an http(s) URL of Prometheus")
        unknown = set(extra or {}) - set(PROMETHEUS_DEFAULTS)
        if unknown:
            raise ValueError(f"extraParams.{sorted(unknown)[0]}: unknown (known: {', '.join(PROMETHEUS_DEFAULTS)})")
        self.url = url.rstrip("/")
        self.params = params
        self.extra = {**PROMETHEUS_DEFAULTS, **(extra or {})}
        for key in ("queryResolution", "usageQueryTimeout"):
            if parse_duration(self.extra[key]) is None:
                raise ValueError(f"extraParams.{key}: {self.extra[key]!r} is not a duration")
        self.resolution = parse_duration(self.extra["queryResolution"]) or 60.0
        self.timeout = parse_duration(self.extra["usageQueryTimeout"]) or 10.0
        self._ledger = UsageLedger(params)  # only for the window boundaries (tumbling, cron)

    def window_seconds(self, now: float) -> float:
        if self.params.window_type == "sliding":
            return self.params.window_size
        return max(0.0, now - self._ledger.window_start(now))

    def decayed(self, metric: str, now: float) -> str:
        h = self.params.half_life_period
        if h <= 0:
            return metric
        return f"(({metric}) * (0.5^(({int(now)} - time()) / {h:f})))"

    def query_for(self, metric: str, now: float) -> str:
        window = f"{self.window_seconds(now):.0f}s"
        return f"sum_over_time(({self.decayed(metric, now)})[{window}:{self.resolution:.0f}s])"

    def usage(self, now: float) -> dict[str, Vec]:
        out: dict[str, list[float]] = {}
        for r, res in enumerate(("gpu", "cpu", "memory")):
            cap_rows = self._query(self.query_for(self.extra[f"{res}CapacityMetric"], now), now)
            if not cap_rows:
                raise UsageSourceError(f"no data for the {res} capacity metric {self.extra[f'{res}CapacityMetric']}")
            capacity = cap_rows[0][1]
            for labels, value in self._query(self.query_for(self.extra[f"{res}AllocationMetric"], now), now):
                queue = labels.get(QUEUE_LABEL)
                if not queue:
                    continue
                out.setdefault(queue, [0.0, 0.0, 0.0])[r] = value / capacity if capacity > 0 else 0.0
        return {q: (v[0], v[1], v[2]) for q, v in out.items()}

    def _query(self, promql: str, now: float) -> list[tuple[dict[str, str], float]]:
        qs = urllib.parse.urlencode({"query": promql, "time": f"{now:.3f}"})
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/query?{qs}", timeout=self.timeout) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            try:
                err = json.loads(exc.read())
                detail = f"{err.get('errorType', 'error')}: {err.get('error', '')}"
            except (ValueError, AttributeError):
                detail = str(exc.reason)
            raise UsageSourceError(f"{self.url}: HTTP {exc.code} {detail} (query {promql})") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise UsageSourceError(f"{self.url}: {getattr(exc, 'reason', exc)}") from None
        if body.get("status") != "success":
            raise UsageSourceError(f"{body.get('errorType', 'error')}: {body.get('error', '')} (query {promql})")
        data = body.get("data") or {}
        if data.get("resultType") != "vector":
            raise UsageSourceError(f"unexpected result type {data.get('resultType')!r}, expected vector")
        rows = []
        for item in data.get("result") or []:
            try:
                rows.append((dict(item.get("metric") or {}), float(item["value"][1])))
            except (KeyError, IndexError, TypeError, ValueError):
                raise UsageSourceError(f"malformed sample {item!r} (query {promql})") from None
        return rows


def capacity_of(nodes: Mapping[str, Node]) -> Vec:
    """Sum of the nodes' allocatable (every node the scheduler watches, as KAI sums every node's capacity)."""
    total = Resources()
    for n in nodes.values():
        total = total + n.allocatable
    return (total.gpu, total.cpu, total.memory)


def make_source(
    client_type: str, params: UsageParams, url: str = "", extra: Mapping[str, str] | None = None
) -> UsageSource | None:
    if client_type in ("", "none"):
        return None
    if client_type == "internal":
        return InternalUsage(params)
    if client_type == "prometheus":
        return PrometheusUsage(url, params, extra)
    raise ValueError(f"clientType: {client_type!r} is not one of {', '.join(CLIENT_TYPES)}")

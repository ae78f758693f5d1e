"""Prometheus metrics of the operators, one registry per operator instance (two instances can share a process).

Every family is listed in ``docs/metrics.md``. The scheduler exports KAI's own families under KAI's names and labels
(``kai_queue_*`` with ``queue_name``, ``queue_metadata_name``, ``queue_display_name``; scheduling latencies; evicted
pods per PodGroup), so KAI's Grafana dashboards work unchanged, plus kai-ray's (``kai_ray_*``). Process and Python
runtime metrics come from the client library's collectors. ``_created`` series are off: they doubled every counter
and histogram with a timestamp no dashboard reads.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.core import Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

KAI = "kai"  # KAI's default metrics namespace (its --metrics-namespace)
QUEUE_LABELS = ("queue_name", "queue_metadata_name", "queue_display_name")
KAI_MS_BUCKETS = tuple(5.0 * 2**k for k in range(10))  # KAI's ExponentialBuckets(5, 2, 10), milliseconds
CYCLE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
TIME_TO_SCHEDULE_BUCKETS = (1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)


class ExactCounter(Collector):
    """A monotonic counter exposed under exactly its name. KAI's Go client names some counters without ``_total``
    (``kai_podgroups_scheduled_by_action``) and its dashboards query that name; the Python client always appends
    ``_total`` to a counter, so this one is exposed untyped under KAI's name."""

    def __init__(self, name: str, documentation: str, labels: Iterable[str], registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = tuple(labels)
        self._values: dict[tuple[str, ...], float] = {}
        self._lock = threading.Lock()
        registry.register(self)

    def inc(self, *label_values: str, amount: float = 1.0) -> None:
        with self._lock:
            self._values[label_values] = self._values.get(label_values, 0.0) + amount

    def collect(self) -> Iterator[Metric]:
        metric = Metric(self.name, self.documentation, "unknown")
        with self._lock:
            for values, v in self._values.items():
                metric.add_sample(self.name, dict(zip(self.labels, values, strict=True)), v)
        yield metric


class LabelledGauges:
    """Gauges set in full each report: series whose labels were not set this time are removed (a deleted queue)."""

    def __init__(self, *gauges: Gauge) -> None:
        self.gauges = gauges
        self._last: dict[int, set[tuple[str, ...]]] = {id(g): set() for g in gauges}
        self._now: dict[int, set[tuple[str, ...]]] = {id(g): set() for g in gauges}

    def set(self, gauge: Gauge, labels: tuple[str, ...], value: float) -> None:
        gauge.labels(*labels).set(value)
        self._now[id(gauge)].add(labels)

    def commit(self) -> None:
        for g in self.gauges:
            for labels in self._last[id(g)] - self._now[id(g)]:
                with contextlib.suppress(KeyError):  # already gone
                    g.remove(*labels)
            self._last[id(g)] = self._now[id(g)]
            self._now[id(g)] = set()


class Metrics:
    def __init__(self, operator: str) -> None:
        disable_created_metrics()
        self.registry = CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        p = "kai_ray"
        self.leader = Gauge(f"{p}_is_leader", "1 while this replica holds the leader Lease", ["operator"], registry=r)
        self.leader_transitions = Counter(
            f"{p}_leader_transitions", "Times this replica became leader", ["operator"], registry=r
        )
        self.operator = operator
        self.status_writes = Counter(
            f"{p}_status_writes",
            "Status and Event writes by kind (podgroup, queue, event) and result",
            ["kind", "result"],
            registry=r,
        )
        self.findings = Counter(
            f"{p}_invalid_objects", "Bad objects reported (Queue, PodGroup, Ray CR)", ["kind"], registry=r
        )
        self._server: Any = None

    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        """Current value of a sample (tests and benchmarks read counters in-process)."""
        got = self.registry.get_sample_value(name, labels or {})
        return float(got or 0.0)

    def serve(self, port: int, addr: str) -> None:
        if port:
            self._server, _thread = start_http_server(port, addr=addr, registry=self.registry)
            log.info("metrics on http://%s:%d/metrics", addr, port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class PodgrouperMetrics(Metrics):
    def __init__(self) -> None:
        super().__init__("podgrouper")
        r, p = self.registry, "kai_ray"
        self.podgroups = Counter(f"{p}_podgrouper_podgroups", "PodGroup writes by action", ["action"], registry=r)
        self.pods_stamped = Counter(f"{p}_podgrouper_pods_stamped", "Pods annotated with their PodGroup", registry=r)
        self.owners_marked = Counter(
            f"{p}_podgrouper_owners_marked", "Ray objects marked for KAI's podgrouper to skip", registry=r
        )
        self.reconcile_errors = Counter(
            f"{p}_reconcile_errors", "Reconciles that failed and were retried", ["kind"], registry=r
        )


class SchedulerMetrics(Metrics):
    """The scheduler's families: the common ones, KAI's per-queue and latency families, and kai-ray's per-queue ones."""

    def __init__(self) -> None:
        super().__init__("scheduler")
        r, p = self.registry, "kai_ray"
        self.cycles = Counter(f"{p}_scheduler_cycles", "Scheduling cycles run", registry=r)
        self.cycle_seconds = Histogram(
            f"{p}_scheduler_cycle_duration_seconds",
            "Wall time of one cycle: snapshot, core, dispatch",
            buckets=CYCLE_BUCKETS,
            registry=r,
        )
        self.core_seconds = Histogram(
            f"{p}_scheduler_core_duration_seconds", "Time spent in run_cycle", buckets=CYCLE_BUCKETS, registry=r
        )
        self.phase_seconds = Counter(
            f"{p}_scheduler_phase_seconds",
            "Cycle time by phase (snapshot, core, dispatch, report)",
            ["phase"],
            registry=r,
        )
        self.phase_duration = Histogram(
            f"{p}_scheduler_phase_duration_seconds",
            "One cycle's time in one phase: snapshot, session_open, actions, dispatch, report",
            ["phase"],
            buckets=CYCLE_BUCKETS,
            registry=r,
        )
        self.binds = Counter(f"{p}_binds", "Binding requests by result", ["result"], registry=r)
        self.release_binds = Counter(
            f"{p}_release_binds", "Pipelined pods bound as their victims left, before the next cycle", registry=r
        )
        self.evictions = Counter(
            f"{p}_evictions", "Eviction requests by action and result", ["action", "result"], registry=r
        )
        self.pending_pods = Gauge(f"{p}_pending_pods", "Pods of our scheduler waiting for a node", registry=r)
        self.inflight_binds = Gauge(f"{p}_inflight_binds", "Bindings sent and not yet seen by the watch", registry=r)
        q = QUEUE_LABELS
        # KAI's queue-controller families (queue_name = metadata.name)
        self.queue_info = Gauge(f"{KAI}_queue_info", "Queues info", q, registry=r)
        self.queue_deserved_gpus = Gauge(f"{KAI}_queue_deserved_gpus", "Queue deserved GPUs", q, registry=r)
        self.queue_quota_cpu = Gauge(f"{KAI}_queue_quota_cpu_cores", "Queue quota CPU", q, registry=r)
        self.queue_quota_memory = Gauge(f"{KAI}_queue_quota_memory_bytes", "Queue quota memory", q, registry=r)
        self.queue_allocated_gpus = Gauge(f"{KAI}_queue_allocated_gpus", "Queue allocated GPUs", q, registry=r)
        self.queue_allocated_cpu = Gauge(f"{KAI}_queue_allocated_cpu_cores", "Queue allocated CPUs", q, registry=r)
        self.queue_allocated_memory = Gauge(
            f"{KAI}_queue_allocated_memory_bytes", "Queue allocated memory", q, registry=r
        )
        # KAI's scheduler families (queue_name = displayName, else metadata.name)
        self.fair_share_gpu = Gauge(
            f"{KAI}_queue_fair_share_gpu", "GPU Fair share of queue, as a gauge. Values in GPU devices", q, registry=r
        )
        self.fair_share_cpu = Gauge(
            f"{KAI}_queue_fair_share_cpu_cores", "CPU Fair share of queue, as a gauge. Value is in Cores", q, registry=r
        )
        self.fair_share_memory = Gauge(
            f"{KAI}_queue_fair_share_memory_gb", "Memory Fair share of queue, as a gauge. Value is in GB", q, registry=r
        )
        self.e2e_latency = Gauge(
            f"{KAI}_e2e_scheduling_latency_milliseconds",
            "E2e scheduling latency in milliseconds (scheduling algorithm + binding), as a gauge",
            registry=r,
        )
        self.open_session_latency = Gauge(
            f"{KAI}_open_session_latency_milliseconds",
            "Open session latency in milliseconds, including all plugins, as a gauge",
            registry=r,
        )
        self.action_latency = Gauge(
            f"{KAI}_action_scheduling_latency_milliseconds",
            "Action scheduling latency in milliseconds, as a gauge",
            ["action"],
            registry=r,
        )
        self.task_scheduling_latency = Histogram(
            f"{KAI}_task_scheduling_latency_milliseconds",
            "Task scheduling latency in milliseconds",
            buckets=KAI_MS_BUCKETS,
            registry=r,
        )
        self.task_bind_latency = Histogram(
            f"{KAI}_task_bind_latency_milliseconds",
            "Task bind latency histogram in milliseconds",
            buckets=KAI_MS_BUCKETS,
            registry=r,
        )
        self.podgroups_scheduled = ExactCounter(
            f"{KAI}_podgroups_scheduled_by_action", "Count of podgroups scheduled per action", ["action"], r
        )
        self.evicted_pods = Counter(
            f"{KAI}_pod_group_evicted_pods_total",
            "Total number of pods evicted per pod group",
            ["podgroup", "namespace", "uid", "nodepool", "action"],
            registry=r,
        )
        # kai-ray's per-queue families
        self.queue_pending_podgroups = Gauge(
            f"{p}_queue_pending_podgroups",
            "PodGroups of the queue whose gang is not running, waiting to be scheduled",
            ["queue_name"],
            registry=r,
        )
        self.queue_pending_pods = Gauge(
            f"{p}_queue_pending_pods", "Pods of the queue's PodGroups waiting for a node", ["queue_name"], registry=r
        )
        self.time_to_schedule = Histogram(
            f"{p}_time_to_schedule_seconds",
            "From a PodGroup's creation to all of its gang minimum bound (first time only)",
            ["queue_name"],
            buckets=TIME_TO_SCHEDULE_BUCKETS,
            registry=r,
        )
        self.queue_evictions = Counter(
            f"{p}_queue_evictions",
            "Pods the scheduler evicted (Eviction API, shrink or suspend) by victim queue and action",
            ["queue_name", "action"],
            registry=r,
        )
        self.elastic_shrinks = Counter(
            f"{p}_elastic_shrinks",
            "Ray-aware shrinks of KubeRay worker groups by victim queue and result (ok, deferred, fallback, error)",
            ["queue_name", "result"],
            registry=r,
        )
        self.suspends = Counter(
            f"{p}_suspends",
            "Whole-gang preemptions by suspending the Ray owner, by victim queue and result (ok, deferred, fallback)",
            ["queue_name", "result"],
            registry=r,
        )
        self.ray_drains = Counter(
            f"{p}_ray_drains",
            "Ray nodes drained (PREEMPTION reason, the gang's deadline) before their pods were taken, by victim queue "
            "and outcome (accepted, rejected, unreachable, not-found, ...)",
            ["queue_name", "result"],
            registry=r,
        )
        self.queue_series = LabelledGauges(
            self.queue_info,
            self.queue_deserved_gpus,
            self.queue_quota_cpu,
            self.queue_quota_memory,
            self.queue_allocated_gpus,
            self.queue_allocated_cpu,
            self.queue_allocated_memory,
            self.fair_share_gpu,
            self.fair_share_cpu,
            self.fair_share_memory,
            self.queue_pending_podgroups,
            self.queue_pending_pods,
        )

"""Prometheus metrics of the operators, one registry per operator instance (two instances can share a process)."""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

log = logging.getLogger(__name__)


class Metrics:
    def __init__(self, operator: str) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        p = "kai_ray"
        self.leader = Gauge(f"{p}_is_leader", "1 while this replica holds the leader Lease", ["operator"], registry=r)
        self.leader_transitions = Counter(
            f"{p}_leader_transitions", "Times this replica became leader", ["operator"], registry=r
        )
        self.operator = operator
        # scheduler
        self.cycles = Counter(f"{p}_scheduler_cycles", "Scheduling cycles run", registry=r)
        self.cycle_seconds = Histogram(
            f"{p}_scheduler_cycle_duration_seconds",
            "Wall time of one cycle: snapshot, core, dispatch",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.core_seconds = Histogram(
            f"{p}_scheduler_core_duration_seconds",
            "Time spent in run_cycle",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.phase_seconds = Counter(
            f"{p}_scheduler_phase_seconds",
            "Cycle time by phase (snapshot, core, dispatch, report)",
            ["phase"],
            registry=r,
        )
        self.binds = Counter(f"{p}_binds", "Binding requests by result", ["result"], registry=r)
        self.evictions = Counter(
            f"{p}_evictions", "Eviction requests by action and result", ["action", "result"], registry=r
        )
        self.pending_pods = Gauge(f"{p}_pending_pods", "Pods of our scheduler waiting for a node", registry=r)
        self.inflight_binds = Gauge(f"{p}_inflight_binds", "Bindings sent and not yet seen by the watch", registry=r)
        self.status_writes = Counter(
            f"{p}_status_writes", "Status and Event writes by kind and result", ["kind", "result"], registry=r
        )
        self.findings = Counter(
            f"{p}_invalid_objects", "Bad objects reported (Queue, PodGroup, Ray CR)", ["kind"], registry=r
        )
        # podgrouper
        self.podgroups = Counter(f"{p}_podgrouper_podgroups", "PodGroup writes by action", ["action"], registry=r)
        self.pods_stamped = Counter(f"{p}_podgrouper_pods_stamped", "Pods annotated with their PodGroup", registry=r)
        self.owners_marked = Counter(
            f"{p}_podgrouper_owners_marked", "Ray objects marked for KAI's podgrouper to skip", registry=r
        )
        self.reconcile_errors = Counter(
            f"{p}_reconcile_errors", "Reconciles that failed and were retried", ["kind"], registry=r
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

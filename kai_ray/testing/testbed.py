"""A test bed on a real control plane: the operators as processes, and the objects the reliability runs create.

Shared by :mod:`kai_ray.bench.chaos`, :mod:`kai_ray.bench.fuzz`, :mod:`kai_ray.bench.e2e` and the test suite. The
operators run exactly as the Helm chart runs them (``kai-ray operator podgrouper|scheduler``), one process each, with
their own log file; a kill is ``SIGKILL`` (no Lease released, requests in flight), a stop is ``SIGTERM``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kai_ray import constants as c
from kai_ray.k8s.base.rest import ApiError, Kube, podgroups_path, pods_path, queues_path

SCHEDULER = c.SCHEDULER_NAME
TRACEBACK = "Traceback (most recent call last)"
GPU = c.GPU_RESOURCE


def operator_command(kind: str, kubeconfig: Path, health_port: int, *args: str) -> list[str]:
    """The command line of one operator process (``kai-ray operator <kind>``) serving health on loopback."""
    return [
        sys.executable,
        "-m",
        "kai_ray",
        "operator",
        kind,
        "--kubeconfig",
        str(kubeconfig),
        "--bind-address",
        "127.0.0.1",
        "--health-port",
        str(health_port),
        *args,
    ]


# --- operator processes -----------------------------------------------------------------------------------------


@dataclass
class OperatorProcess:
    kind: str
    identity: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    health_port: int
    started: float
    max_rss_mb: float = 0.0

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def rss_mb(self) -> float:
        try:
            for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
        except OSError:
            pass
        return 0.0


class OperatorFleet:
    """Operator processes of one namespace, each with its own log file; killed with SIGKILL, stopped with SIGTERM."""

    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        node_selector: dict[str, str],
        log_dir: Path,
        *,
        lease_duration: float = 4.0,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.node_selector = node_selector
        self.log_dir = log_dir
        self.lease_duration = lease_duration
        self.extra_args = extra_args
        self.procs: dict[str, OperatorProcess] = {}
        self.dead: list[OperatorProcess] = []
        self._n = 0
        log_dir.mkdir(parents=True, exist_ok=True)

    def start(self, kind: str) -> OperatorProcess:
        from kai_ray.testing.controlplane.harness import free_port

        self._n += 1
        identity = f"{kind}-{self._n}"
        health = free_port()
        log_path = self.log_dir / f"{identity}.log"
        renew = self.lease_duration * 0.7
        cmd = operator_command(
            kind,
            self.kubeconfig,
            health,
            "--namespace",
            self.namespace,
            "--lease-namespace",
            self.namespace,
            "--lease-duration",
            f"{self.lease_duration}s",
            "--renew-deadline",
            f"{renew:.2f}s",
            "--retry-period",
            "500ms",
            "--identity",
            identity,
            "--metrics-port",
            "0",
            "--log-level",
            "INFO",
            *self.extra_args,
        )
        if kind == "scheduler":
            selector = ",".join(f"{k}={v}" for k, v in sorted(self.node_selector.items()))
            cmd += ["--node-selector", selector, "--schedule-period", "500ms"]
        out = open(log_path, "ab")  # noqa: SIM115 - owned by the process
        popen = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        proc = OperatorProcess(kind, identity, popen, log_path, health, time.monotonic())
        self.procs[identity] = proc
        return proc

    def leader(self, kind: str, kube: Kube) -> str | None:
        """The identity holding operator ``kind``'s Lease (None when free or unknown)."""
        try:
            lease = kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/kai-ray-{kind}")
        except ApiError:
            return None
        holder = (lease.get("spec") or {}).get("holderIdentity")
        return str(holder) if holder else None

    def leading(self, kind: str, kube: Kube) -> OperatorProcess | None:
        """The live process holding the Lease and reporting itself leader on /healthz."""
        holder = self.leader(kind, kube)
        proc = self.procs.get(holder or "")
        if proc is None or not proc.alive:
            return None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{proc.health_port}/healthz", timeout=2) as resp:
                return proc if b'"leader": true' in resp.read() else None
        except OSError:
            return None

    def kill(self, identity: str) -> None:
        proc = self.procs.pop(identity)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.popen.pid, signal.SIGKILL)
        proc.popen.wait(timeout=30)
        self.dead.append(proc)

    def sample_memory(self) -> None:
        for proc in self.procs.values():
            proc.max_rss_mb = max(proc.max_rss_mb, proc.rss_mb())

    def max_rss(self, kind: str) -> float:
        return round(max((p.max_rss_mb for p in [*self.procs.values(), *self.dead] if p.kind == kind), default=0.0), 1)

    def tracebacks(self) -> list[str]:
        """``file: first line after the traceback`` for every traceback in any operator's log."""
        out = []
        for proc in [*self.procs.values(), *self.dead]:
            try:
                lines = proc.log_path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            for i, line in enumerate(lines):
                if TRACEBACK in line:
                    context = " | ".join(lines[max(0, i - 1) : i + 12])
                    out.append(f"{proc.log_path.name}: {context[:1500]}")
        return out

    def finish(self) -> tuple[list[str], dict[str, float]]:
        """Stop every process; (the tracebacks in their logs, the most memory each kind used in MB)."""
        self.sample_memory()
        self.stop()
        return self.tracebacks(), {k: self.max_rss(k) for k in ("scheduler", "podgrouper")}

    def stop(self) -> None:
        for proc in list(self.procs.values()):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGTERM)
        for identity, proc in list(self.procs.items()):
            try:
                proc.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGKILL)
                proc.popen.wait(timeout=10)
            self.dead.append(self.procs.pop(identity))


# --- objects ----------------------------------------------------------------------------------------------------


def gpus(pod: dict[str, Any]) -> float:
    total = 0.0
    for ctr in (pod.get("spec") or {}).get("containers") or []:
        res = ctr.get("resources") or {}
        value = (res.get("limits") or {}).get(GPU) or (res.get("requests") or {}).get(GPU) or 0
        with contextlib.suppress(ValueError, TypeError):
            total += float(value)
    return total


def pod_group(pod: dict[str, Any]) -> str | None:
    meta = pod.get("metadata") or {}
    name = (meta.get("annotations") or {}).get(c.PODGROUP_ANNOTATION)
    if name:
        return str(name)
    if not meta.get("ownerReferences") and meta.get("uid"):
        return f"pg-{meta.get('name')}-{meta['uid']}"
    return None


def queue_body(
    name: str,
    gpu_quota: float = -1,
    gpu_limit: float = -1,
    parent: str | None = None,
    priority: int | None = None,
    over_quota_weight: float = 1,
) -> dict[str, Any]:
    """A Queue rationing only GPUs (CPU and memory unlimited)."""
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    spec: dict[str, Any] = {
        "resources": {
            "gpu": {"quota": gpu_quota, "limit": gpu_limit, "overQuotaWeight": over_quota_weight},
            "cpu": unlimited,
            "memory": unlimited,
        }
    }
    if parent:
        spec["parentQueue"] = parent
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def pod_body(
    name: str, gpus: int, queue: str, priority: str, group: str | None = None, extra: dict[str, str] | None = None
) -> dict[str, Any]:
    labels = {c.QUEUE_LABEL: queue, c.PRIORITY_LABEL: priority, **(extra or {})}
    annotations: dict[str, str] = {}
    if group:
        annotations[c.PODGROUP_ANNOTATION] = group
        labels[c.SKIP_PODGROUPER] = "true"  # a bring-your-own PodGroup, as KAI requires
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {
            "schedulerName": SCHEDULER,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "main", "image": "registry.invalid/chaos:0", "resources": {"limits": {GPU: str(gpus)}}}
            ],
        },
    }


def make_gang(
    kube: Kube,
    ns: str,
    name: str,
    pods: int,
    gpus: int,
    queue: str,
    priority: str,
    labels: dict[str, str] | None = None,
) -> list[str]:
    body = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": pods, "queue": queue, "priorityClassName": priority},
    }
    kube.create(podgroups_path(ns), body)
    names = [f"{name}-{i}" for i in range(pods)]
    for pod in names:
        kube.create(pods_path(ns), pod_body(pod, gpus, queue, priority, group=name, extra=labels))
    return names


def nothing_fits(kube: Kube, ns: str, capacity: dict[str, float]) -> bool:
    """No pending pod of the namespace would fit in the GPUs its nodes (``capacity``: node -> GPUs) have free: a
    single pod needs its GPUs on one node, a gang's pods each on some node (checked pod by pod, largest first)."""
    free = dict(capacity)
    pending: dict[str | None, list[float]] = {}
    for p in kube.get(pods_path(ns))["items"]:
        node = p["spec"].get("nodeName")
        if node:
            free[node] = free.get(node, 0.0) - gpus(p)
        elif not p["metadata"].get("deletionTimestamp"):
            pending.setdefault(pod_group(p), []).append(gpus(p))
    for requests in pending.values():
        room = dict(free)
        placed = 0
        for need in sorted(requests, reverse=True):
            node = next((n for n, f in room.items() if f >= need - 1e-9), None)
            if node is None:
                break
            room[node] -= need
            placed += 1
        if placed == len(requests):
            return False
    return True


def delete_queues(kube: Kube, names: list[str]) -> None:
    """Delete these Queues, children first (the reverse of creation order); missing ones are fine."""
    for name in reversed(names):
        with contextlib.suppress(ApiError):
            kube.delete(queues_path(name))


def count_bound(kube: Kube, ns: str, names: list[str]) -> int:
    """How many of these pods are bound (and not terminating)."""
    want = set(names)
    return sum(
        1
        for p in kube.get(pods_path(ns))["items"]
        if p["metadata"]["name"] in want and p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
    )


def used_gpus(kube: Kube, ns: str) -> float:
    """GPUs of the namespace's bound pods (terminating ones included: they still hold their node)."""
    return sum(gpus(p) for p in kube.get(pods_path(ns))["items"] if p["spec"].get("nodeName"))


def wait_for(what: str, check: Callable[[], bool], timeout: float, stop: Callable[[], None] | None = None) -> bool:
    """Poll ``check`` (API errors count as not yet) for up to ``timeout`` seconds, calling ``stop`` between polls."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ApiError):
            if check():
                return True
        if stop is not None:
            stop()
        time.sleep(0.25)
    return False

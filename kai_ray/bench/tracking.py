"""Watching a benchmark's pods and reading the API server's counters, shared by ``bench e2e`` and ``bench vs-kai``.

A :class:`Tracker` is one watch of the benchmark's own pods (by label), slimmed to what the timings need, so that
watching tens of thousands of pods costs the measured machine little memory: when each pod was first seen bound,
terminating and gone, in epoch seconds (comparable with the operators' log timestamps).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from urllib3.exceptions import HTTPError

from kai_ray.k8s.base.informer import DELETE, Informer
from kai_ray.k8s.base.rest import ApiError, Kube, pods_path

BENCH_LABEL = "kai-ray.io/bench"


def _slim(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {
        "metadata": {k: meta.get(k) for k in ("name", "namespace", "deletionTimestamp")},
        "spec": {"nodeName": (obj.get("spec") or {}).get("nodeName")},
    }


@dataclass
class PodTimes:
    node: str | None = None
    bound: float | None = None  # epoch seconds (comparable with the schedulers' log timestamps)
    terminating: float | None = None
    gone: float | None = None


class Tracker:
    """One watch of every benchmark pod: when each was first seen bound, terminating and gone."""

    def __init__(self, kube: Kube, selector: str = f"{BENCH_LABEL}=vs") -> None:
        self.pods: dict[str, PodTimes] = {}
        self.bound: dict[str, int] = {}  # namespace -> pods seen bound (and not gone)
        self.cond = threading.Condition()
        self.informer = Informer(
            kube, pods_path(), name="bench", handler=self._on, label_selector=selector, transform=_slim
        )

    def __enter__(self) -> Tracker:
        self.informer.start()
        if not self.informer.wait_synced(120):
            raise TimeoutError("the benchmark's pod watch did not sync in 120s")
        return self

    def __exit__(self, *_: object) -> None:
        self.informer.stop()

    def _on(self, kind: str, key: str, obj: dict[str, Any]) -> None:
        now = time.time()
        with self.cond:
            t = self.pods.setdefault(key, PodTimes())
            ns = key.partition("/")[0]
            if kind == DELETE:
                if t.gone is None:
                    t.gone = now
                    if t.bound is not None:
                        self.bound[ns] -= 1
            else:
                meta = obj["metadata"]
                node = obj["spec"].get("nodeName")
                if node and t.bound is None:
                    t.bound, t.node = now, node
                    self.bound[ns] = self.bound.get(ns, 0) + 1
                if meta.get("deletionTimestamp") and t.terminating is None:
                    t.terminating = now
            self.cond.notify_all()

    def wait(self, what: str, check: Callable[[], bool], timeout: float) -> None:
        with self.cond:
            if not self.cond.wait_for(check, timeout):
                raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")

    def wait_bound(self, ns: str, n: int, timeout: float) -> None:
        self.wait(f"{n} pods bound in {ns}", lambda: self.bound.get(ns, 0) >= n, timeout)

    def wait_empty(self, ns: str, timeout: float) -> None:
        prefix = f"{ns}/"
        self.wait(
            f"every pod of {ns} to go",
            lambda: all(t.gone is not None for k, t in self.pods.items() if k.startswith(prefix)),
            timeout,
        )

    def of(self, ns: str) -> dict[str, PodTimes]:
        prefix = f"{ns}/"
        with self.cond:
            return {k[len(prefix) :]: v for k, v in self.pods.items() if k.startswith(prefix)}


def peak_rss(pid: int) -> int:
    """Peak resident set size (``VmHWM``) of a live process, in bytes (0 if gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def retry(call: Callable[[], Any], attempts: int = 3) -> Any:
    """``call`` again when the connection broke (a pooled keep-alive socket the server had closed)."""
    for i in range(attempts):
        try:
            return call()
        except (ApiError, HTTPError) as exc:
            broken = not isinstance(exc, ApiError) or exc.status == 0
            if not broken or i == attempts - 1:
                raise
            time.sleep(1.0)
    return None


def apiserver_requests(kube: Kube) -> dict[str, float]:
    """``apiserver_request_total`` summed by verb/resource[/subresource] (watch requests left out)."""
    resp = kube.pool.request("GET", kube.url("/metrics"), headers=kube._headers(None), retries=False)
    out: dict[str, float] = {}
    for line in resp.data.decode().splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(part.split("=", 1) for part in line[line.index("{") + 1 : line.rindex("}")].split(","))
        labels = {k: v.strip('"') for k, v in labels.items()}
        if labels.get("verb") in ("WATCH", "CONNECT"):
            continue
        key = f"{labels.get('verb')} {labels.get('resource')}" + (
            f"/{labels['subresource']}" if labels.get("subresource") else ""
        )
        out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def quiesce(kube: Kube, most: float = 300.0, writes_per_second: float = 20.0) -> float:
    """Wait until the API server sees fewer than ``writes_per_second`` writes in a second, KWOK's node heartbeats
    aside (the schedulers' deferred Events and status writes after a fill are done), at most ``most`` seconds;
    returns the seconds waited."""
    t0 = time.monotonic()

    def writes() -> float:
        counts = retry(lambda: apiserver_requests(kube))
        return sum(
            v
            for k, v in counts.items()
            if k.split(" ", 1)[0] in ("POST", "PUT", "PATCH", "DELETE") and not k.endswith((" leases", " nodes/status"))
        )

    last = writes()
    while time.monotonic() - t0 < most:
        time.sleep(1.0)
        now = writes()
        if now - last < writes_per_second:
            break
        last = now
    return time.monotonic() - t0

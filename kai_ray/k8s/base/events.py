"""Kubernetes Events (core/v1), written in the background and de-duplicated.

Why de-duplicate: the scheduler re-evaluates a pending gang every cycle; an Event per cycle would flood etcd. The
same (object, reason, message) is written once, then its ``count`` is bumped at most every ``repeat_interval``.
Event writes are the lowest-priority work of the operator: they never delay a binding.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import OrderedDict
from typing import Any

from kai_ray.durations import rfc3339
from kai_ray.k8s.base.rest import ApiError, Kube, events_path
from kai_ray.k8s.base.workqueue import Dispatcher

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"
EVENT_PRIORITY = 30
MAX_MESSAGE = 1024


def object_ref(obj: dict[str, Any], api_version: str | None = None, kind: str | None = None) -> dict[str, Any]:
    """An ``involvedObject`` reference for an object as read from the API server."""
    meta = obj.get("metadata") or {}
    ref = {
        "apiVersion": api_version or obj.get("apiVersion", "v1"),
        "kind": kind or obj.get("kind", ""),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
    }
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    return ref


class EventRecorder:
    def __init__(
        self,
        kube: Kube,
        component: str,
        instance: str,
        dispatcher: Dispatcher,
        repeat_interval: float = 300.0,
        max_tracked: int = 20000,
    ) -> None:
        self.kube = kube
        self.component = component
        self.instance = instance
        self.dispatcher = dispatcher
        self.repeat_interval = repeat_interval
        self.max_tracked = max_tracked
        self._seen: OrderedDict[tuple[str, str, str, str], dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self.written = 0

    def emit(self, ref: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """Record an Event on ``ref`` (an ``involvedObject``); returns at once, the write happens later."""
        message = message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."
        key = (ref.get("uid") or f"{ref.get('kind')}/{ref.get('namespace')}/{ref.get('name')}", type_, reason, message)
        now = time.monotonic()
        with self._lock:
            entry = self._seen.get(key)
            if entry is not None:
                entry["count"] += 1
                self._seen.move_to_end(key)
                if now - entry["written_at"] < self.repeat_interval:
                    return
                entry["written_at"] = now
                count = entry["count"]
                name, ns = entry["name"], entry["namespace"]
            else:
                ns = ref.get("namespace") or "default"
                name = f"{ref.get('name', 'object')[:200]}.{random.getrandbits(64):016x}"
                self._seen[key] = {"count": 1, "written_at": now, "name": name, "namespace": ns}
                while len(self._seen) > self.max_tracked:
                    self._seen.popitem(last=False)
                count = 1
        if count == 1:
            body = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": ns},
                "involvedObject": ref,
                "reason": reason,
                "message": message,
                "type": type_,
                "source": {"component": self.component},
                "reportingComponent": self.component,
                "reportingInstance": self.instance,
                "firstTimestamp": rfc3339(),
                "lastTimestamp": rfc3339(),
                "count": 1,
            }
            self.dispatcher.submit(f"event/{ns}/{name}", lambda: self._create(ns, body), priority=EVENT_PRIORITY)
        else:
            patch = {"count": count, "lastTimestamp": rfc3339()}
            self.dispatcher.submit(f"event/{ns}/{name}", lambda: self._patch(ns, name, patch), priority=EVENT_PRIORITY)

    def _create(self, ns: str, body: dict[str, Any]) -> None:
        try:
            self.kube.create(events_path(ns), body)
            self.written += 1
        except ApiError as exc:
            if exc.status not in (403, 404, 409):
                log.info("event %s/%s not written: %s", ns, body["metadata"]["name"], exc)

    def _patch(self, ns: str, name: str, patch: dict[str, Any]) -> None:
        try:
            self.kube.merge_patch(f"{events_path(ns)}/{name}", patch)
            self.written += 1
        except ApiError as exc:
            if exc.status not in (403, 404):
                log.info("event %s/%s not updated: %s", ns, name, exc)

"""Kubernetes Events (core/v1), written in the background, aggregated per object and reason, and rate-limited.

Why: the scheduler re-evaluates a pending gang every cycle and a gang can flap between verdicts; an Event per cycle or
per flap would flood etcd. client-go's recorder solves this with an aggregator (similar Events on one object become
one Event whose ``count`` grows) and a spam filter (a token bucket per object). kai-ray does the same, more strictly:

- **One Event per (object, type, reason).** The first emit creates it; a later one with the same message only bumps
  its ``count``, written at most every ``repeat_interval``; one with a new message rewrites the same Event (``count``
  + 1, the new message, ``lastTimestamp``), so ``kubectl describe`` shows the latest message and how often it came.
- **A token bucket per object** (``burst`` writes, then one per ``refill`` seconds): an emit with no token left is
  remembered, and one deferred write carrying the latest message and count goes out when the next token comes, so
  what is finally stored is always the latest state, however fast the emits came.

Event writes are the lowest-priority work of the operator: they never delay a binding. ``written`` counts the Event
creations and updates sent, ``dropped`` the emits that were folded into a later write.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kai_ray.durations import rfc3339
from kai_ray.k8s.base.rest import ApiError, Kube, events_path
from kai_ray.k8s.base.workqueue import Dispatcher

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"
EVENT_PRIORITY = 30
MAX_MESSAGE = 1024
BURST = 25  # client-go's spam filter: 25 Events per object at once ...
REFILL = 300.0  # ... then one every 5 minutes


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


@dataclass(slots=True)
class TokenBucket:
    """``burst`` tokens, refilled at one per ``refill`` seconds (explicit clock, so it is tested without sleeping)."""

    burst: int
    refill: float
    tokens: float = -1.0
    at: float = 0.0

    def take(self, now: float) -> float:
        """0.0 when a token was taken; else the seconds until one will be there (nothing is taken)."""
        if self.tokens < 0:
            self.tokens, self.at = float(self.burst), now
        self.tokens = min(float(self.burst), self.tokens + (now - self.at) / self.refill)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) * self.refill


@dataclass(slots=True)
class _Aggregate:
    """One Event on the server: what it says now, and whether a write carrying it is still to be sent."""

    name: str
    namespace: str
    ref: dict[str, Any]
    type_: str
    reason: str
    message: str
    first: str  # firstTimestamp
    count: int = 1
    created: bool = False  # a creation was sent (a later write is an update)
    written_count: int = 0  # the count the last write carried
    written_message: str = ""
    written_at: float = 0.0
    deferred: bool = False  # a write waits for a token
    last: str = field(default_factory=rfc3339)


class EventRecorder:
    def __init__(
        self,
        kube: Kube,
        component: str,
        instance: str,
        dispatcher: Dispatcher,
        repeat_interval: float = 300.0,
        max_tracked: int = 20000,
        burst: int = BURST,
        refill: float = REFILL,
        clock: Callable[[], float] = time.monotonic,
        counter: Any = None,
    ) -> None:
        self.kube = kube
        self.component = component
        self.instance = instance
        self.dispatcher = dispatcher
        self.repeat_interval = repeat_interval
        self.max_tracked = max_tracked
        self.burst, self.refill, self.clock = burst, refill, clock
        self._events: OrderedDict[tuple[str, str, str], _Aggregate] = OrderedDict()
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()
        self._lock = threading.Lock()
        self.written = 0
        self.dropped = 0
        self.counter = counter  # kai_ray_status_writes_total: kind ``event``, result ``ok`` or ``aggregated``

    def emit(self, ref: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """Record an Event on ``ref`` (an ``involvedObject``); returns at once, the write (if any) happens later."""
        message = message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."
        obj = ref.get("uid") or f"{ref.get('kind')}/{ref.get('namespace')}/{ref.get('name')}"
        key = (obj, type_, reason)
        now = self.clock()
        with self._lock:
            agg = self._events.get(key)
            if agg is None:
                ns = ref.get("namespace") or "default"
                name = f"{ref.get('name', 'object')[:200]}.{random.getrandbits(64):016x}"
                agg = _Aggregate(name, ns, ref, type_, reason, message, rfc3339(), count=0)
                self._events[key] = agg
                while len(self._events) > self.max_tracked:
                    self._events.popitem(last=False)
            else:
                self._events.move_to_end(key)
            agg.count += 1
            agg.message = message
            agg.last = rfc3339()
            if agg.deferred:
                self._folded()
                return  # the deferred write will carry this one
            if agg.created and message == agg.written_message and now - agg.written_at < self.repeat_interval:
                self._folded()
                return  # a repeat: counted, written with the next write or after repeat_interval
            wait = self._bucket(obj).take(now)
            if wait > 0:
                agg.deferred = True
                self._folded()
            self._submit(key, agg, wait)

    def _folded(self) -> None:
        self.dropped += 1
        if self.counter is not None:
            self.counter.labels("event", "aggregated").inc()

    def _sent(self) -> None:
        self.written += 1
        if self.counter is not None:
            self.counter.labels("event", "ok").inc()

    def _bucket(self, obj: str) -> TokenBucket:
        bucket = self._buckets.get(obj)
        if bucket is None:
            bucket = self._buckets[obj] = TokenBucket(self.burst, self.refill)
            while len(self._buckets) > self.max_tracked:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(obj)
        return bucket

    def _submit(self, key: tuple[str, str, str], agg: _Aggregate, delay: float) -> None:
        self.dispatcher.submit(
            f"event/{agg.namespace}/{agg.name}", lambda: self._write(key, agg), priority=EVENT_PRIORITY, delay=delay
        )

    def _write(self, key: tuple[str, str, str], agg: _Aggregate) -> None:
        """Send what the Event says now: a creation the first time, else an update of count, message and time."""
        with self._lock:
            if agg.deferred:
                agg.deferred = False
                self._bucket(key[0]).take(self.clock())  # the token this deferred write waited for
            count, message, last, create = agg.count, agg.message, agg.last, not agg.created
            if not create and count == agg.written_count and message == agg.written_message:
                return
            agg.created, agg.written_count, agg.written_message = True, count, message
            agg.written_at = self.clock()
        if not create:
            try:
                self.kube.merge_patch(
                    f"{events_path(agg.namespace)}/{agg.name}",
                    {"count": count, "message": message, "lastTimestamp": last},
                )
                self._sent()
                return
            except ApiError as exc:
                if exc.status != 404:
                    if exc.status != 403:
                        log.info("event %s/%s not updated: %s", agg.namespace, agg.name, exc)
                    return
                # expired (the API server's event TTL) or never stored: written anew below
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": agg.name, "namespace": agg.namespace},
            "involvedObject": agg.ref,
            "reason": agg.reason,
            "message": message,
            "type": agg.type_,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
            "firstTimestamp": agg.first,
            "lastTimestamp": last,
            "count": count,
        }
        try:
            self.kube.create(events_path(agg.namespace), body)
            self._sent()
        except ApiError as exc:
            if exc.status not in (403, 404, 409):
                log.info("event %s/%s not written: %s", agg.namespace, agg.name, exc)

"""A keyed, coalescing, delayed work queue with a pool of worker threads.

Why keyed and coalescing: controllers care about the latest state of an object, not every intermediate event. A
key submitted while already waiting keeps its place and takes the newest work; a key submitted while running is
run again afterwards, never twice at once. Priorities let the scheduler put bindings before status and Events, and
a ``gate`` lets a low-priority pool hold back while a more urgent one is busy.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

Work = Callable[[], None]


@dataclass(order=True)
class _Item:
    priority: int
    seq: int
    key: str = field(compare=False)


class Dispatcher:
    def __init__(
        self,
        name: str,
        workers: int,
        gate: Callable[[], bool] | None = None,
        gate_max_wait: float = 2.0,
    ) -> None:
        self.name = name
        self.n_workers = workers
        self.gate = gate
        self.gate_max_wait = gate_max_wait
        self._cond = threading.Condition()
        self._ready: list[_Item] = []
        self._delayed: list[tuple[float, int, str, int]] = []  # (due, seq, key, priority)
        self._work: dict[str, Work] = {}  # key -> latest work, for keys waiting (ready or delayed)
        self._queued: set[str] = set()  # keys in _ready
        self._running: set[str] = set()
        self._dirty: dict[str, tuple[Work, int]] = {}  # submitted while running
        self._seq = itertools.count()
        self._stop = False
        self._threads: list[threading.Thread] = []
        self.completed = 0
        self.failed = 0

    def start(self) -> Dispatcher:
        for i in range(self.n_workers):
            t = threading.Thread(target=self._worker, name=f"{self.name}-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Drop waiting work and stop; running work finishes (its request is already on the wire)."""
        with self._cond:
            self._stop = True
            self._ready.clear()
            self._delayed.clear()
            self._work.clear()
            self._queued.clear()
            self._dirty.clear()
            self._cond.notify_all()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def submit(self, key: str, work: Work, priority: int = 0, delay: float = 0.0) -> None:
        with self._cond:
            if self._add(key, work, priority, delay):
                self._cond.notify()

    def submit_many(self, items: list[tuple[str, Work]], priority: int = 0) -> None:
        """Many keys under one lock (a cycle's bindings): less contention than one ``submit`` each."""
        with self._cond:
            added = sum(1 for key, work in items if self._add(key, work, priority, 0.0))
            if added:
                self._cond.notify(min(added, self.n_workers))

    def _add(self, key: str, work: Work, priority: int, delay: float) -> bool:
        if self._stop:
            return False
        if key in self._running:
            old = self._dirty.get(key)
            self._dirty[key] = (work, min(priority, old[1]) if old else priority)
            return False
        self._work[key] = work
        if key in self._queued:
            return False
        if delay > 0:
            heapq.heappush(self._delayed, (time.monotonic() + delay, next(self._seq), key, priority))
        else:
            self._queued.add(key)
            heapq.heappush(self._ready, _Item(priority, next(self._seq), key))
        return True

    def pending(self) -> int:
        with self._cond:
            return len(self._queued) + len(self._running)

    def busy(self) -> bool:
        with self._cond:
            return bool(self._queued or self._running)

    def wait_idle(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.busy():
                return True
            time.sleep(0.01)
        return not self.busy()

    def _promote(self, now: float) -> float | None:
        """Move due delayed items to ready; return seconds until the next one is due."""
        while self._delayed and self._delayed[0][0] <= now:
            _, _, key, prio = heapq.heappop(self._delayed)
            if key in self._work and key not in self._queued and key not in self._running:
                self._queued.add(key)
                heapq.heappush(self._ready, _Item(prio, next(self._seq), key))
        return self._delayed[0][0] - now if self._delayed else None

    def _worker(self) -> None:
        held_since: float | None = None
        while True:
            with self._cond:
                while True:
                    if self._stop:
                        return
                    wait = self._promote(time.monotonic())
                    if self._ready:
                        break
                    self._cond.wait(wait if wait is not None else 1.0)
                if self.gate is not None and not self.gate():
                    now = time.monotonic()
                    held_since = held_since or now
                    if now - held_since < self.gate_max_wait:
                        self._cond.wait(0.1)
                        continue
                held_since = None
                item = heapq.heappop(self._ready)
                key = item.key
                self._queued.discard(key)
                work = self._work.pop(key, None)
                if work is None:
                    continue
                self._running.add(key)
            try:
                work()
                self.completed += 1
            except Exception:
                self.failed += 1
                log.exception("%s: work for %s failed", self.name, key)
            finally:
                with self._cond:
                    self._running.discard(key)
                    again = self._dirty.pop(key, None)
                    if again is not None and not self._stop:
                        self._work[key] = again[0]
                        self._queued.add(key)
                        heapq.heappush(self._ready, _Item(again[1], next(self._seq), key))
                        self._cond.notify()


class Backoff:
    """Per-key exponential retry delay (client-go's item rate limiter): 0.2 s doubling to ``cap``."""

    def __init__(self, base: float = 0.2, cap: float = 30.0) -> None:
        self.base = base
        self.cap = cap
        self._failures: dict[str, int] = {}
        self._lock = threading.Lock()

    def next(self, key: str) -> float:
        with self._lock:
            n = self._failures.get(key, 0)
            self._failures[key] = n + 1
        return float(min(self.cap, self.base * (2**n)))

    def forget(self, key: str) -> None:
        with self._lock:
            self._failures.pop(key, None)

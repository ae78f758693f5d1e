"""A keyed, coalescing, delayed work queue with per-key exponential backoff and a pool of worker threads.

Why keyed and coalescing: controllers care about the latest state of an object, not every intermediate event. A
key submitted while already waiting keeps its place and takes the newest work; a key submitted while running is
run again afterwards, never twice at once. Priorities let the scheduler put bindings before status and Events, and
a ``gate`` lets a low-priority pool hold back while a more urgent one is busy.

Every submission's ``delay`` is honoured, also for a key that is running (a controller's retry is submitted from
inside the failing work, so that is the usual case): the follow-up starts when the run ends *and* its due time has
come. :meth:`Dispatcher.retry` is the error path: it delays the key by its :class:`Backoff` step and holds it there,
so ordinary re-submissions (watch events) during the hold are coalesced into the one retry: a failing key costs at
most one run, hence one API call, per backoff step. :meth:`Dispatcher.forget` ends the hold after a success.

Why hand-written: client-go's workqueue (rate-limiting, delaying, coalescing) is Go. In Python, ``queue`` and
``sched`` neither coalesce keys nor keep a key from running twice; kopf serialises per object but only inside its own
asyncio handlers, and our operators dispatch from informer threads and a synchronous scheduler loop; task queues such
as Celery or RQ need a broker. The decision logic is a small pure state machine (:class:`Schedule`, explicit clock)
so it is property-tested without threads; :class:`Dispatcher` adds the lock, the condition variable and the workers.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

Work = Callable[[], None]


class Backoff:
    """Per-key exponential retry delay (client-go's item rate limiter): ``base`` doubling up to ``cap``.

    The failure count stops growing once the cap is reached, so the delay never overflows however long a key fails.
    A key that has not failed for ``2 * cap`` seconds is no longer retrying and starts again from ``base``; such
    entries are pruned, so the table stays bounded without every caller remembering to :meth:`forget`.
    """

    def __init__(self, base: float = 0.2, cap: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        if base <= 0 or cap < base:
            raise ValueError(f"Backoff needs 0 < base <= cap, got base={base}, cap={cap}")
        self.base = base
        self.cap = cap
        self.clock = clock
        self._failures: dict[str, tuple[int, float]] = {}  # key -> (steps taken, monotonic time of the last)
        self._lock = threading.Lock()
        steps = 0
        while base * 2**steps < cap:
            steps += 1
        self._max_steps = steps

    def next(self, key: str) -> float:
        """The delay before retrying ``key`` after one more failure."""
        now = self.clock()
        with self._lock:
            n, last = self._failures.get(key, (0, now))
            if now - last > 2 * self.cap:
                n = 0
            self._failures[key] = (min(n + 1, self._max_steps), now)
            if len(self._failures) > 10_000:
                self._prune(now)
        return float(min(self.cap, self.base * 2.0**n))

    def failures(self, key: str) -> int:
        with self._lock:
            return self._failures.get(key, (0, 0.0))[0]

    def forget(self, key: str) -> None:
        with self._lock:
            self._failures.pop(key, None)

    def _prune(self, now: float) -> None:
        for key in [k for k, (_, last) in self._failures.items() if now - last > 2 * self.cap]:
            del self._failures[key]

    def __len__(self) -> int:
        return len(self._failures)


@dataclass
class _Key:
    work: Work | None = None  # the work waiting to run (the newest submitted), None when nothing waits
    priority: int = 0
    due: float = 0.0  # when the waiting work may start (monotonic)
    hold: float = 0.0  # no run before this (a retry's backoff)
    queued: bool = False  # in the ready heap
    running: bool = False


class Schedule:
    """The queue's decisions, without threads: which key runs next and when. Not thread-safe (the caller locks).

    Invariants: a key runs at most once at a time; waiting work never starts before its due time (``now + delay`` of
    its submission, or the key's hold, whichever is later); several submissions of a waiting key coalesce into one
    run of the newest work at the earliest due time among them (but not before the hold) and the smallest priority.
    """

    def __init__(self) -> None:
        self._keys: dict[str, _Key] = {}
        self._ready: list[tuple[int, int, str]] = []  # (priority, seq, key)
        self._delayed: list[tuple[float, int, str]] = []  # (due, seq, key); stale entries are skipped
        self._seq = itertools.count()
        self.queued = 0
        self.running = 0

    def submit(self, key: str, work: Work, priority: int, now: float, delay: float = 0.0) -> bool:
        """Record work for ``key``. True when a worker may have something new to take now or at a new time."""
        k = self._keys.get(key)
        if k is None:
            k = self._keys[key] = _Key()
        due = max(now + max(0.0, delay), k.hold)
        if k.work is None:
            k.work, k.priority, k.due = work, priority, due
        else:
            k.work = work
            k.priority = min(k.priority, priority)
            if k.queued or due >= k.due:
                return False  # ready already, or due no sooner than before
            k.due = due
        if k.running or k.queued:
            return False  # placed when the current run ends
        return self._place(key, k, now)

    def hold(self, key: str, until: float) -> None:
        """No run of ``key`` starts before ``until`` (a backoff step); waiting work is pushed back to it."""
        k = self._keys.get(key)
        if k is None:
            k = self._keys[key] = _Key()
        k.hold = max(k.hold, until)
        if k.work is not None and not k.running and k.due < k.hold:
            k.due = k.hold
            if k.queued:
                k.queued = False
                self.queued -= 1  # its ready entry goes stale
            heapq.heappush(self._delayed, (k.due, next(self._seq), key))

    def release(self, key: str) -> None:
        """End the hold of ``key`` (it succeeded); waiting work keeps its own due time."""
        k = self._keys.get(key)
        if k is not None:
            k.hold = 0.0
            self._drop_if_idle(key, k)

    def _place(self, key: str, k: _Key, now: float) -> bool:
        if k.due <= now:
            k.queued = True
            self.queued += 1
            heapq.heappush(self._ready, (k.priority, next(self._seq), key))
        else:
            heapq.heappush(self._delayed, (k.due, next(self._seq), key))
        return True

    def promote(self, now: float) -> float | None:
        """Move due work to the ready heap; seconds until the next delayed work is due (None: nothing delayed)."""
        while self._delayed and self._delayed[0][0] <= now:
            _, _, key = heapq.heappop(self._delayed)
            k = self._keys.get(key)
            if k is None or k.work is None or k.queued or k.running or k.due > now:
                continue
            k.queued = True
            self.queued += 1
            heapq.heappush(self._ready, (k.priority, next(self._seq), key))
        return self._delayed[0][0] - now if self._delayed else None

    def has_ready(self) -> bool:
        while self._ready:
            _, _, key = self._ready[0]
            k = self._keys.get(key)
            if k is not None and k.queued:
                return True
            heapq.heappop(self._ready)  # stale: held back after it was queued
        return False

    def take(self) -> tuple[str, Work] | None:
        """The most urgent ready work, now running; None when nothing is ready."""
        while self._ready:
            _, _, key = heapq.heappop(self._ready)
            k = self._keys.get(key)
            if k is None or not k.queued:
                continue
            k.queued = False
            self.queued -= 1
            work, k.work = k.work, None
            if work is None:
                continue
            k.running = True
            self.running += 1
            return key, work
        return None

    def done(self, key: str, now: float) -> bool:
        """A run of ``key`` ended; True when its follow-up work was placed."""
        k = self._keys.get(key)
        if k is None or not k.running:
            return False
        k.running = False
        self.running -= 1
        if k.work is not None:
            k.due = max(k.due, k.hold)
            return self._place(key, k, now)
        self._drop_if_idle(key, k)
        return False

    def _drop_if_idle(self, key: str, k: _Key) -> None:
        if k.work is None and not k.running and not k.queued and k.hold == 0.0:
            del self._keys[key]

    def expire_holds(self, now: float) -> None:
        """Forget holds that are over for keys with nothing to do (keeps the table bounded)."""
        for key in [key for key, k in self._keys.items() if k.work is None and not k.running and k.hold <= now]:
            del self._keys[key]

    def waiting(self, key: str) -> bool:
        k = self._keys.get(key)
        return bool(k and k.work is not None)

    def due(self, key: str) -> float | None:
        k = self._keys.get(key)
        return k.due if k is not None and k.work is not None else None

    def clear(self) -> None:
        self._keys.clear()
        self._ready.clear()
        self._delayed.clear()
        self.queued = self.running = 0

    def __len__(self) -> int:
        return len(self._keys)


class Dispatcher:
    """A :class:`Schedule` run by ``workers`` threads. ``start()`` returns at once; ``stop()`` ends the threads."""

    def __init__(
        self,
        name: str,
        workers: int,
        gate: Callable[[], bool] | None = None,
        gate_max_wait: float = 2.0,
        backoff: Backoff | None = None,
    ) -> None:
        self.name = name
        self.n_workers = workers
        self.gate = gate
        self.gate_max_wait = gate_max_wait
        self.backoff = backoff or Backoff()
        self._cond = threading.Condition()
        self._schedule = Schedule()
        self._stop = False
        self._threads: list[threading.Thread] = []
        self._last_expiry = time.monotonic()
        self.failed = 0
        self.retries = 0

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
            self._schedule.clear()
            self._cond.notify_all()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def submit(self, key: str, work: Work, priority: int = 0, delay: float = 0.0) -> None:
        """Run ``work`` for ``key`` no sooner than ``delay`` seconds from now (and not during a retry's hold)."""
        with self._cond:
            if not self._stop and self._schedule.submit(key, work, priority, time.monotonic(), delay):
                self._cond.notify()

    def submit_many(self, items: list[tuple[str, Work]], priority: int = 0) -> None:
        """Many keys under one lock (a cycle's bindings): less contention than one ``submit`` each."""
        with self._cond:
            if self._stop:
                return
            now = time.monotonic()
            added = sum(1 for key, work in items if self._schedule.submit(key, work, priority, now))
            if added:
                self._cond.notify(min(added, self.n_workers))

    def retry(self, key: str, work: Work, priority: int = 0) -> float:
        """Run ``work`` again after the key's next backoff step, and hold the key until then. Returns the delay."""
        delay = self.backoff.next(key)
        with self._cond:
            self.retries += 1
            if not self._stop:
                now = time.monotonic()
                self._schedule.hold(key, now + delay)
                if self._schedule.submit(key, work, priority, now, delay):
                    self._cond.notify()
        return delay

    def forget(self, key: str) -> None:
        """The key succeeded: its backoff starts over and its hold ends."""
        self.backoff.forget(key)
        with self._cond:
            self._schedule.release(key)

    def pending(self) -> int:
        with self._cond:
            return self._schedule.queued + self._schedule.running

    def busy(self) -> bool:
        with self._cond:
            return bool(self._schedule.queued or self._schedule.running)

    def wait_idle(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.busy():
                return True
            time.sleep(0.01)
        return not self.busy()

    def _worker(self) -> None:
        held_since: float | None = None
        while True:
            with self._cond:
                while True:
                    if self._stop:
                        return
                    now = time.monotonic()
                    wait = self._schedule.promote(now)
                    if self._schedule.has_ready():
                        break
                    if now - self._last_expiry > 60.0:
                        self._last_expiry = now
                        self._schedule.expire_holds(now)
                    self._cond.wait(wait if wait is not None else 1.0)
                if self.gate is not None and not self.gate():
                    now = time.monotonic()
                    held_since = held_since or now
                    if now - held_since < self.gate_max_wait:
                        self._cond.wait(0.1)
                        continue
                held_since = None
                taken = self._schedule.take()
                if taken is None:
                    continue
                key, work = taken
            try:
                work()
            except Exception:
                self.failed += 1
                log.exception("%s: work for %s failed", self.name, key)
            finally:
                with self._cond:
                    if not self._stop and self._schedule.done(key, time.monotonic()):
                        self._cond.notify()

"""Keep CPython's cyclic garbage collector off the operators' long-lived objects.

Why: an operator holds every object it watches, and the collector's full collections scan every tracked object. At
5,000 nodes and 40,000 pods the scheduler holds about 3.4 million of them, and one full collection costs 1.75 s of
CPU on a quiet machine. CPython starts one whenever a quarter as many objects as the last full collection found have
survived since, which the watch's churn after a burst of bindings does within seconds: the collection then stops
every thread (a scheduling cycle included) for seconds, in the middle of a preemption. What survives a cycle is the
cache's and the kept session's, long-lived by nature and mostly free of reference cycles (JSON trees and cache
entries hold none; the kept gang trees do, and live as long as their PodGroup), so after each cycle the young
generations are collected (what the cycle threw away) and everything that is left is moved to the permanent
generation (``gc.freeze``), which no collection scans. Reference counting still frees frozen objects as usual; only
garbage *cycles* among them wait, until the next thaw: every ``THAW_PERIOD``, at the end of a cycle that left
nothing to do and that no change woke (the scheduler's slow resync of a quiet cluster), or after three periods in
any case, the permanent generation is collected in full once.

Also here: the pause of the collector while informers list (:class:`CollectorPause`).
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections.abc import Callable, Iterator

THAW_PERIOD = 600.0  # seconds between full collections of the frozen objects


class CollectorPause:
    """Pause Python's cyclic garbage collector while any informer lists (and while the scheduler runs a cycle).

    A list of thousands of objects builds hundreds of thousands of dicts and lists at once, and every one survives:
    the collector runs over and over while the heap grows and finds nothing (JSON trees and cache entries hold no
    reference cycles), which made listing 4,800 pods and as many PodGroups take about three times the CPU it takes
    with the collector paused (1.4-1.9 s against 0.5 s). Reference counting still frees everything as usual; the
    collector resumes when the last concurrent list is done (unless it was off before)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._resume = False

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._active == 0:
                self._resume = gc.isenabled()
                gc.disable()
            self._active += 1
        try:
            yield
        finally:
            with self._lock:
                self._active -= 1
                if self._active == 0 and self._resume:
                    gc.enable()


collector_paused = CollectorPause()


class CycleFreeze:
    """After each scheduling cycle: collect the young generations, then freeze what is left (see the module)."""

    def __init__(self, thaw_period: float = THAW_PERIOD, clock: Callable[[], float] = time.monotonic) -> None:
        self.thaw_period = thaw_period
        self._clock = clock
        self._thawed = clock()
        self.thaws = 0

    def after_cycle(self, idle: bool) -> None:
        """``idle``: the cycle left nothing to do and nothing is changing, so a full collection now is unlikely to
        delay a decision (one arriving meanwhile waits for it: 2-5 s of CPU at 5,000 nodes, every ``THAW_PERIOD``)."""
        since = self._clock() - self._thawed
        if since >= self.thaw_period and (idle or since >= 3 * self.thaw_period):
            gc.unfreeze()
            gc.collect()
            self._thawed = self._clock()
            self.thaws += 1
        else:
            gc.collect(1)
        gc.freeze()

    @staticmethod
    def release() -> None:
        """Hand the frozen objects back to the collector (the operator stops; the process may go on)."""
        gc.unfreeze()

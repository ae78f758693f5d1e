"""Simulated time: the engine's event queue and the scheduling-period grid its cycles run on.

Why a queue with a grid: KAI runs a cycle every ``--schedule-period``; the engine keeps that grid (a cycle only ever
runs at a multiple of the period) but asks for one only when something can have changed. At most one cycle is
pending: asking for an earlier one supersedes it. Same inputs, same order: events are ordered by (time, kind,
sequence), never by wall clock or hash order.
"""

from __future__ import annotations

import heapq
import math
from typing import Any

from kai_ray.sim.workloads import RUNNING

# event kinds, in the order they are handled at the same instant
COMPLETE, RELEASE, ARRIVE, SCALE, AUTOSCALE, CYCLE, WARM = range(7)


def _tick(t: float, period: float, strictly_after: bool = False) -> float:
    k = math.floor(t / period + 1e-9) + 1 if strictly_after else math.ceil(t / period - 1e-9)
    return round(k * period, 9)


class EventQueue:
    """Events by (time, kind, sequence), and the one scheduling cycle asked for, if any."""

    def __init__(self, schedule_period: float) -> None:
        self._period = schedule_period
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self._cycle_at: float | None = None

    def __bool__(self) -> bool:
        return bool(self._heap)

    def push(self, t: float, kind: int, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, kind, self._seq, payload))

    def want_cycle(self, t: float, strictly_after: bool = False) -> None:
        """A cycle at the first tick at (or strictly after) ``t``, unless one is already due no later."""
        at = _tick(t, self._period, strictly_after)
        if self._cycle_at is not None and self._cycle_at <= at:
            return
        self._cycle_at = at
        self.push(at, CYCLE, at)

    def next_time(self) -> float | None:
        """The time of the next live event, dropping superseded completions, warm-ups and cycles on the way: time
        does not move for them. None when no event is left."""
        while self._heap:
            t, kind, _, payload = self._heap[0]
            if not self._obsolete(kind, payload):
                return t
            heapq.heappop(self._heap)
        return None

    def pop_at(self, t: float) -> tuple[int, Any] | None:
        """The next event at ``t`` (live or not), or None when none is left at ``t``."""
        if not self._heap or self._heap[0][0] != t:
            return None
        _, kind, _, payload = heapq.heappop(self._heap)
        return kind, payload

    def take_cycle(self, payload: float) -> bool:
        """Whether a popped cycle event is the one asked for (a superseded one is not), clearing the request."""
        if payload != self._cycle_at:
            return False
        self._cycle_at = None
        return True

    def _obsolete(self, kind: int, payload: Any) -> bool:
        if kind in (COMPLETE, WARM):
            w, version = payload
            return bool(version != w.version or w.state != RUNNING)
        return kind == CYCLE and payload != self._cycle_at

"""Historical usage per queue, the input of KAI's time-based fair share (``U'`` in KAI's design), kept without a TSDB.

KAI's scheduler asks Prometheus, per resource, for ``sum_over_time`` of each queue's allocated amount over a window,
each sample weighted by ``0.5 ** (age / halfLifePeriod)``, and divides it by the same sum of the cluster's capacity:
a queue that held 8 of 10 GPUs for 3 of the last 10 hours scores 0.24. The division then gives a queue the share
``max(0, W' + k (W' - U'))`` of the over-quota pool (:mod:`kai_ray.scheduler.fairshare`).

Why integrate here instead of storing samples: the scheduler already knows every queue's allocation at every cycle,
so the integral of a piecewise-constant level is exact, and a decayed integral needs only a running sum
(``S <- S * 2**(-dt/h) + level * h/ln2 * (1 - 2**(-dt/h))``). A sliding window needs to forget what leaves it, so
each series is kept in time buckets (``SLIDING_BUCKETS`` per window), each decayed to its own end; a tumbling or cron
window is one bucket that starts afresh at each boundary. The only approximation is the sliding window's oldest
bucket, counted in proportion to the part of it still inside the window. The state is small and plain (lists of
floats) so an adapter can persist it: the operator keeps it in the Queue status, the simulator in memory.

Pure: no clock, no I/O. Times are seconds (the operator passes Unix time, the simulator its own clock, read as Unix
time when a cron window needs a calendar). Resources are (gpu, cpu, memory) in any consistent units: they cancel.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from kai_ray.durations import parse_duration

WINDOW_TYPES = ("sliding", "tumbling", "cron")
SLIDING_BUCKETS = 48  # buckets per sliding window: the edge error is at most one bucket's share of the window
LEDGER_VERSION = 1
Vec = tuple[float, float, float]
ZERO: Vec = (0.0, 0.0, 0.0)


class UsageConfigError(ValueError):
    """A bad usage setting; the message starts with the field's name."""


@dataclass(frozen=True, slots=True)
class UsageParams:
    """KAI's ``usageDBConfig.usageParams`` (same names, same defaults), in seconds.

    ``half_life_period`` 0 means no decay (KAI: unset, or zero/negative). ``tumbling_window_start_time`` None means
    "when accounting started" (KAI: the current time). ``fetch_interval`` is how often the usage fed to the fair-share
    division is refreshed (and, in the operator, persisted); data older than ``staleness_period`` is still used, with
    a warning, as KAI does.
    """

    window_size: float = 7 * 86400.0
    window_type: str = "sliding"
    half_life_period: float = 0.0
    tumbling_window_start_time: float | None = None
    cron_string: str = ""
    fetch_interval: float = 60.0
    staleness_period: float = 300.0

    def validate(self) -> UsageParams:
        if self.window_type not in WINDOW_TYPES:
            raise UsageConfigError(f"windowType: {self.window_type!r} is not one of {', '.join(WINDOW_TYPES)}")
        if not self.window_size > 0 and self.window_type != "cron":
            raise UsageConfigError(f"windowSize: {self.window_size:g} must be positive")
        if self.half_life_period < 0:
            raise UsageConfigError(f"halfLifePeriod: {self.half_life_period:g} must not be negative (0: no decay)")
        if self.fetch_interval <= 0:
            raise UsageConfigError(f"fetchInterval: {self.fetch_interval:g} must be positive")
        if self.staleness_period < 0:
            raise UsageConfigError(f"stalenessPeriod: {self.staleness_period:g} must not be negative")
        if self.window_type == "cron":
            if not self.cron_string:
                raise UsageConfigError("cronString: required with windowType cron (e.g. '0 0 * * 1': weekly)")
            _cron_check(self.cron_string)
        return self

    def fingerprint(self) -> str:
        """What a persisted ledger must have been kept with to be reusable (bucketing, decay, window boundaries)."""
        if self.window_type == "cron":
            where = self.cron_string
        elif self.window_type == "tumbling":
            anchor = self.tumbling_window_start_time
            where = f"{self.window_size:g}@{'auto' if anchor is None else f'{anchor:g}'}"
        else:
            where = f"{self.window_size:g}/{SLIDING_BUCKETS}"
        return f"v{LEDGER_VERSION}:{self.window_type}:{where}:h{self.half_life_period:g}"


PARAM_KEYS = {
    "windowSize": "window_size",
    "windowType": "window_type",
    "halfLifePeriod": "half_life_period",
    "tumblingWindowStartTime": "tumbling_window_start_time",
    "cronString": "cron_string",
    "fetchInterval": "fetch_interval",
    "stalenessPeriod": "staleness_period",
}


def usage_params_from(raw: Mapping[str, Any] | None, where: str = "usageParams") -> UsageParams:
    """KAI's ``usageParams`` mapping (camelCase or snake_case keys; durations as ``1w``/``30m`` or seconds;
    ``tumblingWindowStartTime`` as RFC 3339) -> validated UsageParams. Raises UsageConfigError naming the field."""
    values: dict[str, Any] = {}
    snake = {v: v for v in PARAM_KEYS.values()}
    for key, value in (raw or {}).items():
        name = PARAM_KEYS.get(str(key)) or snake.get(str(key))
        if name is None:
            raise UsageConfigError(f"{where}.{key}: unknown field (known: {', '.join(PARAM_KEYS)})")
        if value is None or value == "":
            continue
        if name in ("window_type", "cron_string"):
            values[name] = str(value)
        elif name == "tumbling_window_start_time":
            values[name] = _timestamp(value, f"{where}.{key}")
        else:
            values[name] = _seconds(value, f"{where}.{key}")
    try:
        return UsageParams(**values).validate()
    except UsageConfigError as exc:
        raise UsageConfigError(f"{where}.{exc}") from None


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    parsed = parse_duration(str(value))
    if parsed is None:
        raise UsageConfigError(f"{where}: {value!r} is not a duration (e.g. 1w, 24h, 90m, 30s)")
    return parsed


def _timestamp(value: Any, where: str) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise UsageConfigError(f"{where}: {value!r} is not an RFC 3339 time (e.g. 2025-01-01T00:00:00Z)") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def _cron_check(expr: str) -> None:
    from croniter import croniter

    if not croniter.is_valid(expr):
        raise UsageConfigError(f"cronString: {expr!r} is not a cron expression (minute hour day month weekday)")


@lru_cache(maxsize=4096)
def _cron_bounds(expr: str, t: float) -> tuple[float, float]:
    """The cron window holding ``t``: [the last occurrence at or before t, the next one after it)."""
    from croniter import croniter

    nxt = float(croniter(expr, datetime.fromtimestamp(t, UTC)).get_next(float))
    start = float(croniter(expr, datetime.fromtimestamp(nxt, UTC)).get_prev(float))
    return start, nxt


def decay_factor(dt: float, half_life: float) -> float:
    return 1.0 if half_life <= 0 or dt <= 0 else 0.5 ** (dt / half_life)


def decayed_integral(dt: float, half_life: float) -> float:
    """The integral over the last ``dt`` seconds of a level of 1, each instant weighted by its decay at the end."""
    if dt <= 0:
        return 0.0
    if half_life <= 0:
        return dt
    return half_life / math.log(2) * (1.0 - 0.5 ** (dt / half_life))


@dataclass(slots=True)
class Series:
    """One accumulated quantity (a queue's allocation, or the cluster's capacity) in window buckets.

    ``values[i]`` is the decayed integral over bucket ``starts[i]`` as of ``min(bucket end, time)``; ``level`` is
    the amount held since ``time`` (until the next observation)."""

    time: float
    level: Vec = ZERO
    starts: list[float] = field(default_factory=list)
    values: list[list[float]] = field(default_factory=list)

    def to_state(self) -> dict[str, Any]:
        pairs = zip(self.starts, self.values, strict=True)
        buckets = [[start, *(_short(v) for v in vals)] for start, vals in pairs if any(vals)]
        return {"time": self.time, "level": [_short(v) for v in self.level], "buckets": buckets}

    @staticmethod
    def from_state(state: Mapping[str, Any]) -> Series:
        """The inverse of :meth:`to_state`; raises ValueError on a malformed record."""
        time = float(state["time"])
        level = _vec(state.get("level") or ZERO)
        starts: list[float] = []
        values: list[list[float]] = []
        for b in state.get("buckets") or []:
            if len(b) != 4:
                raise ValueError(f"bucket {b!r}: expected [start, gpu, cpu, memory]")
            starts.append(float(b[0]))
            values.append([float(x) for x in b[1:]])
        if starts != sorted(starts):
            raise ValueError("buckets are not in time order")
        return Series(time, level, starts, values)

    def is_empty(self) -> bool:
        return self.level == ZERO and not any(any(v) for v in self.values)


def _short(x: float) -> float:
    """Seven significant digits: amounts need no more, and the Queue status stays small. Times are kept exact."""
    return float(f"{x:.7g}")


def _vec(values: Iterable[Any]) -> Vec:
    v = [float(x) for x in values]
    if len(v) != 3 or not all(math.isfinite(x) and x >= 0 for x in v):
        raise ValueError(f"{v!r}: expected three non-negative numbers (gpu, cpu, memory)")
    return (v[0], v[1], v[2])


class UsageLedger:
    """Every queue's decayed, windowed allocation and the cluster's capacity; :meth:`usage` gives KAI's ``U'``.

    Feed it with :meth:`observe` whenever allocations may have changed (the level observed is held until the next
    observation). Queues are keyed by name, as KAI keys Prometheus samples by ``queue_name``: a queue deleted and
    created again keeps its history.
    """

    def __init__(self, params: UsageParams, anchor: float | None = None) -> None:
        self.params = params.validate()
        self.anchor = params.tumbling_window_start_time if anchor is None else anchor
        self.capacity: Series | None = None
        self.queues: dict[str, Series] = {}

    # --- windows -------------------------------------------------------------------------------------------------

    @property
    def bucket_width(self) -> float:
        return self.params.window_size / SLIDING_BUCKETS

    def bounds(self, t: float) -> tuple[float, float]:
        """The bucket holding instant ``t``, [start, end)."""
        p = self.params
        if p.window_type == "cron":
            return _cron_bounds(p.cron_string, t)
        if p.window_type == "tumbling":
            anchor = self.anchor if self.anchor is not None else t
            k = math.floor((t - anchor) / p.window_size)
            start = anchor + k * p.window_size
            return start, start + p.window_size
        w = self.bucket_width
        k = math.floor(t / w)
        return k * w, (k + 1) * w

    def window_start(self, t: float) -> float:
        if self.params.window_type == "sliding":
            return t - self.params.window_size
        return self.bounds(t)[0]

    def _accounting_starts(self) -> float:
        """Before a tumbling window's anchor nothing is counted (KAI: a window that starts in the future is empty)."""
        if self.params.window_type == "tumbling" and self.anchor is not None:
            return self.anchor
        return -math.inf

    # --- integration -----------------------------------------------------------------------------------------------

    def _advance(self, s: Series, t1: float) -> None:
        t = s.time
        if t1 <= t:
            return
        if s.level == ZERO and not s.values:
            s.time = t1
            return
        t = max(t, min(t1, self._accounting_starts()))
        h = self.params.half_life_period
        # a gap longer than the window: nothing before its last window can matter any more
        horizon = self.window_start(t1) - (self.bucket_width if self.params.window_type == "sliding" else 0.0)
        if t < horizon:
            s.starts.clear()
            s.values.clear()
            t = horizon
        held = s.level != ZERO
        while t < t1:
            start, end = self.bounds(t)
            seg_end = min(end, t1)
            current = bool(s.starts) and s.starts[-1] == start
            if current and h > 0:
                f = decay_factor(seg_end - t, h)
                s.values[-1] = [v * f for v in s.values[-1]]
            if held:
                if not current:
                    s.starts.append(start)
                    s.values.append([0.0, 0.0, 0.0])
                g = decayed_integral(seg_end - t, h)
                vals = s.values[-1]
                for r in range(3):
                    vals[r] += s.level[r] * g
            t = seg_end
        s.time = t1
        self._prune(s, t1)

    def _prune(self, s: Series, t: float) -> None:
        ws = self.window_start(t)
        drop = 0
        while drop < len(s.starts) and self.bounds(s.starts[drop])[1] <= ws:
            drop += 1
        if drop:
            del s.starts[:drop]
            del s.values[:drop]

    def advance(self, now: float) -> None:
        """Integrate every held level up to ``now``."""
        if self.capacity is not None:
            self._advance(self.capacity, now)
        for s in self.queues.values():
            self._advance(s, now)

    def observe(self, now: float, allocated: Mapping[str, Sequence[float]], capacity: Sequence[float]) -> None:
        """Integrate up to ``now`` the levels held since the last observation, then hold these: ``allocated`` per
        queue (every queue of the tree, parents included: a parent's is its subtree's) and the cluster's capacity."""
        if self.params.window_type == "tumbling" and self.anchor is None:
            self.anchor = now
        if self.capacity is None:
            self.capacity = Series(now)
        self.advance(now)
        self.capacity.level = _vec(capacity)
        for name, s in self.queues.items():
            if name not in allocated:
                s.level = ZERO
        for name, alloc in allocated.items():
            series = self.queues.get(name)
            if series is None:
                series = self.queues[name] = Series(now)
            series.level = _vec(max(0.0, x) for x in alloc)

    def forget_empty(self) -> None:
        """Drop series that hold nothing any more (queues deleted long ago)."""
        for name in [n for n, s in self.queues.items() if s.is_empty()]:
            del self.queues[name]

    # --- the answer --------------------------------------------------------------------------------------------

    def _weighted(self, s: Series, now: float) -> list[float]:
        h = self.params.half_life_period
        ws = self.window_start(now)
        out = [0.0, 0.0, 0.0]
        for start, vals in zip(s.starts, s.values, strict=True):
            _, end = self.bounds(start)
            if end <= ws:
                continue
            frac = 1.0 if start >= ws else (end - ws) / (end - start)
            k = frac * decay_factor(now - min(end, s.time), h)
            for r in range(3):
                out[r] += k * vals[r]
        return out

    def usage(self, now: float | None = None) -> dict[str, Vec]:
        """KAI's normalised usage per queue and resource: decayed allocation over decayed capacity in the window.

        ``now`` defaults to the last observation; a later ``now`` integrates the held levels first."""
        if self.capacity is None:
            return {}
        if now is not None:
            self.advance(now)
        now = self.capacity.time
        if now < self._accounting_starts():
            return {}
        cap = self._weighted(self.capacity, now)
        out: dict[str, Vec] = {}
        for name, s in self.queues.items():
            used = self._weighted(s, now)
            u = [used[r] / cap[r] if cap[r] > 0 else 0.0 for r in range(3)]
            if any(u):
                out[name] = (u[0], u[1], u[2])
        return out

    # --- persistence ---------------------------------------------------------------------------------------------

    def cluster_state(self) -> dict[str, Any] | None:
        """What every queue's record needs besides its own series: the capacity, and the window anchor."""
        if self.capacity is None:
            return None
        state = {"params": self.params.fingerprint(), **self.capacity.to_state()}
        if self.params.window_type == "tumbling" and self.anchor is not None:
            state["anchor"] = self.anchor
        return state

    def queue_state(self, name: str) -> dict[str, Any] | None:
        s = self.queues.get(name)
        if s is None:
            return None
        return {"params": self.params.fingerprint(), **s.to_state()}

    @classmethod
    def restore(
        cls, params: UsageParams, cluster: Mapping[str, Any] | None, queues: Mapping[str, Mapping[str, Any]]
    ) -> tuple[UsageLedger, list[str]]:
        """A ledger from persisted records, and one line per record it could not use (bad, or kept with other
        settings: a changed window or half-life starts that part afresh). Every series is brought to the time of
        the newest record by holding its recorded level, so records written at different times agree."""
        ledger = cls(params)
        problems: list[str] = []
        fp = params.fingerprint()
        if cluster is None:
            if queues:
                problems.append("no capacity record (kept on top-level queues): starting afresh")
            return ledger, problems
        if cluster.get("params") != fp:
            problems.append(f"usage kept with other settings ({cluster.get('params')!r}, now {fp!r}): starting afresh")
            return ledger, problems
        try:
            ledger.capacity = Series.from_state(cluster)
            if cluster.get("anchor") is not None and ledger.anchor is None:
                ledger.anchor = float(cluster["anchor"])
        except (KeyError, TypeError, ValueError) as exc:
            problems.append(f"capacity record unreadable ({exc}): starting afresh")
            return cls(params), problems
        for name, state in queues.items():
            if state.get("params") != fp:
                problems.append(f"queue {name}: usage kept with other settings: its history starts afresh")
                continue
            try:
                ledger.queues[name] = Series.from_state(state)
            except (KeyError, TypeError, ValueError) as exc:
                problems.append(f"queue {name}: usage record unreadable ({exc}): its history starts afresh")
        latest = max([ledger.capacity.time, *(s.time for s in ledger.queues.values())])
        ledger.advance(latest)
        return ledger, problems

"""The work queue: property tests of its decisions (virtual clock) and regression tests of the threaded dispatcher.

Regressions: a retry submitted from inside the failing work (the key is running) used to lose its delay,
so "retrying in 30.0s" ran at once, hundreds of times a second; and ``Backoff.next`` computed ``base * 2**n``, which
raised ``OverflowError`` after ~1,024 failures inside the error handler, so the work was silently dropped.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kai_ray.k8s.base.workqueue import Backoff, Dispatcher, Schedule
from tests.k8s.helpers import wait_until

KEYS = st.sampled_from(["a", "b", "c"])
EPS = 1e-9


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class _Model:
    pending: list[tuple[float, int]] = field(default_factory=list)  # (earliest start, work id) since the last take
    running: int | None = None  # work id
    hold: float = 0.0


class ScheduleMachine(RuleBasedStateMachine):
    """Random submissions, delays, failures with backoff, successes and clock steps against :class:`Schedule`."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = _Clock()
        self.backoff = Backoff(base=0.5, cap=4.0, clock=self.clock)
        self.q = Schedule()
        self.model: dict[str, _Model] = {}
        self.ids = 0
        self.ran: list[tuple[str, int, float]] = []
        self.last_start: dict[str, float] = {}

    def _m(self, key: str) -> _Model:
        return self.model.setdefault(key, _Model())

    def _submit(self, key: str, delay: float) -> None:
        self.ids += 1
        m = self._m(key)
        m.pending.append((self.clock.now + delay, self.ids))
        self.q.submit(key, _work(self.ids), priority=0, now=self.clock.now, delay=delay)

    @rule(key=KEYS, delay=st.sampled_from([0.0, 0.0, 0.1, 1.0, 3.0]))
    def submit(self, key: str, delay: float) -> None:
        self._submit(key, delay)

    @rule(dt=st.sampled_from([0.05, 0.3, 1.0, 5.0]))
    def advance(self, dt: float) -> None:
        self.clock.now += dt

    @rule()
    def take(self) -> None:
        self.q.promote(self.clock.now)
        taken = self.q.take()
        if taken is None:
            return
        key, work = taken
        m = self._m(key)
        assert m.running is None, f"{key} runs twice at once"
        assert m.pending, f"{key} ran without a submission"
        earliest = min(t for t, _ in m.pending)
        assert self.clock.now + EPS >= earliest, f"{key} started at {self.clock.now} before its due {earliest}"
        assert self.clock.now + EPS >= m.hold, f"{key} started at {self.clock.now} during its hold to {m.hold}"
        newest = max(i for _, i in m.pending)
        assert work.id == newest, f"{key} ran work {work.id}, not the newest {newest}"  # type: ignore[attr-defined]
        m.pending.clear()
        m.running = newest
        self.ran.append((key, newest, self.clock.now))
        self.last_start[key] = self.clock.now

    def _running(self) -> list[str]:
        return sorted(k for k, m in self.model.items() if m.running is not None)

    @precondition(lambda self: bool(self._running()))
    @rule(data=st.data(), resubmit=st.sampled_from([None, 0.0, 2.0]))
    def succeed(self, data: st.DataObject, resubmit: float | None) -> None:
        key = data.draw(st.sampled_from(self._running()))
        if resubmit is not None:  # e.g. a watch event while the work runs
            self._submit(key, resubmit)
        self.backoff.forget(key)
        self.q.release(key)
        self._m(key).hold = 0.0
        self._m(key).running = None
        self.q.done(key, self.clock.now)

    @precondition(lambda self: bool(self._running()))
    @rule(data=st.data())
    def fail(self, data: st.DataObject) -> None:
        """The work's error handler: retry after the next backoff step (while the key is still running)."""
        key = data.draw(st.sampled_from(self._running()))
        delay = self.backoff.next(key)
        until = self.clock.now + delay
        self.q.hold(key, until)
        m = self._m(key)
        m.hold = max(m.hold, until)
        self._submit(key, delay)
        m.running = None
        self.q.done(key, self.clock.now)

    @invariant()
    def counters_agree(self) -> None:
        assert self.q.running == sum(1 for m in self.model.values() if m.running is not None)
        assert self.q.queued >= 0

    def teardown(self) -> None:
        """Liveness: with time passing and nothing new, every submitted work runs (nothing is dropped)."""
        for _ in range(200):
            for key in self._running():
                self._m(key).running = None
                self.q.done(key, self.clock.now)
            self.clock.now += 5.0
            self.q.promote(self.clock.now)
            while (taken := self.q.take()) is not None:
                key, work = taken
                m = self._m(key)
                assert work.id == max(i for _, i in m.pending)  # type: ignore[attr-defined]
                m.pending.clear()
                m.running = work.id  # type: ignore[attr-defined]
            if not any(m.pending for m in self.model.values()) and not self._running():
                break
        lost = {k: m.pending for k, m in self.model.items() if m.pending}
        assert not lost, f"work never ran: {lost}"


def _work(i: int) -> object:
    def run() -> None:
        pass

    run.id = i  # type: ignore[attr-defined]
    return run


TestSchedule = ScheduleMachine.TestCase
TestSchedule.settings = settings(max_examples=100, stateful_step_count=50, deadline=None)


@given(st.floats(0.001, 5.0), st.floats(1.0, 100.0), st.integers(1, 3000))
@settings(max_examples=60, deadline=None)
def test_backoff_grows_to_its_cap_and_never_overflows(base: float, factor: float, n: int) -> None:
    cap = base * factor
    b = Backoff(base=base, cap=cap, clock=lambda: 0.0)
    delays = [b.next("k") for _ in range(n)]
    assert delays[0] == base
    assert all(d1 <= d2 for d1, d2 in itertools.pairwise(delays)), "never shrinks while failing"
    assert all(base <= d <= cap for d in delays)
    if n > 200:
        assert delays[-1] == cap
    b.forget("k")
    assert b.next("k") == base


def test_backoff_after_many_failures_still_answers() -> None:
    """~1,024 failures used to raise OverflowError from ``base * 2**n``."""
    b = Backoff()
    for _ in range(5000):
        d = b.next("k")
    assert d == b.cap
    assert b.failures("k") <= 10


def test_backoff_starts_over_when_a_key_stopped_failing_and_stays_bounded() -> None:
    clock = _Clock()
    b = Backoff(base=1.0, cap=8.0, clock=clock)
    for _ in range(5):
        b.next("k")
    clock.now += 100.0
    assert b.next("k") == 1.0
    peak = 0
    for i in range(20_000):  # keys that failed once and were never forgotten (their objects went away)
        b.next(f"gone-{i}")
        clock.now += 0.01
        peak = max(peak, len(b))
    assert peak <= 10_001


def test_delay_of_a_resubmission_while_running_is_honoured() -> None:
    """The work re-submits its own key with a delay while it runs: runs are that delay apart, not back to back."""
    d = Dispatcher("t", 2).start()
    starts: list[float] = []

    def work() -> None:
        starts.append(time.monotonic())
        if len(starts) < 4:
            d.submit("k", work, delay=0.3)

    try:
        d.submit("k", work)
        wait_until("four runs", lambda: len(starts) >= 4, 30)
        time.sleep(0.2)
        assert len(starts) == 4
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        assert all(g >= 0.29 for g in gaps), gaps
    finally:
        d.stop()


def test_a_failing_key_costs_one_run_per_backoff_step_whatever_the_events() -> None:
    """A key that always fails retries through ``retry``; a storm of watch events for it meanwhile adds no runs."""
    d = Dispatcher("t", 4, backoff=Backoff(base=0.1, cap=0.4)).start()
    starts: list[float] = []
    lock = threading.Lock()

    def work() -> None:
        with lock:
            starts.append(time.monotonic())
        d.retry("k", work)

    stop = threading.Event()

    def storm() -> None:
        while not stop.is_set():
            d.submit("k", work)
            time.sleep(0.002)

    try:
        d.submit("k", work)
        t = threading.Thread(target=storm, daemon=True)
        t.start()
        wait_until("six runs", lambda: len(starts) >= 6, 30)
        stop.set()
        t.join()
        with lock:
            seen = list(starts[:6])
        gaps = [b - a for a, b in itertools.pairwise(seen)]
        expected = [0.1, 0.2, 0.4, 0.4, 0.4]
        assert all(g >= e - 0.01 for g, e in zip(gaps, expected, strict=True)), gaps
        assert d.retries >= 5
    finally:
        stop.set()
        d.stop()


def test_success_ends_the_hold_and_resets_the_backoff() -> None:
    d = Dispatcher("t", 2, backoff=Backoff(base=5.0, cap=5.0)).start()
    runs: list[str] = []

    def failing() -> None:
        runs.append("fail")
        d.retry("k", failing)

    def fine() -> None:
        runs.append("ok")
        d.forget("k")

    try:
        d.submit("k", failing)
        wait_until("the first failure", lambda: runs == ["fail"], 30)
        d.forget("k")  # e.g. the object was fixed and reconciled elsewhere
        d.submit("k", fine)
        wait_until("the new work to run at once, not after the 5 s hold", lambda: "ok" in runs, 3)
        assert d.backoff.failures("k") == 0
    finally:
        d.stop()


def test_work_survives_a_thousand_failures() -> None:
    """After more failures than ``2**n`` can express, the retry is still scheduled (it used to be dropped)."""
    b = Backoff(base=0.01, cap=0.05)
    for _ in range(1100):
        b.next("k")
    d = Dispatcher("t", 1, backoff=b).start()
    runs: list[int] = []

    def work() -> None:
        runs.append(1)
        if len(runs) < 3:
            d.retry("k", work)

    try:
        d.submit("k", work)
        wait_until("three runs after >1,000 failures", lambda: len(runs) == 3, 30)
        assert d.failed == 0
    finally:
        d.stop()


def test_never_two_runs_of_one_key_at_once() -> None:
    d = Dispatcher("t", 4)
    active: dict[str, int] = {}
    overlap: list[str] = []
    runs: list[int] = []
    lock = threading.Lock()

    def work(key: str) -> None:
        with lock:
            active[key] = active.get(key, 0) + 1
            if active[key] > 1:
                overlap.append(key)
            runs.append(1)
        time.sleep(0.001)
        with lock:
            active[key] -= 1

    for _ in range(50):
        d.submit("same", lambda: work("same"))
    d.start()
    try:
        assert d.wait_idle(30)
        assert len(runs) == 1, "submissions of a waiting key coalesce"
        for i in range(200):
            d.submit(f"k{i % 3}", lambda i=i: work(f"k{i % 3}"))
        assert d.wait_idle(30)
        assert not overlap
    finally:
        d.stop()


def test_priorities_order_ready_work() -> None:
    d = Dispatcher("t", 1)
    order: list[str] = []
    d.submit("low", lambda: order.append("low"), priority=10)
    d.submit("high", lambda: order.append("high"), priority=0)
    d.start()
    try:
        assert d.wait_idle(30)
        assert order == ["high", "low"]
    finally:
        d.stop()

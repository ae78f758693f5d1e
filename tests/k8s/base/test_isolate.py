"""Per-object isolation: one job that makes the scheduling core raise is found and left out, the rest is scheduled.

The core is pure and meant never to raise on bad input; these tests stand in a core that does (a fake ``run_cycle``
raising whenever a given job is in the snapshot) to prove the operator's safety net, which a real bug would need.
"""

from __future__ import annotations

import logging

import pytest

from kai_ray.k8s.base.isolate import Guard, Quarantine
from kai_ray.scheduler import snapshot as s
from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.decisions import CycleResult

log = logging.getLogger("test")


def _snapshot(n_jobs: int) -> s.Snapshot:
    nodes = [s.Node("n0", s.Resources(8, 64000, 2**40))]
    queues = [s.Queue("q", quota=s.Resources(-1, -1, -1))]
    jobs = [
        s.Job("ns", f"j{i}", "q", pods=[s.Pod(f"u{i}", f"p{i}", "ns", f"ns/j{i}", s.Resources(0, 10, 0))])
        for i in range(n_jobs)
    ]
    return s.Snapshot(nodes, queues, jobs)


class _Core:
    """``run_cycle`` that raises when a poisoned job is in the snapshot (counts its calls)."""

    def __init__(self, poisoned: set[str]) -> None:
        self.poisoned = poisoned
        self.calls = 0

    def __call__(self, snap: s.Snapshot) -> CycleResult:
        self.calls += 1
        bad = [j.key for j in snap.jobs if j.key in self.poisoned]
        if bad:
            raise TypeError(f"cannot handle {bad[0]}")
        return run_cycle(snap)


def test_a_poisoned_job_is_quarantined_and_the_others_are_scheduled() -> None:
    core = _Core({"ns/j13"})
    versions = {"ns/j13": 1}
    clock = [0.0]
    q = Quarantine(core, log, version=lambda key: versions.get(key), clock=lambda: clock[0])
    result = q.run(_snapshot(40))
    assert {b.job for b in result.binds} == {f"ns/j{i}" for i in range(40)} - {"ns/j13"}
    assert set(q.jobs) == {"ns/j13"} and "TypeError: cannot handle ns/j13" in q.jobs["ns/j13"].reason
    assert core.calls <= 2 + 2 + 2 * 6 + 1, "bisection, not one cycle per job"

    calls = core.calls
    q.run(_snapshot(40))
    assert core.calls == calls + 1, "while quarantined it costs nothing"
    versions["ns/j13"] = 2  # the PodGroup changed: tried again (and found again)
    q.run(_snapshot(40))
    assert set(q.jobs) == {"ns/j13"}
    core.poisoned.clear()
    clock[0] += 301.0  # served its time
    assert {b.job for b in q.run(_snapshot(40)).binds} >= {"ns/j13"}
    assert not q.jobs


def test_several_poisoned_jobs_are_all_found() -> None:
    core = _Core({"ns/j0", "ns/j7", "ns/j8"})
    q = Quarantine(core, log)
    result = q.run(_snapshot(9))
    assert set(q.jobs) == {"ns/j0", "ns/j7", "ns/j8"}
    assert len(result.binds) == 6


def test_a_failure_that_is_no_jobs_doing_is_raised() -> None:
    def broken(snap: s.Snapshot) -> CycleResult:
        raise RuntimeError("a node, not a job")

    q = Quarantine(broken, log)
    with pytest.raises(RuntimeError, match="a node"):
        q.run(_snapshot(5))
    assert not q.jobs


def test_guard_skips_the_failing_object_and_logs_its_traceback_once(caplog: pytest.LogCaptureFixture) -> None:
    guard = Guard("step", log)

    def step(x: int) -> int:
        if x == 3:
            raise ValueError("three")
        return x * 2

    with caplog.at_level(logging.DEBUG, logger="test"):
        out = [guard(str(x), step, x, default=-1) for x in range(5)]
        guard("3", step, 3, default=-1)
    assert out == [0, 2, 4, -1, 8]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is not None and "ValueError: three" in errors[0].getMessage()
    assert guard.failures == 2

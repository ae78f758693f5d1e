"""One object's failure costs that object only: per-object guards for the operators' loops, and a quarantine for the
scheduling core.

Why: the operators handle every object of the cluster in shared loops (a scheduling cycle, a reconcile pool, the
headroom publication). An exception raised for one object, if it escapes, stalls the loop for all of them, and since
the object is still there after a restart, the stall comes back. So each per-object step runs under
:class:`Guard` (the error is logged with its traceback once per object and distinct error, the object is skipped,
the rest goes on), and the core's cycle runs under :class:`Quarantine`: if ``run_cycle`` raises, the jobs that make
it raise are found by bisection and left out of scheduling until their PodGroup changes, with the error as their
reason, while every other job is scheduled in the same cycle.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kai_ray.scheduler import snapshot as s
from kai_ray.scheduler.decisions import CycleResult

T = TypeVar("T")

QUARANTINE_FOR = 300.0  # seconds a job that broke the core stays out, unless its PodGroup changes first
MAX_TRACKED = 10_000


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class Guard:
    """``guard(key, fn, *args, default=...)``: ``fn(*args)``, or ``default`` when it raises (logged: the traceback
    once per key and distinct error, then one line at debug level)."""

    def __init__(self, what: str, logger: logging.Logger) -> None:
        self.what = what
        self.log = logger
        self._seen: dict[str, str] = {}
        self.failures = 0

    def __call__(self, key: str, fn: Callable[..., T], *args: Any, default: T) -> T:
        try:
            out = fn(*args)
        except Exception as exc:
            self.failed(key, exc)
            return default
        if self._seen:
            self._seen.pop(key, None)
        return out

    def failed(self, key: str, exc: BaseException) -> bool:
        """Log one failure for ``key``; True when it is new (its traceback was logged)."""
        self.failures += 1
        what = describe(exc)
        first = self._seen.get(key) != what
        if len(self._seen) >= MAX_TRACKED:
            self._seen.clear()
        self._seen[key] = what
        if first:
            self.log.error("%s of %s failed: %s (skipped; the others go on)", self.what, key, what, exc_info=exc)
        else:
            self.log.debug("%s of %s failed again: %s", self.what, key, what)
        return first


@dataclasses.dataclass
class Quarantined:
    job: str
    reason: str
    version: Any  # what identified the job when it was quarantined (its PodGroup's signature)
    until: float  # monotonic


class Quarantine:
    """Runs the core; when it raises, finds the jobs that make it raise and schedules everything else without them.

    ``version(job_key)`` identifies the current state of a job's PodGroup: a quarantined job comes back as soon as
    it changes (or after :data:`QUARANTINE_FOR`). Jobs are found by bisection over the snapshot's jobs (a job is
    guilty when a cycle over it alone with the rest of the cluster raises), so finding one culprit among n jobs costs
    about 2·log2(n) extra cycles, and only in a cycle that failed.
    """

    def __init__(
        self,
        run: Callable[[s.Snapshot], CycleResult],
        logger: logging.Logger,
        version: Callable[[str], Any] = lambda key: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.run_cycle = run
        self.log = logger
        self.version = version
        self.clock = clock
        self.jobs: dict[str, Quarantined] = {}

    def active(self) -> dict[str, Quarantined]:
        """The quarantined jobs, after releasing those that changed or served their time."""
        now = self.clock()
        for key, q in list(self.jobs.items()):
            if now >= q.until or self.version(key) != q.version:
                self.log.info("job %s leaves quarantine", key)
                del self.jobs[key]
        return dict(self.jobs)

    def run(self, snapshot: s.Snapshot) -> CycleResult:
        held = self.active()
        if held:
            snapshot = dataclasses.replace(snapshot, jobs=[j for j in snapshot.jobs if j.key not in held])
        try:
            return self.run_cycle(snapshot)
        except Exception as exc:
            error = exc
        jobs = snapshot.jobs
        guilty: dict[str, str] = {}
        if jobs and self._fails(snapshot, []) is None:  # with no job at all the core copes: some job is the cause
            guilty = {jobs[0].key: describe(error)} if len(jobs) == 1 else self._culprits(snapshot, jobs)
        if not guilty:
            raise error  # not one job's doing (a queue, a node, a combination): the cycle fails as a whole
        now = self.clock()
        for key, why in guilty.items():
            if len(self.jobs) >= MAX_TRACKED:
                break
            self.log.error("job %s makes the scheduling core fail (%s); it is left out until it changes", key, why)
            self.jobs[key] = Quarantined(key, why, self.version(key), now + QUARANTINE_FOR)
        rest = dataclasses.replace(snapshot, jobs=[j for j in snapshot.jobs if j.key not in guilty])
        return self.run_cycle(rest)

    def _fails(self, snapshot: s.Snapshot, jobs: list[s.Job]) -> str | None:
        try:
            self.run_cycle(dataclasses.replace(snapshot, jobs=jobs))
        except Exception as exc:
            return describe(exc)
        return None

    def _culprits(self, snapshot: s.Snapshot, jobs: list[s.Job]) -> dict[str, str]:
        """Among ``jobs`` (more than one; a cycle over them raises), the jobs that make a cycle raise on their own."""
        half = len(jobs) // 2
        out: dict[str, str] = {}
        for part in (jobs[:half], jobs[half:]):
            why = self._fails(snapshot, part)
            if why is None:
                continue
            if len(part) == 1:
                out[part[0].key] = why
            else:
                out.update(self._culprits(snapshot, part))
        return out

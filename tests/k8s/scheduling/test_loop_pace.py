"""When the scheduler's loop runs a periodic cycle and when it sleeps until a change (no API server)."""

from __future__ import annotations

from kai_ray.k8s.scheduling.operator import IDLE_RESYNC, _busy, cycle_earliest, idle_period, timed_waits
from kai_ray.scheduler import snapshot as s
from kai_ray.scheduler.decisions import Bind, CycleResult, JobStatus, Reason


def _result(*verdicts: JobStatus, binds: int = 0) -> CycleResult:
    return CycleResult(binds=[Bind(f"u{i}", "ns/a", "n1") for i in range(binds)], jobs={v.job: v for v in verdicts})


def test_a_gang_only_short_of_pods_keeps_no_periodic_cycle() -> None:
    """Its pods arriving wakes the loop; a periodic cycle for it costs a second at 5,000 nodes and delays whatever
    arrives meanwhile (the victims' PodGroups left without pods after a preemption are such gangs)."""
    running = JobStatus("ns/a", True, Reason.SCHEDULED, "running")
    short = JobStatus("ns/b", False, Reason.NOT_READY, "fewer pods than the gang minimum")
    no_fit = JobStatus("ns/c", False, Reason.GANG_DOES_NOT_FIT, "no node has 8 GPUs")
    assert not _busy(_result(running, short))
    assert _busy(_result(running, short, no_fit)), "capacity may free up: KAI's periodic cycle tries again"
    assert _busy(_result(running, binds=1)), "a cycle that bound may bind more"


def test_a_max_pending_clock_keeps_the_periodic_cycle_until_acted_on() -> None:
    pod = s.Pod("ns/p", "p", "ns", "ns/g", s.Resources(1, 0, 0))
    job = s.Job("ns", "g", "q", pods=[pod], raynative=s.RayNativeFacts(max_pending_time=600.0))
    snap = s.Snapshot([], [], [job])
    assert timed_waits(snap), "its pending clock runs, pods or not"
    job.raynative = s.RayNativeFacts(max_pending_time=600.0, max_pending_acted=1.0)
    assert not timed_waits(snap), "acted on: nothing more happens with time"


def test_an_idle_loop_comes_back_for_a_verdict_the_report_left_for_later() -> None:
    """A gang pending for less than the report delay (a victim's PodGroup just left short of pods) is said by a
    later cycle: an idle loop waits for that, not for the slow resync."""
    assert idle_period(None, 100.0, 0.01) == IDLE_RESYNC
    assert idle_period(100.5, 100.0, 0.01) == 0.5
    assert idle_period(100.8, 100.0, 2.0) == 2.0, "never sooner than one cycle's length"
    assert idle_period(99.0, 100.0, 0.01) == 0.05, "overdue: at once, but not in a tight loop"


def test_a_lone_change_after_a_quiet_spell_starts_a_cycle_at_once() -> None:
    """A preemptor arriving right after a cycle on a quiet cluster is not held back by that cycle's length."""
    assert cycle_earliest([], 50.0) == 50.0
    assert cycle_earliest([(98.0, 100.0)], 100.1) == 100.0, "2 s of cycles in the last 10 s: quiet"


def test_a_busy_loop_waits_one_cycle_length_so_cycles_take_about_half_the_time() -> None:
    assert cycle_earliest([(95.5, 97.8), (97.8, 100.0)], 100.1) == 102.2, "4.5 s of the last 10 s in cycles"
    # a stream of changes: every cycle starts as soon as the rule lets it
    recent: list[tuple[float, float]] = []
    now = 0.0
    for _ in range(40):
        start = max(now, cycle_earliest(recent, now))
        recent.append((start, start + 2.3))
        now = start + 2.3
    assert 0.45 <= 40 * 2.3 / now <= 0.55, "the loop's share of the time"


def test_long_cycles_are_measured_over_four_of_their_lengths() -> None:
    assert cycle_earliest([(80.0, 100.0)], 100.1) == 120.0, "a 20 s cycle is half of an 80 s window"
    assert cycle_earliest([(10.0, 12.0)], 100.0) == 12.0, "long ago: quiet"

"""Time-based fair share, pure parts: the division with usage (KAI's formula), and the usage ledger (KAI's windows,
decay and capacity normalisation).

The division cases are worked by hand from KAI's design (``docs/developer/designs/time-based-fairshare``:
``P_i = max(W'_i + k (W'_i - U'_i), 0)``, ``F_i = C * P_i / sum P``, W' re-normalised over the queues still
unsatisfied in each round, then KAI's whole-unit rounding) and from the situations of KAI's time-based fair-share
simulator examples (two queues of equal weight competing for a 16-GPU cluster; a burst queue next to two busy ones).
The ledger cases are the numbers of KAI's user documentation (``docs/time-based-fairshare``).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from kai_ray.durations import parse_duration
from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.fairshare import ShareQueue, divide_level, divide_tree
from kai_ray.scheduler.snapshot import Job, Node, Pod, PodPhase, Queue, Resources, SchedulerConfig, Snapshot
from kai_ray.scheduler.usage import UsageConfigError, UsageLedger, UsageParams, usage_params_from

H = 3600.0
GPU = 0


def _q(uid: str, weight: float = 1.0, request: float = 16.0, usage: float = 0.0, created: float = 0.0) -> ShareQueue:
    return ShareQueue(
        uid=uid,
        created_at=created,
        weight=[weight, 1.0, 1.0],
        request=[request, 0.0, 0.0],
        usage=[usage, 0.0, 0.0],
    )


def _gpu_shares(queues: list[ShareQueue], total: float, k: float) -> dict[str, float]:
    divide_level(total, queues, GPU, k)
    return {q.uid: q.fair_share[GPU] for q in queues}


# --- the division ----------------------------------------------------------------------------------------------


def test_no_usage_reverts_to_the_weights_whatever_k() -> None:
    """Design: "0 historical usage across the board will effectively revert to the current formula"."""
    for k in (0.0, 1.0, 10.0):
        assert _gpu_shares([_q("a"), _q("b")], 16, k) == {"a": 8.0, "b": 8.0}


def test_k_zero_ignores_usage() -> None:
    assert _gpu_shares([_q("a", usage=0.9), _q("b", usage=0.1)], 16, 0.0) == {"a": 8.0, "b": 8.0}


def test_two_equal_queues_one_used_half_the_cluster() -> None:
    """16 GPUs, equal weights, k=1; queue a held the whole cluster for half the window (U'=0.5), b nothing.
    P_a = 0.5 + (0.5 - 0.5) = 0.5, P_b = 0.5 + (0.5 - 0) = 1.0 -> shares 16/3 = 5.33 and 32/3 = 10.67, rounded down
    to whole GPUs (5, 10); the one GPU left goes to the larger remembered fraction (b: 0.67 > a: 0.33)."""
    assert _gpu_shares([_q("a", usage=0.5), _q("b")], 16, 1.0) == {"a": 5.0, "b": 11.0}


def test_the_queue_that_held_the_whole_window_gets_nothing_over_quota() -> None:
    """KAI's two-queue oscillation: once a has held all 16 GPUs for the whole window (U'=1), P_a = 0.5 + (0.5 - 1)
    = 0 and b's fair share is the whole cluster, so b's 16-GPU job may reclaim a's."""
    assert _gpu_shares([_q("a", usage=1.0), _q("b")], 16, 1.0) == {"a": 0.0, "b": 16.0}


def test_negative_portion_is_floored_and_weights_renormalise_per_round() -> None:
    """k=2, U' = (0.9, 0.1): P_a = 0.5 + 2 (0.5 - 0.9) < 0 -> 0; P_b = 0.5 + 2 (0.5 - 0.1) = 1.3 -> b gets all it
    asks (4) in round one. Round two: only a is unsatisfied, W'_a = 1, P_a = 1 + 2 (1 - 0.9) = 1.2 > 0: a gets the
    remaining 12. Usage shifts who goes first; it never leaves GPUs undivided while someone unsatisfied has P > 0."""
    assert _gpu_shares([_q("a", usage=0.9), _q("b", request=4.0, usage=0.1)], 16, 2.0) == {"a": 12.0, "b": 4.0}


def test_a_burst_queue_gets_room_that_weights_alone_would_not_give() -> None:
    """KAI's burst example, with weights 1, 1, 2 (exact in binary): a and b shared the 16 GPUs for the whole
    window (U' = 0.5 each) and keep backlogs; burst used nothing and needs 12 for its job.
    Without usage the weights give (4, 4, 8): the 12-GPU job never fits. With k=1: P_a = P_b = 0.25 + (0.25 - 0.5)
    = 0, P_burst = 0.5 + 0.5 = 1 -> burst gets its 12; then a and b (W' = 0.5 each, P = 0.5 + (0.5 - 0.5)) split 4."""

    def three() -> list[ShareQueue]:
        return [_q("a", usage=0.5), _q("b", usage=0.5), _q("burst", weight=2.0, request=12.0)]

    assert _gpu_shares(three(), 16, 0.0) == {"a": 4.0, "b": 4.0, "burst": 8.0}
    assert _gpu_shares(three(), 16, 1.0) == {"a": 2.0, "b": 2.0, "burst": 12.0}


def test_children_usage_is_normalised_to_the_cluster_not_the_parent() -> None:
    """Two departments of equal weight, each having used half the cluster (U' = 0.5): 8 GPUs each. Inside d1, child
    a used all of d1's half (U'_a = 0.5 of the cluster), b nothing: P_a = 0.5 + (0.5 - 0.5) = 0.5, P_b = 1.0 ->
    8/3 and 16/3 rounded down (2, 5), the left-over GPU to the larger fraction (a: 0.67) -> (3, 5)."""
    a, b, c = _q("a", usage=0.5), _q("b"), _q("c", usage=0.5)
    d1 = ShareQueue(uid="d1", request=[32.0, 0, 0], usage=[0.5, 0, 0], children=[a, b])
    d2 = ShareQueue(uid="d2", request=[16.0, 0, 0], usage=[0.5, 0, 0], children=[c])
    divide_tree([16.0, 0.0, 0.0], [d1, d2], 1.0)
    assert (d1.fair_share[GPU], d2.fair_share[GPU]) == (8.0, 8.0)
    assert (a.fair_share[GPU], b.fair_share[GPU], c.fair_share[GPU]) == (3.0, 5.0, 8.0)


def test_usage_in_the_snapshot_reaches_the_division_and_the_queue_status() -> None:
    """The core end to end: the snapshot's usage moves fair share, and QueueStatus.usage reports it."""
    nodes = [Node("n0", Resources(16, 64000, 256e9))]
    queues = [Queue("a"), Queue("b")]
    jobs = []
    for q in ("a", "b"):
        pod = Pod(f"{q}/p", "p", q, f"{q}/j", Resources(16, 1000, 1e9), PodPhase.PENDING)
        jobs.append(Job(q, "j", q, pods=[pod]))
    snap = Snapshot(nodes, queues, jobs, config=SchedulerConfig(k_value=1.0))
    snap.usage = {"a": Resources(1.0, 0.0, 0.0)}
    res = run_cycle(snap)
    assert res.queues["a"].fair_share["gpu"] == 0.0 and res.queues["b"].fair_share["gpu"] == 16.0
    assert res.queues["a"].usage == {"gpu": 1.0, "cpu": 0.0, "memory": 0.0}
    assert res.queues["b"].usage == {"gpu": 0.0, "cpu": 0.0, "memory": 0.0}
    assert [b.job for b in res.binds] == ["b/j"]
    snap.usage = None  # the feature off: no usage in the status
    assert run_cycle(snap).queues["a"].usage == {}


# --- the ledger -------------------------------------------------------------------------------------------------


def _ledger(**kw: float | str) -> UsageLedger:
    return UsageLedger(UsageParams(**kw))  # type: ignore[arg-type]


def test_normalised_to_cluster_capacity_over_the_window() -> None:
    """KAI's documentation: 10 GPUs, a 10-hour window, a queue that used 24 GPU-hours scores 0.24, whether it was
    8 GPUs for 3 hours or 12 for 2."""
    for gpus, hours in ((8, 3), (12, 2)):
        ledger = _ledger(window_size=10 * H)
        ledger.observe(0, {"q": (0, 0, 0)}, (10, 0, 0))
        ledger.observe(4 * H, {"q": (gpus, 0, 0)}, (10, 0, 0))
        ledger.observe((4 + hours) * H, {"q": (0, 0, 0)}, (10, 0, 0))
        assert ledger.usage(10 * H)["q"][GPU] == pytest.approx(0.24)


def test_sliding_window_forgets_what_leaves_it() -> None:
    ledger = _ledger(window_size=10 * H)
    ledger.observe(0, {"q": (8, 0, 0)}, (10, 0, 0))
    ledger.observe(3 * H, {"q": (0, 0, 0)}, (10, 0, 0))
    assert ledger.usage(10 * H)["q"][GPU] == pytest.approx(0.24)
    assert ledger.usage(12 * H)["q"][GPU] == pytest.approx(0.08)  # only (2h, 3h] is still inside
    assert "q" not in ledger.usage(13.5 * H)


def test_half_life_halves_what_is_an_hour_old() -> None:
    """KAI's documentation: with a half-life of one hour, a GPU-second used an hour ago counts half of one used
    now."""
    old, new = _ledger(window_size=10 * H, half_life_period=H), _ledger(window_size=10 * H, half_life_period=H)
    for ledger, at in ((old, 5 * H), (new, 6 * H - 1)):
        ledger.observe(0, {}, (1, 0, 0))
        ledger.observe(at, {"q": (1, 0, 0)}, (1, 0, 0))
        ledger.observe(at + 1, {"q": (0, 0, 0)}, (1, 0, 0))
        ledger.advance(6 * H)
    assert old.usage()["q"][GPU] / new.usage()["q"][GPU] == pytest.approx(0.5, rel=1e-3)


def test_tumbling_window_starts_afresh_at_each_boundary() -> None:
    ledger = _ledger(window_type="tumbling", window_size=10 * H, tumbling_window_start_time=0.0)
    ledger.observe(0, {"q": (5, 0, 0)}, (10, 0, 0))
    assert ledger.usage(10 * H - 1)["q"][GPU] == pytest.approx(0.5)
    ledger.observe(10 * H - 1, {"q": (0, 0, 0)}, (10, 0, 0))
    assert "q" not in ledger.usage(10 * H + 60)
    ledger.observe(10 * H + 60, {"q": (10, 0, 0)}, (10, 0, 0))
    assert ledger.usage(10 * H + 120)["q"][GPU] == pytest.approx(0.5)  # 60 s of 10 GPUs out of 120 s of 10


def test_tumbling_window_anchored_in_the_future_counts_nothing_yet() -> None:
    """KAI: a tumbling window that starts in the future has size 0."""
    ledger = _ledger(window_type="tumbling", window_size=10 * H, tumbling_window_start_time=5 * H)
    ledger.observe(0, {"q": (5, 0, 0)}, (10, 0, 0))
    assert ledger.usage(4 * H) == {}
    assert ledger.usage(6 * H)["q"][GPU] == pytest.approx(0.5)


def test_cron_window_resets_at_each_occurrence() -> None:
    """KAI's cron window: with ``0 * * * *`` the window at 14:30 started at 14:00."""
    hour = 1_736_949_600.0  # 2025-01-15T14:00:00Z
    ledger = _ledger(window_type="cron", cron_string="0 * * * *")
    assert ledger.bounds(hour + 1800) == (hour, hour + H)
    ledger.observe(hour - 1800, {"q": (4, 0, 0)}, (8, 0, 0))
    ledger.observe(hour + 900, {"q": (0, 0, 0)}, (8, 0, 0))
    assert ledger.usage(hour + 1800)["q"][GPU] == pytest.approx(0.25)  # 15 of 30 minutes at half the cluster


@settings(max_examples=60, deadline=None)
@given(
    cuts=hs.lists(hs.floats(min_value=1.0, max_value=20 * H), min_size=1, max_size=12),
    half_life=hs.sampled_from([0.0, 600.0, 3 * H]),
    window_type=hs.sampled_from(["sliding", "tumbling"]),
)
def test_observing_more_often_changes_nothing(cuts: list[float], half_life: float, window_type: str) -> None:
    """The integral is exact for piecewise-constant levels: extra observations of the same levels give the same
    usage, whatever the decay and window."""
    kw = {"window_size": 8 * H, "half_life_period": half_life, "window_type": window_type}
    coarse, fine = _ledger(**kw), _ledger(**kw)
    if window_type == "tumbling":
        coarse.anchor = fine.anchor = 0.0
    steps = [(0.0, 3.0), (7 * H, 1.0), (13 * H, 0.0), (21 * H, 2.0)]
    for t, level in steps:
        coarse.observe(t, {"q": (level, 0, 0)}, (4, 0, 0))
    extra = sorted(set(cuts))
    for t, level in steps:
        fine.observe(t, {"q": (level, 0, 0)}, (4, 0, 0))
        for c in [c for c in extra if t < c < t + 6 * H and not any(t < s < c for s, _ in steps)]:
            fine.observe(c, {"q": (level, 0, 0)}, (4, 0, 0))
    a, b = coarse.usage(22 * H).get("q", (0, 0, 0))[GPU], fine.usage(22 * H).get("q", (0, 0, 0))[GPU]
    assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def test_state_round_trip_and_gap_filled_with_the_recorded_level() -> None:
    """What the operator persists restores to the same usage; a gap (no scheduler watching) is filled with the
    levels recorded at the last write, and series written at different times are brought to the newest."""
    params = UsageParams(window_size=24 * H, half_life_period=6 * H)
    ledger = UsageLedger(params)
    ledger.observe(0, {"a": (4, 100, 1e9), "b": (0, 0, 0)}, (8, 1000, 1e10))
    ledger.observe(5 * H, {"a": (4, 100, 1e9), "b": (4, 0, 0)}, (8, 1000, 1e10))
    ledger.observe(9 * H, {"a": (8, 100, 1e9), "b": (0, 0, 0)}, (8, 1000, 1e10))
    cluster = ledger.cluster_state()
    records = {"a": ledger.queue_state("a"), "b": ledger.queue_state("b")}
    assert cluster is not None and all(records.values())
    restored, problems = UsageLedger.restore(params, cluster, records)  # type: ignore[arg-type]
    assert problems == []
    want = ledger.usage(12 * H)
    got = restored.usage(12 * H)
    for q in ("a", "b"):
        assert got[q] == pytest.approx(want[q], rel=1e-6)
    old_b = records["b"]
    ledger.observe(10 * H, {"a": (8, 100, 1e9), "b": (0, 0, 0)}, (8, 1000, 1e10))
    newer = {"a": ledger.queue_state("a"), "b": old_b}  # b's idle record from 9h is still valid at 10h
    restored, _ = UsageLedger.restore(params, ledger.cluster_state(), newer)  # type: ignore[arg-type]
    assert restored.usage(12 * H)["b"] == pytest.approx(ledger.usage(12 * H)["b"], rel=1e-6)


def test_records_kept_with_other_settings_start_afresh() -> None:
    ledger = _ledger(window_size=24 * H)
    ledger.observe(0, {"a": (4, 0, 0)}, (8, 0, 0))
    ledger.observe(H, {"a": (4, 0, 0)}, (8, 0, 0))
    other = UsageParams(window_size=24 * H, half_life_period=H)
    restored, problems = UsageLedger.restore(other, ledger.cluster_state(), {"a": ledger.queue_state("a") or {}})
    assert restored.queues == {} and restored.capacity is None
    assert problems and "other settings" in problems[0]
    restored, problems = UsageLedger.restore(
        ledger.params, ledger.cluster_state(), {"a": {"params": ledger.params.fingerprint(), "time": "x"}}
    )
    assert "a" not in restored.queues and "unreadable" in problems[0]


# --- settings -----------------------------------------------------------------------------------------------------


def test_kai_defaults_and_durations() -> None:
    p = usage_params_from({})
    assert (p.window_size, p.window_type, p.half_life_period, p.fetch_interval, p.staleness_period) == (
        604800.0,
        "sliding",
        0.0,
        60.0,
        300.0,
    )
    assert parse_duration("2d12h") == 216000.0 and parse_duration("1w") == 604800.0
    assert parse_duration("90m") == 5400.0 and parse_duration("1.5h") == 5400.0
    assert parse_duration("soon") is None and parse_duration("1h x") is None
    p = usage_params_from({"windowType": "tumbling", "tumblingWindowStartTime": "2026-01-05T00:00:00Z"})
    assert p.tumbling_window_start_time == 1767571200.0


@pytest.mark.parametrize(
    "raw,field",
    [
        ({"windowSize": "a week"}, "usageParams.windowSize"),
        ({"windowType": "hopping"}, "usageParams.windowType"),
        ({"halfLifePeriod": -5}, "usageParams.halfLifePeriod"),
        ({"windowType": "cron"}, "usageParams.cronString"),
        ({"windowType": "cron", "cronString": "every monday"}, "usageParams.cronString"),
        ({"tumblingWindowStartTime": "yesterday"}, "usageParams.tumblingWindowStartTime"),
        ({"fetchInterval": 0}, "usageParams.fetchInterval"),
        ({"window": "1d"}, "usageParams.window"),
    ],
)
def test_bad_settings_name_their_field(raw: dict[str, object], field: str) -> None:
    with pytest.raises(UsageConfigError, match=f"^{field}: "):
        usage_params_from(raw)

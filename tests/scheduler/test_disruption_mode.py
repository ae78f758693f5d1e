"""An upstream Kubernetes PodGroup's ``disruptionMode`` changes which pods of a victim gang go.

One 8-GPU node runs a 4-pod gang of 2-GPU pods; a higher-priority 1-pod job of its queue needs 2 GPUs. KAI's steps
(no mode) take the whole gang when it sits at its minimum and one surplus pod above it; ``Single`` takes one pod
even at the minimum; ``All`` takes every pod even above the minimum.
"""

from __future__ import annotations

import pytest

from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.snapshot import Disruption, Job, Node, Pod, PodPhase, Queue, Resources, Snapshot

NOW = 1_000.0


def _gang(min_member: int, mode: Disruption | None) -> Job:
    return Job(
        "ns",
        "gang",
        "q",
        priority=50,
        min_member=min_member,
        created_at=1.0,
        disruption=mode,
        pods=[
            Pod(
                f"gang-{k}",
                f"gang-{k}",
                "ns",
                "ns/gang",
                Resources(2, 1000, 1e9),
                phase=PodPhase.RUNNING,
                node="n0",
                start_time=1.0,
                created_at=float(k),
            )
            for k in range(4)
        ],
    )


def _victims(gang: Job) -> list[str]:
    urgent = Job(
        "ns", "urgent", "q", priority=75, created_at=NOW - 1, pods=[Pod("u-0", "u-0", "ns", "ns/urgent", Resources(2))]
    )
    snap = Snapshot(
        [Node("n0", Resources(8, 64000, 512e9))], [Queue("q", quota=Resources(-1, -1, -1))], [gang, urgent], now=NOW
    )
    res = run_cycle(snap)
    assert [b.pod for b in res.binds] == ["u-0"], "the urgent job is placed (pipelined onto the victims' room)"
    return sorted(e.pod for e in res.evictions)


@pytest.mark.parametrize(
    ("min_member", "mode", "evicted"),
    [
        (4, None, 4),  # KAI: at its minimum the gang goes whole
        (4, Disruption.ALL, 4),
        (4, Disruption.SINGLE, 1),  # one pod, though the gang drops below its minimum
        (2, None, 1),  # KAI: one surplus pod
        (2, Disruption.SINGLE, 1),
        (2, Disruption.ALL, 4),  # all together, surplus included
    ],
)
def test_disruption_mode_sets_the_victim_steps(min_member: int, mode: Disruption | None, evicted: int) -> None:
    victims = _victims(_gang(min_member, mode))
    assert len(victims) == evicted
    if evicted == 1:
        assert victims == ["gang-3"], "the newest pod goes first"

"""The queue-admission gate's decision (``kai_ray.scheduler.queue_admission``): which gated gangs their queue admits.

Asserted on whole cycles: a gang is ungated whole and only when the limits up its queue chain admit it; admissions in
one cycle are charged one after the other; an ungated gang still pending holds its room (from the stamp on its pods,
so any leader sees it) until it binds or the reservation expires; a gang kept gated says why, apart from "no node";
a gang whose queue does not gate is let go; a missing queue keeps its gang gated under ``all``; gated demand counts in
its queue's request and fair share.
"""

from __future__ import annotations

from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.decisions import CycleResult, Reason
from kai_ray.scheduler.snapshot import Job, Node, Pod, PodPhase, Queue, Resources, SchedulerConfig, Snapshot

NOW = 10_000.0
UNLIMITED = Resources(-1, -1, -1)


def _job(
    name: str, queue: str, pods: int, gpus: float, *, gated: bool = False, admitted: float | None = None, at: float = 0
) -> Job:
    return Job(
        "ns",
        name,
        queue,
        min_member=pods,
        created_at=at,
        pods=[
            Pod(
                f"{name}-{k}",
                f"{name}-{k}",
                "ns",
                f"ns/{name}",
                Resources(gpus, 1000, 1e9),
                gated=gated,
                quota_gated=gated,
                admitted_at=admitted,
            )
            for k in range(pods)
        ],
    )


def _running(name: str, queue: str, gpus: float, node: str) -> Job:
    job = _job(name, queue, 1, gpus)
    job.pods[0].phase = PodPhase.RUNNING
    job.pods[0].node = node
    return job


def _queues(limit: float, opted: bool = False) -> list[Queue]:
    return [
        Queue("dept", quota=UNLIMITED, limit=Resources(limit, -1, -1)),
        Queue("a", parent="dept", quota=UNLIMITED, admission_gating=opted),
        Queue("b", parent="dept", quota=UNLIMITED, admission_gating=opted),
    ]


def _cycle(
    nodes: int, limit: float, jobs: list[Job], ttl: float = 600.0, gating: str = "all", opted: bool = False
) -> CycleResult:
    return run_cycle(
        Snapshot(
            [Node(f"n{i}", Resources(8, 64000, 512e9)) for i in range(nodes)],
            _queues(limit, opted),
            jobs,
            config=SchedulerConfig(reservation_ttl=ttl, queue_admission_gating=gating),
            now=NOW,
        )
    )


def test_a_gang_over_its_parents_limit_stays_gated_and_says_so() -> None:
    res = _cycle(2, 8, [_running("busy", "a", 8, "n0"), _job("g", "b", 2, 4, gated=True)])
    assert res.ungate == []
    verdict = res.jobs["ns/g"]
    assert verdict.reason is Reason.OVER_LIMIT and verdict.message.startswith("gated: queue over quota")
    assert verdict.details["gated"] is True


def test_admissions_in_one_cycle_are_charged_in_turn_and_whole() -> None:
    res = _cycle(0, 8, [_job("g1", "a", 2, 4, gated=True, at=1), _job("g2", "b", 2, 4, gated=True, at=2)])
    ungated = res.ungate
    assert [u.job for u in ungated] == ["ns/g1"] and ungated[0].pods == ("g1-0", "g1-1")
    assert res.jobs["ns/g2"].details["gated"] is True


def test_an_ungated_pending_gang_reserves_its_room_until_the_reservation_expires() -> None:
    held = _job("held", "a", 2, 4, admitted=NOW - 60)  # ungated a minute ago, no node yet
    res = _cycle(0, 8, [held, _job("g", "b", 1, 4, gated=True)])
    assert res.ungate == []
    held = _job("held", "a", 2, 4, admitted=NOW - 60)
    res = _cycle(0, 8, [held, _job("g", "b", 1, 4, gated=True)], ttl=30.0)
    assert [u.job for u in res.ungate] == ["ns/g"]


def test_a_partly_ungated_gang_goes_first() -> None:
    torn = _job("torn", "b", 2, 4, gated=True, at=5)
    torn.pods[1].gated = torn.pods[1].quota_gated = False
    torn.pods[1].admitted_at = NOW - 1
    res = _cycle(0, 8, [_job("old", "a", 1, 8, gated=True, at=0), torn])
    assert [u.job for u in res.ungate] == ["ns/torn"]
    assert res.ungate[0].pods == ("torn-0",)


def test_a_foreign_gate_is_never_lifted() -> None:
    job = _job("g", "a", 1, 4, gated=True)
    job.pods[0].quota_gated = False  # gated by someone else too
    res = _cycle(1, 8, [job])
    assert res.ungate == [] and res.binds == []


def test_a_gang_of_a_queue_that_does_not_gate_is_ungated_whatever_its_quota() -> None:
    """Gated when its queue gated; the queue no longer does (opt-in label gone, or ``off``): the gate goes at once,
    without the stamp (nothing reserved), and allocation alone enforces the limit."""
    for gating, opted in (("queues", False), ("off", True)):
        res = _cycle(
            2, 8, [_running("busy", "a", 8, "n0"), _job("g", "b", 2, 4, gated=True)], gating=gating, opted=opted
        )
        assert [(u.job, u.pods, u.admitted) for u in res.ungate] == [("ns/g", ("g-0", "g-1"), False)], gating
        assert res.jobs["ns/g"].details.get("gated") is None
    res = _cycle(2, 8, [_running("busy", "a", 8, "n0"), _job("g", "b", 2, 4, gated=True)], gating="queues", opted=True)
    assert res.ungate == [] and res.jobs["ns/g"].details["gated"] is True


def test_a_gang_whose_queue_does_not_exist_stays_gated_under_all_and_goes_once_it_exists() -> None:
    missing = _job("g", "ghost", 1, 4, gated=True)
    res = _cycle(1, 8, [missing])
    verdict = res.jobs["ns/g"]
    assert res.ungate == [] and verdict.reason is Reason.QUEUE_DOES_NOT_EXIST
    assert verdict.message == "gated: queue 'ghost' does not exist" and verdict.details["gated"] is True
    res = _cycle(1, 8, [_job("g", "ghost", 1, 4, gated=True)], gating="queues")  # cannot have opted in
    assert [u.admitted for u in res.ungate] == [False]
    assert res.jobs["ns/g"].reason is Reason.QUEUE_DOES_NOT_EXIST and "gated" not in res.jobs["ns/g"].message
    res = _cycle(1, 8, [_job("g", "a", 1, 4, gated=True)])  # the queue now exists: the quota decision applies
    assert [(u.job, u.admitted) for u in res.ungate] == [("ns/g", True)]


def test_gated_demand_counts_in_its_queues_request_and_fair_share_not_in_its_allocation() -> None:
    """Two equal queues under an 8-GPU cluster; b's whole demand is gated. Without counting it b would request
    nothing and a would get the cluster as its share; counted, each gets half, and b's allocation stays 0."""
    queues = [Queue("a", quota=Resources(0, 0, 0)), Queue("b", quota=Resources(0, 0, 0))]
    res = run_cycle(
        Snapshot(
            [Node("n0", Resources(8, 64000, 512e9))],
            queues,
            [_job("wants", "a", 2, 4, at=1), _job("held", "b", 2, 4, gated=True, at=2)],
            config=SchedulerConfig(queue_admission_gating="all"),
            now=NOW,
        )
    )
    a, b = res.queues["a"], res.queues["b"]
    assert b.requested["gpu"] == 8 and b.allocated["gpu"] == 0
    assert a.fair_share["gpu"] == 4 and b.fair_share["gpu"] == 4

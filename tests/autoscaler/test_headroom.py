"""The headroom contract and capping rule, and headroom computed by the real scheduler core (no Ray needed)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from kai_ray import constants as c
from kai_ray.headroom import contract as hr
from kai_ray.headroom.compute import autoscaling_jobs, compute_headroom
from kai_ray.scheduler import snapshot as s

NOW = 1_800_000_000.0


def _pg(subgroups: dict[str, tuple[int, int]] | None, sub_max: dict[str, int], at: float = NOW) -> dict[str, object]:
    ann = {c.SUBGROUP_MAX: json.dumps(sub_max)}
    if subgroups is not None:
        ann.update(hr.headroom_annotations({k: hr.SubgroupHeadroom(*v) for k, v in subgroups.items()}, at))
    return {"metadata": {"name": "pg-x", "annotations": ann}}


def _cap(pg: dict[str, object] | None, current: int, requested: int, hosts: int = 1, **kw: object) -> hr.CapDecision:
    limits = hr.limits_from_podgroup(pg) if pg is not None else None
    return hr.cap_scale_up(limits, "workers", current, requested, hosts, now=NOW, **kw)  # type: ignore[arg-type]


def test_format_parse_round_trip() -> None:
    text = hr.format_headroom({"workers": hr.SubgroupHeadroom(2, 3), "gpu": hr.SubgroupHeadroom(1, -1)}, NOW)
    parsed = hr.parse_headroom(text)
    assert parsed.at == NOW
    assert parsed.subgroups == {"workers": hr.SubgroupHeadroom(2, 3), "gpu": hr.SubgroupHeadroom(1, -1)}
    assert parsed.subgroups["gpu"].allowed == 0


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("nope", "not JSON"),
        ("[]", "must be a JSON object"),
        ('{"at": "yesterday"}', ".at"),
        ('{"subgroups": {"w": {"pods": 1}}}', "subgroups.w"),
        ('{"subgroups": {"w": {"pods": -1, "headroom": 0}}}', "subgroups.w.pods"),
        ('{"subgroups": {"w": {"pods": 1.5, "headroom": 0}}}', "integers"),
    ],
)
def test_bad_headroom_names_the_field(text: str, field: str) -> None:
    with pytest.raises(hr.HeadroomError, match=field.replace(".", r"\.")):
        hr.parse_headroom(text)


def test_caps_by_headroom_total_then_max() -> None:
    d = _cap(_pg({"workers": (2, 3)}, {"workers": 10}), current=2, requested=8)
    assert (d.allowed, d.code) == (5, hr.QUEUE_HEADROOM) and d.capped
    assert "capped at 5" in d.message and "+3 beyond 2" in d.message
    d = _cap(_pg({"workers": (2, 30)}, {"workers": 4}), current=2, requested=8)
    assert (d.allowed, d.code) == (4, hr.GROUP_MAX)
    # pods created after the scheduler wrote the number do not count twice: the total holds
    d = _cap(_pg({"workers": (2, 3)}, {"workers": 10}), current=4, requested=8)
    assert d.allowed == 5
    # within headroom: not capped
    assert not _cap(_pg({"workers": (2, 3)}, {"workers": 10}), current=2, requested=4).capped


def test_never_scales_down_and_keeps_whole_replicas() -> None:
    d = _cap(_pg({"workers": (6, -2)}, {"workers": 10}), current=6, requested=8)
    assert d.allowed == 6 and "refused" in d.message
    assert not _cap(_pg({"workers": (6, -2)}, {"workers": 10}), current=6, requested=4).capped
    d = _cap(_pg({"workers": (0, 5)}, {"workers": 16}), current=0, requested=8, hosts=4)
    assert d.allowed == 4  # 5 pods of headroom is one 4-host replica


def test_missing_stale_or_broken_headroom_follows_the_policy() -> None:
    assert _cap(_pg(None, {"workers": 10}), 1, 5).allowed == 1
    assert _cap(_pg(None, {"workers": 10}), 1, 5).code == hr.HEADROOM_UNKNOWN
    assert _cap(_pg(None, {"workers": 3}), 1, 5, missing=hr.MISSING_ALLOW).allowed == 3
    stale = _pg({"workers": (1, 4)}, {"workers": 10}, at=NOW - 600)
    assert _cap(stale, 1, 5).code == hr.HEADROOM_STALE
    assert _cap(stale, 1, 5, max_age_s=0).allowed == 5
    assert _cap(None, 1, 5).code == hr.PODGROUP_UNKNOWN
    broken = {"metadata": {"name": "pg-x", "annotations": {hr.HEADROOM_ANNOTATION: "{"}}}
    d = _cap(broken, 1, 5)
    assert d.allowed == 1 and "not JSON" in d.message
    other = _pg({"gpu": (1, 4)}, {"workers": 10})
    assert "no headroom for subgroup workers" in _cap(other, 1, 5).message


def test_gate_reads_rarely_and_reports_each_new_cap_once() -> None:
    clock = [NOW]
    reads: list[int] = []
    reported: list[hr.CapDecision] = []
    pg = _pg({"workers": (1, 1)}, {"workers": 10})

    def fetch() -> dict[str, object]:
        reads.append(1)
        return pg

    gate = hr.HeadroomGate(fetch, refresh_s=5, repeat_s=60, report=reported.append, clock=lambda: clock[0])
    for _ in range(5):
        assert gate.cap("workers", 1, 4).allowed == 2
    assert len(reads) == 1 and len(reported) == 1
    clock[0] += 61
    gate.cap("workers", 1, 4)
    assert len(reads) == 2 and len(reported) == 2
    with pytest.raises(ValueError, match="missing"):
        hr.HeadroomGate(fetch, missing="maybe")


# --- computing headroom with the core ----------------------------------------------------------------------------


def _pod(job: str, name: str, gpu: float, running: bool = True, head: bool = False) -> s.Pod:
    return s.Pod(
        uid=f"{job}/{name}",
        name=name,
        namespace="ns",
        job=job,
        request=s.Resources(gpu, 1000, 1e9),
        phase=s.PodPhase.RUNNING if running else s.PodPhase.PENDING,
        node="n1" if running else None,
        subgroup="headgroup" if head else "workers",
        is_ray_head=head,
        start_time=0.0 if running else None,
    )


def _job(name: str, queue: str, running: int, max_workers: int, pending: int = 0) -> s.Job:
    key = f"ns/{name}"
    pods = [_pod(key, "head", 0, head=True)]
    pods += [_pod(key, f"w{i}", 1) for i in range(running)]
    pods += [_pod(key, f"p{i}", 1, running=False) for i in range(pending)]
    return s.Job(
        namespace="ns",
        name=name,
        queue=queue,
        min_member=2,
        subgroups=[s.SubGroup("headgroup", 1, max_member=1), s.SubGroup("workers", 1, max_member=max_workers)],
        pods=pods,
    )


def _snapshot(*jobs: s.Job, gpu_limit: float = -1, gpus: float = 8) -> s.Snapshot:
    return s.Snapshot(
        nodes=[s.Node("n1", s.Resources(gpus, 64000, 256e9))],
        queues=[s.Queue("q", quota=s.Resources(-1, -1, -1), limit=s.Resources(gpu_limit, -1, -1))],
        jobs=list(jobs),
    )


def test_core_headroom_follows_queue_limit_max_and_node_room() -> None:
    assert compute_headroom(_snapshot(_job("a", "q", 2, 6), gpu_limit=4)) == {
        "ns/a": {"workers": hr.SubgroupHeadroom(2, 2)}
    }
    assert compute_headroom(_snapshot(_job("a", "q", 2, 3)))["ns/a"]["workers"] == hr.SubgroupHeadroom(2, 1)
    assert compute_headroom(_snapshot(_job("a", "q", 7, 16)))["ns/a"]["workers"] == hr.SubgroupHeadroom(7, 1)


def test_core_headroom_is_negative_when_pending_pods_cannot_be_placed() -> None:
    got = compute_headroom(_snapshot(_job("a", "q", 2, 8, pending=3), gpu_limit=4))
    assert got["ns/a"]["workers"] == hr.SubgroupHeadroom(5, -1)


def test_core_headroom_is_jointly_feasible() -> None:
    snap = _snapshot(_job("a", "q", 2, 8), _job("b", "q", 3, 8))  # 3 GPUs free
    got = compute_headroom(snap)
    assert got["ns/a"]["workers"].headroom + got["ns/b"]["workers"].headroom == 3
    assert autoscaling_jobs(snap) == ["ns/a", "ns/b"]
    full = _snapshot(_job("a", "q", 8, 8))
    assert autoscaling_jobs(full) == [] and compute_headroom(full) == {}
    with pytest.raises(KeyError, match="ns/zzz"):
        compute_headroom(snap, ["ns/zzz"])


def test_core_headroom_counts_room_won_by_reclaim() -> None:
    snap = s.Snapshot(
        nodes=[s.Node("n1", s.Resources(8, 64000, 256e9))],
        queues=[
            s.Queue("root", quota=s.Resources(-1, -1, -1)),
            s.Queue("qa", parent="root", quota=s.Resources(4, -1, -1)),
            s.Queue("qb", parent="root", quota=s.Resources(4, -1, -1)),
        ],
        jobs=[_job("a", "qa", 1, 4), _job("b", "qb", 7, 8)],  # b is over its quota, a under
    )
    allocate_only = compute_headroom(snap, ["ns/a"], actions=("allocate",))["ns/a"]["workers"]
    with_reclaim = compute_headroom(snap, ["ns/a"])["ns/a"]["workers"]
    assert allocate_only.headroom == 0
    assert with_reclaim.headroom >= 1


def test_admits_tells_when_a_suspended_gang_fits_again() -> None:
    from kai_ray.headroom.compute import admits

    running = _job("b", "q", 6, 6)
    gang = [s.SubGroup("headgroup", 1, max_member=1), s.SubGroup("workers", 3, max_member=4)]
    suspended = dataclasses.replace(_job("a", "q", 0, 4), pods=[], min_member=4, subgroups=gang)
    virtual = [_pod("ns/a", "head", 0, running=False, head=True)]
    virtual += [_pod("ns/a", f"w{i}", 1, running=False) for i in range(3)]
    assert not admits(_snapshot(suspended, running), "ns/a", virtual)  # its 3 GPUs are not free: stay suspended
    assert admits(_snapshot(suspended, running, gpus=9), "ns/a", virtual)
    with pytest.raises(KeyError):
        admits(_snapshot(running), "ns/a", virtual)


def test_operator_publisher_is_rate_limited_and_writes_only_changes() -> None:
    """The scheduler operator's HeadroomPublisher: at most once per interval, one write per changed PodGroup, and
    unchanged numbers rewritten only when they would grow old."""
    from kai_ray.k8s.ray.headroom_publisher import HeadroomPublisher

    clock = [100.0]
    writes: list[str] = []
    pub = HeadroomPublisher(
        None,  # type: ignore[arg-type]  # the write work handed to submit is not run here
        interval=2.0,
        submit=lambda key, work: writes.append(key),
        refresh_s=60.0,
        clock=lambda: clock[0],
    )
    snap = _snapshot(_job("a", "q", 2, 6), gpu_limit=4)
    assert pub.maybe_publish(snap) == {"ns/a": {"workers": hr.SubgroupHeadroom(2, 2)}}
    assert writes == ["headroom/ns/a"]
    clock[0] += 1.0
    assert pub.maybe_publish(snap) is None and not pub.due()  # within the interval: nothing computed
    clock[0] += 1.5
    assert pub.maybe_publish(snap) is not None and writes == ["headroom/ns/a"]  # unchanged: not written
    clock[0] += 3.0
    pub.maybe_publish(_snapshot(_job("a", "q", 3, 6), gpu_limit=4))
    assert writes == ["headroom/ns/a"] * 2  # changed (3 pods, +1)
    clock[0] += 61.0
    pub.maybe_publish(_snapshot(_job("a", "q", 3, 6), gpu_limit=4))
    assert writes == ["headroom/ns/a"] * 3  # unchanged but a minute old: refreshed
    clock[0] += 3.0
    assert pub.maybe_publish(_snapshot(_job("a", "q", 6, 6))) is None  # nothing may grow: nothing to publish

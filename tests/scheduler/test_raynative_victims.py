"""Ray-native scheduling: idle-aware and checkpoint-aware victim order among otherwise equal victims, and its off-switches."""

from __future__ import annotations

import dataclasses

import pytest

from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.decisions import CycleResult
from kai_ray.scheduler.session_build import build_session
from kai_ray.scheduler.snapshot import (
    Job,
    Node,
    Pod,
    PodPhase,
    Queue,
    RayActivity,
    RayNativeFacts,
    Resources,
    SchedulerConfig,
    Snapshot,
)
from kai_ray.scheduler.workloss import CORE_WEIGHT, assess, weight

pytestmark = pytest.mark.raynative

NOW = 10_000.0


def _running(name: str, node: str, created: float, gpus: float = 8, pods: int = 1) -> Job:
    return Job(
        "ns",
        name,
        "q",
        priority=50,
        min_member=pods,
        created_at=created,
        last_start=created,
        kind="RayCluster",
        pods=[
            Pod(
                f"{name}-{k}",
                f"{name}-{k}",
                "ns",
                f"ns/{name}",
                Resources(gpus / pods, 1000, 1e9),
                phase=PodPhase.RUNNING,
                node=node,
                start_time=created,
                is_ray_head=k == 0,
            )
            for k in range(pods)
        ],
    )


def _serve(gpus: float = 8) -> Job:
    return Job(
        "ns",
        "serve",
        "q",
        priority=125,
        created_at=NOW - 1,
        pods=[Pod("serve-0", "serve-0", "ns", "ns/serve", Resources(gpus, 1000, 1e9))],
    )


def _cycle(jobs: list[Job], **cfg: object) -> CycleResult:
    nodes = [Node("n0", Resources(8, 64000, 512e9)), Node("n1", Resources(8, 64000, 512e9))]
    queues = [Queue("q", quota=Resources(-1, -1, -1))]
    return run_cycle(Snapshot(nodes, queues, jobs, now=NOW, config=SchedulerConfig(**cfg)))  # type: ignore[arg-type]


def _victims(res: CycleResult) -> set[str]:
    return {e.job for e in res.evictions}


def _with_activity(job: Job, act: RayActivity) -> Job:
    return dataclasses.replace(job, pods=[dataclasses.replace(p, ray_activity=act) for p in job.pods])


def _fresh_idle(seconds: float) -> RayActivity:
    return RayActivity(observed_at=NOW - 5, idle_seconds=seconds)


def _fresh_busy(since: float) -> RayActivity:
    return RayActivity(observed_at=NOW - 5, busy_since=since)


def test_without_facts_the_newest_equal_victim_goes_as_in_kai() -> None:
    res = _cycle([_running("old", "n0", 100), _running("new", "n1", 200), _serve()])
    assert _victims(res) == {"ns/new"}
    assert "victim order" not in res.evictions[0].message


def test_an_idle_ray_cluster_goes_before_a_busy_one_and_the_message_says_why() -> None:
    old = _with_activity(_running("old", "n0", 100), _fresh_idle(1800))
    new = _with_activity(_running("new", "n1", 200), _fresh_busy(300))
    res = _cycle([old, new, _serve()])
    assert _victims(res) == {"ns/old"}
    assert "victim order: idle in Ray for 30m00s" in res.evictions[0].message


def test_among_busy_clusters_the_one_busy_for_the_shortest_time_goes() -> None:
    old = _with_activity(_running("old", "n0", 100, pods=2), _fresh_busy(NOW - 60))
    new = _with_activity(_running("new", "n1", 200, pods=2), _fresh_busy(NOW - 3600))
    res = _cycle([old, new, _serve()])
    assert _victims(res) == {"ns/old"}
    assert all("busy in Ray for 1m00s" in e.message for e in res.evictions)


def test_stale_or_switched_off_activity_keeps_kai_order() -> None:
    stale = RayActivity(observed_at=NOW - 600, idle_seconds=1800)
    old = _with_activity(_running("old", "n0", 100), stale)
    new = _with_activity(_running("new", "n1", 200), _fresh_busy(300))
    assert _victims(_cycle([old, new, _serve()], idle_aware_victims=False)) == {"ns/new"}
    old_stale = _with_activity(_running("old", "n0", 100), stale)
    new_none = _running("new", "n1", 200)
    assert _victims(_cycle([old_stale, new_none, _serve()])) == {"ns/new"}


def test_the_victim_with_the_most_recent_checkpoint_goes() -> None:
    old = dataclasses.replace(_running("old", "n0", 100), raynative=RayNativeFacts(last_checkpoint=NOW - 60))
    new = dataclasses.replace(_running("new", "n1", 200), raynative=RayNativeFacts(last_checkpoint=NOW - 3000))
    res = _cycle([old, new, _serve()])
    assert _victims(res) == {"ns/old"}
    assert "last checkpoint 1m00s ago" in res.evictions[0].message
    assert _victims(_cycle([old, new, _serve()], checkpoint_aware_victims=False)) == {"ns/new"}


def test_a_victim_without_facts_counts_everything_since_its_start() -> None:
    # "new" started 9,800 s ago with no checkpoint; "old" checkpointed 100 s ago: "old" loses less
    old = dataclasses.replace(_running("old", "n0", 100), raynative=RayNativeFacts(last_checkpoint=NOW - 100))
    res = _cycle([old, _running("new", "n1", 200), _serve()])
    assert _victims(res) == {"ns/old"}
    # ... but a checkpoint older than the other's whole run loses more
    old = dataclasses.replace(_running("old", "n0", 100), raynative=RayNativeFacts(last_checkpoint=150))
    new = _running("new", "n1", 9_900)
    assert _victims(_cycle([old, new, _serve()])) == {"ns/new"}


def test_priority_still_comes_first() -> None:
    old = _with_activity(_running("old", "n0", 100), _fresh_idle(1800))
    low = dataclasses.replace(_with_activity(_running("low", "n1", 200), _fresh_busy(NOW - 10)), priority=40)
    assert _victims(_cycle([old, low, _serve()])) == {"ns/low"}


def test_an_elastic_workers_idle_ray_node_is_shrunk_first() -> None:
    job = _running("train", "n0", 100, gpus=8, pods=4)
    job = dataclasses.replace(job, min_member=1)
    acts = [_fresh_busy(NOW - 900), _fresh_idle(600), _fresh_busy(NOW - 800), _fresh_busy(NOW - 30)]
    job.pods = [
        dataclasses.replace(p, ray_activity=a, created_at=float(k))
        for k, (p, a) in enumerate(zip(job.pods, acts, strict=True))
    ]
    serve = _serve(gpus=2)
    res = _cycle([job, _running("other", "n1", 50), serve])
    assert [e.pod for e in res.evictions] == ["train-1"]
    assert res.evictions[0].elastic
    assert "idle in Ray for 10m00s" in res.evictions[0].message
    serve4 = _serve(gpus=4)
    res = _cycle([job, _running("other", "n1", 50), serve4])
    assert sorted(e.pod for e in res.evictions) == ["train-1", "train-3"]  # idle, then busy for 30 s
    res = _cycle([job, _running("other", "n1", 50), serve], idle_aware_victims=False)
    assert [e.pod for e in res.evictions] == ["train-3"]  # KAI: newest worker first


def _filler(node: str, gpus: float) -> Job:
    """Work the preemptor may not touch (higher priority), so only the GPUs of the two candidates can make room."""
    job = _running(f"keep-{node}", node, 10, gpus=gpus)
    return dataclasses.replace(job, priority=200)


def test_work_at_risk_is_weighted_by_the_gpus_the_victim_holds() -> None:
    # "wide" has been busy 10 min on 8 GPUs (80 GPU-minutes), "narrow" 30 min on 1 GPU (30 GPU-minutes): KAI's order
    # and a time-only order both take "wide"; weighted by GPUs, "narrow" loses less
    wide = _with_activity(_running("wide", "n0", 100, gpus=8), _fresh_busy(NOW - 600))
    narrow = _with_activity(_running("narrow", "n1", 200, gpus=1), _fresh_busy(NOW - 1800))
    res = _cycle([wide, narrow, _filler("n1", 7), _serve(gpus=1)])
    assert _victims(res) == {"ns/narrow"}
    assert "victim order: busy in Ray for 30m00s, on 1 GPU" in res.evictions[0].message
    # the same time on the same GPUs: the shorter busy time still goes first
    narrow_long = _with_activity(_running("narrow", "n1", 200, gpus=1), _fresh_busy(NOW - 6000))
    assert _victims(_cycle([wide, narrow_long, _filler("n1", 7), _serve(gpus=1)])) == {"ns/wide"}


def test_checkpoint_bounds_are_weighted_too() -> None:
    wide = dataclasses.replace(_running("wide", "n0", 100, gpus=8), raynative=RayNativeFacts(last_checkpoint=NOW - 600))
    narrow = dataclasses.replace(
        _running("narrow", "n1", 200, gpus=1), raynative=RayNativeFacts(last_checkpoint=NOW - 1800)
    )
    res = _cycle([wide, narrow, _filler("n1", 7), _serve(gpus=1)])
    assert _victims(res) == {"ns/narrow"}
    assert "last checkpoint 30m00s ago, on 1 GPU" in res.evictions[0].message


def test_the_weight_is_the_gpus_held_and_a_gpu_less_pods_cores_count_a_little() -> None:
    cpu = _with_activity(_running("cpu", "n0", 100, gpus=0), _fresh_busy(NOW - 3600))  # 1 core, busy 1 h
    gpu = _with_activity(_running("gpu", "n1", 200, gpus=1), _fresh_busy(NOW - 600))  # 1 GPU, busy 10 min
    nodes = [Node("n0", Resources(8, 64000, 512e9)), Node("n1", Resources(8, 64000, 512e9))]
    ses = build_session(Snapshot(nodes, [Queue("q", quota=Resources(-1, -1, -1))], [cpu, gpu], now=NOW))
    by_name = {j.spec.name: j for j in ses.jobs}
    assert weight(ses, by_name["gpu"].pods) == 1.0
    assert weight(ses, by_name["cpu"].pods) == CORE_WEIGHT  # 1000 millicores
    assess(ses)
    assert by_name["gpu"].risk == 600.0
    assert by_name["cpu"].risk == 3600.0 * CORE_WEIGHT  # an hour on one core weighs less than 10 min on a GPU
    assert "on 0.01 GPU-equivalents" in by_name["cpu"].risk_note and "on 1 GPU" in by_name["gpu"].risk_note

"""Ray-native scheduling: bounded waits (ready-timeout, max-runtime, max-pending-time) and the RayService upgrade surge, in the
core's decisions and reasons."""

from __future__ import annotations

import dataclasses

import pytest

from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.decisions import CycleResult, Reason
from kai_ray.scheduler.snapshot import (
    Job,
    Node,
    Pod,
    PodPhase,
    Preemptibility,
    Queue,
    RayNativeFacts,
    Resources,
    SchedulerConfig,
    Snapshot,
)

pytestmark = pytest.mark.raynative

NOW = 10_000.0


def _job(name: str, gpus: float = 4, pods: int = 2, node: str | None = None, priority: int = 50, **kw: object) -> Job:
    running = node is not None
    return Job(
        "ns",
        name,
        "q",
        priority=priority,
        min_member=pods,
        created_at=100.0,
        last_start=kw.pop("last_start", 5000.0 if running else None),  # type: ignore[arg-type]
        pods=[
            Pod(
                f"{name}-{k}",
                f"{name}-{k}",
                "ns",
                f"ns/{name}",
                Resources(gpus / pods, 1000, 1e9),
                phase=PodPhase.RUNNING if running else PodPhase.PENDING,
                node=node,
                start_time=5000.0 if running else None,
                ready=kw.get("ready") if k else True,  # type: ignore[arg-type]
            )
            for k in range(pods)
        ],
        raynative=kw.get("facts"),  # type: ignore[arg-type]
    )


def _cycle(jobs: list[Job], quota: float = -1, limit: float = -1, **cfg: object) -> CycleResult:
    nodes = [Node("n0", Resources(8, 64000, 512e9)), Node("n1", Resources(8, 64000, 512e9))]
    queues = [Queue("q", quota=Resources(quota, -1, -1), limit=Resources(limit, -1, -1))]
    return run_cycle(Snapshot(nodes, queues, jobs, now=NOW, config=SchedulerConfig(**cfg)))  # type: ignore[arg-type]


def test_a_gang_bound_but_not_ready_past_its_ready_timeout_is_evicted_whole() -> None:
    facts = RayNativeFacts(ready_timeout=300, bound_since=NOW - 400)
    res = _cycle([_job("stuck", node="n0", ready=False, facts=facts)])
    assert sorted(e.pod for e in res.evictions) == ["stuck-0", "stuck-1"]
    assert {e.reason for e in res.evictions} == {Reason.READY_TIMEOUT}
    assert "1 of 2 pods are not Ready" in res.evictions[0].message
    assert res.jobs["ns/stuck"].reason is Reason.READY_TIMEOUT
    assert not _cycle([_job("ok", node="n0", ready=True, facts=facts)]).evictions
    within = RayNativeFacts(ready_timeout=600, bound_since=NOW - 400)
    assert not _cycle([_job("young", node="n0", ready=False, facts=within)]).evictions


def test_ready_timeout_is_off_by_default_and_has_a_config_default() -> None:
    stuck = _job("stuck", node="n0", ready=False, last_start=NOW - 400)
    assert not _cycle([stuck]).evictions
    assert len(_cycle([stuck], default_ready_timeout=300.0).evictions) == 2
    off = _job("off", node="n0", ready=False, last_start=NOW - 400, facts=RayNativeFacts(ready_timeout=0))
    assert not _cycle([off], default_ready_timeout=300.0).evictions  # 0 on the object switches it off


def test_a_gang_in_its_backoff_waits_and_says_until_when() -> None:
    res = _cycle([_job("retry", facts=RayNativeFacts(backoff_until=NOW + 30))])
    assert not res.binds
    assert res.jobs["ns/retry"].reason is Reason.READY_TIMEOUT_BACKOFF
    assert "placed again in 30s" in res.jobs["ns/retry"].message
    assert len(_cycle([_job("retry", facts=RayNativeFacts(backoff_until=NOW - 1))]).binds) == 2


def test_max_runtime_stops_a_running_gang_and_keeps_it_stopped() -> None:
    facts = RayNativeFacts(max_runtime=3600, admitted_seconds=3000)
    res = _cycle([_job("long", node="n0", facts=facts, last_start=NOW - 700)])
    assert {e.reason for e in res.evictions} == {Reason.MAX_RUNTIME}
    assert "admitted 1h01m, its max-runtime 1h00m" in res.evictions[0].message
    assert not _cycle([_job("short", node="n0", facts=facts, last_start=NOW - 500)]).evictions
    done = RayNativeFacts(max_runtime=3600, admitted_seconds=3700)
    res = _cycle([_job("long", facts=done)])
    assert not res.binds
    assert res.jobs["ns/long"].reason is Reason.MAX_RUNTIME_EXCEEDED


def test_max_pending_time_is_in_the_status_and_the_blocking_reason_stays() -> None:
    facts = RayNativeFacts(max_pending_time=600, pending_since=NOW - 700)
    blocker = _job("other", gpus=8, pods=1, node="n0")
    res = _cycle([blocker, _job("big", gpus=16, pods=2, facts=facts)])
    st = res.jobs["ns/big"]
    assert st.reason is Reason.GANG_DOES_NOT_FIT
    assert st.details["maxPendingExceeded"] is True
    assert "pending 11m40s, beyond its max-pending-time 10m00s" in st.message
    fresh = RayNativeFacts(max_pending_time=600, pending_since=NOW - 100)
    res = _cycle([blocker, _job("big", gpus=16, pods=2, facts=fresh)])
    assert "maxPendingExceeded" not in res.jobs["ns/big"].details


def _service(name: str, node: str | None = None, upgrade_of: str | None = None) -> Job:
    job = _job(name, gpus=8, pods=1, node=node, priority=125, facts=RayNativeFacts(upgrade_of=upgrade_of))
    return dataclasses.replace(job, preemptibility=Preemptibility.NON_PREEMPTIBLE, kind="RayService")


def test_a_rayservice_upgrade_surge_goes_above_quota_up_to_the_limit() -> None:
    active, surge = _service("svc-a", node="n0"), _service("svc-b", upgrade_of="ns/svc-a")
    res = _cycle([active, surge], quota=8, limit=16)
    assert [b.job for b in res.binds] == ["ns/svc-b"]
    plain = dataclasses.replace(surge, raynative=None)
    assert _cycle([active, plain], quota=8, limit=16).jobs["ns/svc-b"].reason is Reason.NON_PREEMPTIBLE_OVER_QUOTA
    off = _cycle([active, surge], quota=8, limit=16, upgrade_surge=False)
    assert off.jobs["ns/svc-b"].reason is Reason.NON_PREEMPTIBLE_OVER_QUOTA


def test_the_surge_preempts_lower_priority_work_never_the_active_cluster() -> None:
    active, surge = _service("svc-a", node="n0"), _service("svc-b", upgrade_of="ns/svc-a")
    train = _job("train", gpus=8, pods=2, node="n1")
    res = _cycle([active, train, surge], quota=8, limit=16)
    assert {e.job for e in res.evictions} == {"ns/train"}
    assert {b.job for b in res.binds} == {"ns/svc-b"}


def test_a_surge_that_cannot_start_says_what_would_help() -> None:
    active, surge = _service("svc-a", node="n0"), _service("svc-b", upgrade_of="ns/svc-a")
    st = _cycle([active, surge], quota=8, limit=8).jobs["ns/svc-b"]
    assert st.reason is Reason.OVER_LIMIT
    assert st.details["upgradeSurgeOf"] == "ns/svc-a"
    assert "upgradeStrategy None" in st.message
    # once KubeRay deletes the old cluster, the new one is the service again, within its quota
    assert _cycle([surge], quota=8, limit=8).binds


def test_the_pending_view_shows_the_backoff_and_the_max_pending_time() -> None:
    from kai_ray.scheduler.queue_views import LastCycle, pending_rows

    blocker = _job("other", gpus=8, pods=1, node="n0")
    retry = _job("retry", facts=RayNativeFacts(backoff_until=NOW + 30))
    late = _job("late", gpus=16, pods=2, facts=RayNativeFacts(max_pending_time=600, pending_since=NOW - 700))
    nodes = [Node("n0", Resources(8, 64000, 512e9)), Node("n1", Resources(8, 64000, 512e9))]
    snap = Snapshot(nodes, [Queue("q", quota=Resources(-1, -1, -1))], [blocker, retry, late], now=NOW)
    rows = {r.name: r for r in pending_rows(snap, LastCycle.of(run_cycle(snap)))}
    assert rows["retry"].position is None  # not tried while it waits out its backoff
    assert rows["retry"].reason == "ReadyTimeoutBackoff"
    assert "beyond its max-pending-time 10m00s" in rows["late"].message


def _late(action: str | None, **facts: object) -> Job:
    kw: dict[str, object] = {"max_pending_time": 600, "pending_since": NOW - 700, "max_pending_action": action}
    kw.update(facts)
    return dataclasses.replace(_job("big", gpus=16, pods=2, facts=RayNativeFacts(**kw)), kind="RayJob")  # type: ignore[arg-type]


def test_a_max_pending_action_is_the_cores_decision_with_the_blocking_reason_kept() -> None:
    blocker = _job("other", gpus=8, pods=1, node="n0")
    st = _cycle([blocker, _late("suspend")]).jobs["ns/big"]
    assert st.reason is Reason.MAX_PENDING_TIME_EXCEEDED
    assert st.details["maxPendingAction"] == "suspend" and st.details["blockingReason"] == "GangDoesNotFit"
    assert st.details["pendingSince"] == NOW - 700 and "maxPendingActed" not in st.details
    assert st.message.startswith("pending 11m40s, beyond its max-pending-time 10m00s: suspending its RayJob")
    assert "(kai-ray.io/max-pending-action: suspend); blocked by GangDoesNotFit: " in st.message
    fail = _cycle([blocker, _late("fail")]).jobs["ns/big"]
    assert (
        fail.reason is Reason.MAX_PENDING_TIME_EXCEEDED
        and "marking it failed and suspending its RayJob" in fail.message
    )
    # before the limit, or without an action: nothing is decided
    assert _cycle([blocker, _late("suspend", pending_since=NOW - 60)]).jobs["ns/big"].reason is Reason.GANG_DOES_NOT_FIT
    assert _cycle([blocker, _late(None)]).jobs["ns/big"].reason is Reason.GANG_DOES_NOT_FIT


def test_once_acted_the_decision_says_so_and_a_new_wait_starts_from_the_pods() -> None:
    blocker = _job("other", gpus=8, pods=1, node="n0")
    st = _cycle([blocker, _late("suspend", max_pending_acted=NOW - 90)]).jobs["ns/big"]
    assert st.details["maxPendingActed"] is True
    assert ": suspended (kai-ray.io/max-pending-action: suspend)" in st.message
    # the user lifted the suspend: KubeRay created the pods again 30 s ago, a new wait (the adapter acts again later)
    late = _late("suspend", max_pending_acted=NOW - 90)
    late.pods = [dataclasses.replace(p, created_at=NOW - 30) for p in late.pods]
    assert _cycle([blocker, late]).jobs["ns/big"].reason is Reason.GANG_DOES_NOT_FIT
    late.pods = [dataclasses.replace(p, created_at=NOW - 80) for p in late.pods]
    late.raynative.max_pending_time = 60  # type: ignore[union-attr]
    again = _cycle([blocker, late]).jobs["ns/big"]
    assert again.reason is Reason.MAX_PENDING_TIME_EXCEEDED and "maxPendingActed" not in again.details


def test_a_gang_marked_failed_is_never_placed_again() -> None:
    failed = _late("fail", max_pending_acted=NOW - 50, max_pending_failed=True)
    failed.pods = [dataclasses.replace(p, created_at=NOW - 5) for p in failed.pods]  # even once the user lifts it
    res = _cycle([failed])  # 16 GPUs free: it would fit
    assert not res.binds
    st = res.jobs["ns/big"]
    assert st.reason is Reason.MAX_PENDING_TIME_EXCEEDED
    assert "marked failed" in st.message and "not placed again" in st.message


def test_the_pending_view_shows_the_max_pending_action() -> None:
    from kai_ray.scheduler.queue_views import LastCycle, pending_rows

    blocker = _job("other", gpus=8, pods=1, node="n0")
    nodes = [Node("n0", Resources(8, 64000, 512e9)), Node("n1", Resources(8, 64000, 512e9))]
    snap = Snapshot(nodes, [Queue("q", quota=Resources(-1, -1, -1))], [blocker, _late("suspend")], now=NOW)
    rows = {r.name: r for r in pending_rows(snap, LastCycle.of(run_cycle(snap)))}
    assert rows["big"].reason == "MaxPendingTimeExceeded"
    assert "suspending its RayJob" in rows["big"].message


def test_a_refused_suspend_is_reported_as_such() -> None:
    blocker = _job("other", gpus=8, pods=1, node="n0")
    why = "RayService svc: spec.suspend is not part of the installed RayService CRD"
    late = _late("suspend", max_pending_acted=NOW - 90, max_pending_refused=why)
    st = _cycle([blocker, late]).jobs["ns/big"]
    assert st.details["maxPendingActed"] is True
    assert f": not suspended, reporting only: {why} (kai-ray.io/max-pending-action: suspend)" in st.message

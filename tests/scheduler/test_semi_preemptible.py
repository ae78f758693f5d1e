"""Semi-preemptible Ray gangs: the core (head, submitter, each worker group's minimum) is non-preemptible and charged
within quota; the workers above it are the only victims; the core never moves between cycles (KAI's alpha lets a
late member take an incumbent's core slot)."""

from __future__ import annotations

import dataclasses
import random

from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.decisions import CycleResult, Reason
from kai_ray.scheduler.semipreemptible import core_rows
from kai_ray.scheduler.session import ACTIVE
from kai_ray.scheduler.session_build import build_session
from kai_ray.scheduler.snapshot import (
    Job,
    Node,
    Pod,
    PodPhase,
    Preemptibility,
    Queue,
    Resources,
    Snapshot,
    SubGroup,
)

SEMI = Preemptibility.SEMI_PREEMPTIBLE
GiB = 1e9


def _pod(job: str, name: str, gpus: float, sg: str, *, node: str | None = None, t: float = 0.0, **kw: object) -> Pod:
    running = node is not None
    return Pod(
        f"{job}-{name}",
        f"{job}-{name}",
        "ns",
        f"ns/{job}",
        Resources(gpus, 1000, GiB),
        phase=PodPhase.RUNNING if running else PodPhase.PENDING,
        node=node,
        subgroup=sg,
        start_time=t if running else None,
        created_at=kw.pop("created_at", t),  # type: ignore[arg-type]
        is_ray_head=sg == "headgroup",
        **kw,  # type: ignore[arg-type]
    )


def _ray(
    name: str,
    queue: str,
    pods: list[Pod],
    *,
    min_workers: int = 2,
    preemptibility: Preemptibility | None = SEMI,
    priority: int = 50,
    submitter: bool = False,
) -> Job:
    subgroups = [SubGroup("headgroup", min_member=1, max_member=1), SubGroup("workers", min_member=min_workers)]
    if submitter:
        subgroups.append(SubGroup("submitter", min_member=0, max_member=1, core=1))
    return Job(
        "ns",
        name,
        queue,
        priority=priority,
        preemptibility=preemptibility,
        min_member=1 + min_workers,
        subgroups=subgroups,
        kind="RayJob" if submitter else "RayCluster",
        created_at=0.0,
        last_start=0.0,
        pods=pods,
    )


def _running_train(burst: int = 4, node: str = "n0", submitter: bool = False) -> Job:
    """A semi-preemptible training cluster: head + 2 core workers, then ``burst`` workers, 1 GPU each."""
    pods = [_pod("train", "head", 1, "headgroup", node=node, t=1)]
    pods += [_pod("train", f"w{i}", 1, "workers", node=node, t=2 + i) for i in range(2 + burst)]
    if submitter:
        pods.append(_pod("train", "submit", 0, "submitter", node=node, t=20))
    return _ray("train", "a", pods, submitter=submitter)


def _cycle(jobs: list[Job], quota_a: float = 3, quota_b: float = 5, gpus: float = 8, now: float = 100) -> CycleResult:
    nodes = [Node("n0", Resources(gpus, 64000, 512 * GiB))]
    queues = [Queue("a", quota=Resources(quota_a, -1, -1)), Queue("b", quota=Resources(quota_b, -1, -1))]
    return run_cycle(Snapshot(nodes, queues, jobs, now=now))


def _pending(name: str, queue: str, gpus: int, priority: int = 50) -> Job:
    return Job(
        "ns",
        name,
        queue,
        priority=priority,
        min_member=1,
        created_at=50,
        pods=[Pod(f"{name}-0", f"{name}-0", "ns", f"ns/{name}", Resources(gpus, 1000, GiB), created_at=50)],
    )


def _evicted(res: CycleResult, job: str = "ns/train") -> set[str]:
    return {e.pod.removeprefix("train-") for e in res.evictions if e.job == job}


CORE = {"head", "w0", "w1"}


def test_running_core_is_charged_non_preemptible_and_the_burst_is_not() -> None:
    res = _cycle([_running_train()])
    q = res.queues["a"]
    assert q.allocated["gpu"] == 7
    assert q.allocated_non_preemptible["gpu"] == 3  # head + the two minReplicas workers


def test_reclaim_takes_burst_workers_only() -> None:
    res = _cycle([_running_train(), _pending("other", "b", 4)])
    assert res.jobs["ns/other"].scheduled
    gone = _evicted(res)
    assert len(gone) == 3 and not gone & CORE  # 1 GPU was free; 3 burst workers make the rest
    assert all(not e.whole_gang for e in res.evictions)


def test_reclaim_never_takes_the_core_even_when_the_burst_is_not_enough() -> None:
    res = _cycle([_running_train(), _pending("other", "b", 7)], quota_b=8)
    assert not res.jobs["ns/other"].scheduled
    assert not _evicted(res) & CORE


def test_preempt_takes_burst_workers_only_and_keeps_the_submitter() -> None:
    train = _running_train(burst=5, submitter=True)  # 8 GPUs: the node is full
    res = _cycle([train, _pending("serve", "a", 2, priority=125)], quota_a=8)
    assert res.jobs["ns/serve"].scheduled
    gone = _evicted(res)
    assert len(gone) == 2 and not gone & (CORE | {"submit"})
    # and the newest burst workers go first (nothing else tells them apart)
    assert gone == {"w6", "w5"}


def test_a_gang_with_nothing_above_its_core_is_no_victim() -> None:
    res = _cycle([_running_train(burst=0), _pending("serve", "a", 8, priority=125)], quota_a=20, gpus=8)
    assert not res.evictions
    assert not res.jobs["ns/serve"].scheduled


def test_core_over_deserved_quota_stays_pending_with_a_clear_reason() -> None:
    pods = [_pod("train", "head", 1, "headgroup")] + [_pod("train", f"w{i}", 1, "workers") for i in range(4)]
    res = _cycle([_ray("train", "a", pods)], quota_a=2)
    st = res.jobs["ns/train"]
    assert not st.scheduled and st.reason is Reason.NON_PREEMPTIBLE_OVER_QUOTA
    assert "semi-preemptible job's core needs in-quota gpu of queue 'a'" in st.message
    assert st.details["queue"]["podGroupRequestedNonPreemptible"]["gpu"] == 3


def test_core_within_quota_is_placed_and_the_burst_goes_over_quota() -> None:
    pods = [_pod("train", "head", 1, "headgroup")] + [_pod("train", f"w{i}", 1, "workers") for i in range(6)]
    res = _cycle([_ray("train", "a", pods)], quota_a=3)
    assert len([b for b in res.binds if b.job == "ns/train"]) == 7
    q = res.queues["a"]
    assert q.allocated["gpu"] == 7 and q.allocated_non_preemptible["gpu"] == 3
    # non-preemptible, the same cluster stops at its quota: its workers above minReplicas wait for nothing
    plain = _ray("train", "a", pods, preemptibility=Preemptibility.NON_PREEMPTIBLE)
    res = _cycle([plain], quota_a=3)
    assert len(res.binds) == 3 and res.jobs["ns/train"].reason is Reason.SCHEDULED
    assert res.jobs["ns/train"].details["queue"]["podGroupRequestedNonPreemptible"]["gpu"] == 1


# ---------------------------------------------------------------------- the core never moves between cycles


def _apply(jobs: list[Job], res: CycleResult, now: float) -> list[Job]:
    """What the cluster looks like one cycle later: bound pods run, started now."""
    placed = {b.pod: b.node for b in res.binds}
    out = []
    for j in jobs:
        pods = [
            dataclasses.replace(p, phase=PodPhase.RUNNING, node=placed[p.uid], start_time=now) if p.uid in placed else p
            for p in j.pods
        ]
        out.append(dataclasses.replace(j, pods=pods))
    return out


def _protected(jobs: list[Job], now: float, quota_a: float) -> tuple[set[str], float]:
    nodes = [Node("n0", Resources(8, 64000, 512 * GiB)), Node("n1", Resources(8, 64000, 512 * GiB))]
    ses = build_session(Snapshot(nodes, [Queue("a", quota=Resources(quota_a, -1, -1))], jobs, now=now))
    job = ses.jobs[ses.job_index["ns/train"]]
    uids = {ses.pods[p].uid for ps in job.podsets.values() for p in core_rows(ses, ps, ACTIVE)}
    return uids, ses.q_alloc_np[job.queue][0]


def test_a_late_member_never_shifts_the_protected_core() -> None:
    """KAI's "core membership is unstable across sessions": a member that becomes ready after the gang formed takes
    an incumbent's core slot there (satisfied first, then by name), and with a different footprint the queue's
    non-preemptible charge moves. Here the late worker is created first, sorts first by name and is twice as large,
    and still joins the burst; the charge and the protected pods stay the same in every cycle and listing order."""
    head = _pod("train", "head", 1, "headgroup", created_at=1)
    w1 = _pod("train", "w1", 1, "workers", created_at=2)
    w2 = _pod("train", "w2", 1, "workers", created_at=3)
    late = _pod("train", "a-late", 2, "workers", created_at=0, gated=True)  # not ready yet: a scheduling gate
    jobs = [_ray("train", "a", [late, w2, head, w1])]
    nodes = [Node("n0", Resources(8, 64000, 512 * GiB)), Node("n1", Resources(8, 64000, 512 * GiB))]

    def cycle(js: list[Job], now: float) -> CycleResult:
        return run_cycle(Snapshot(nodes, [Queue("a", quota=Resources(3, -1, -1))], js, now=now))

    res = cycle(jobs, 10)  # cycle 1: the core is placed
    assert {b.pod for b in res.binds} == {"train-head", "train-w1", "train-w2"}
    assert res.queues["a"].allocated_non_preemptible["gpu"] == 3
    jobs = _apply(jobs, res, 10)
    expected = {"train-head", "train-w1", "train-w2"}
    assert _protected(jobs, 11, 3) == (expected, 3)

    # cycle 2: the late member's gate is lifted; it is placed above quota as burst, the core stays
    jobs = [dataclasses.replace(jobs[0], pods=[dataclasses.replace(p, gated=False) for p in jobs[0].pods])]
    res = cycle(jobs, 20)
    assert {b.pod for b in res.binds} == {"train-a-late"}
    assert res.queues["a"].allocated_non_preemptible["gpu"] == 3 and res.queues["a"].allocated["gpu"] == 5
    jobs = _apply(jobs, res, 20)

    # later cycles, the pods listed in any order: the same pods are protected, the same charge
    rng = random.Random(7)
    for now in (30, 40, 50):
        pods = list(jobs[0].pods)
        rng.shuffle(pods)
        shuffled = [dataclasses.replace(jobs[0], pods=pods)]
        assert _protected(shuffled, now, 3) == (expected, 3)
        res = cycle(shuffled, now)
        assert res.queues["a"].allocated_non_preemptible["gpu"] == 3 and not res.evictions

    # and when room is needed the late member is the victim, never an incumbent
    other = _pending("other", "a", 8, priority=125)
    other = dataclasses.replace(
        other, queue="a", pods=[dataclasses.replace(other.pods[0], request=Resources(13, 0, 0))]
    )
    res = cycle([*jobs, other], 60)
    assert {e.pod for e in res.evictions} <= {"train-a-late"}


def test_pods_created_in_another_order_make_the_same_core() -> None:
    """Two identical clusters whose workers were created in opposite orders: each protects the pods that started
    first, and both charge the same."""

    def cluster(order: list[int]) -> list[Job]:
        pods = [_pod("train", "head", 1, "headgroup", node="n0", t=1)]
        pods += [
            _pod("train", f"w{i}", 1, "workers", node="n0", t=2 + i, created_at=10 - k) for k, i in enumerate(order)
        ]
        return [_ray("train", "a", pods)]

    a = _protected(cluster([0, 1, 2, 3]), 100, 3)
    b = _protected(cluster([3, 2, 1, 0]), 100, 3)
    assert a == b == ({"train-head", "train-w0", "train-w1"}, 3)


# ---------------------------------------------------------------------- the setting


def test_queue_default_applies_to_derived_preemptibility_only() -> None:
    def mode(job: Job, default: Preemptibility | None) -> tuple[bool, bool]:
        q = Queue("a", quota=Resources(-1, -1, -1), default_preemptibility=default)
        ses = build_session(Snapshot([Node("n0", Resources(8, 64000, 512 * GiB))], [q], [job]))
        info = ses.jobs[0]
        return info.preemptible, info.semi

    derived = dataclasses.replace(_running_train(), preemptibility=Preemptibility.PREEMPTIBLE)
    derived.preemptibility_derived = True
    assert mode(derived, SEMI) == (True, True)
    assert mode(derived, None) == (True, False)
    explicit = dataclasses.replace(derived, preemptibility_derived=False)
    assert mode(explicit, SEMI) == (True, False)  # the object's own label wins
    unset = dataclasses.replace(derived, preemptibility=None)
    assert mode(unset, SEMI) == (True, True)
    assert mode(dataclasses.replace(unset, priority=125), None) == (False, False)  # KAI's rule from the priority


def test_a_core_that_would_move_runs_non_preemptible_with_a_finding() -> None:
    job = _running_train()
    job.subgroups = [SubGroup("r", min_subgroup=1), *(dataclasses.replace(s, parent="r") for s in job.subgroups)]
    res = _cycle([job, _pending("serve", "a", 2, priority=125)], quota_a=20)
    assert any(
        f.name == "ns/train" and f.field == "preemptibility" and "minSubGroup 1 of 2" in f.message for f in res.findings
    )
    assert not res.evictions  # non-preemptible: no victim at all


def test_the_core_charge_follows_evictions_and_rollbacks_exactly() -> None:
    """The session recomputes the core's charge from its pods at every change, so a what-if undone leaves the
    queue's non-preemptible allocation as it was, and evicting a core pod (not preemption: e.g. a stale gang) moves
    the core onto the next pod that started."""
    from kai_ray.scheduler.decisions import Action
    from kai_ray.scheduler.session import EvictInfo

    ses = build_session(
        Snapshot([Node("n0", Resources(8, 64000, 512 * GiB))], [Queue("a")], [_running_train()], now=100)
    )
    job = ses.jobs[0]
    q = job.queue
    info = EvictInfo(Action.STALE_GANG_EVICTION, Reason.STALE_GANG, None, "", False, True)
    by_uid = {ses.pods[p].uid: p for p in job.pods}
    assert ses.q_alloc_np[q] == [3.0, 3000.0, 3 * GiB]
    cp = ses.stmt.checkpoint()
    ses.stmt.evict(by_uid["train-w5"], info)  # burst: no change
    assert ses.q_alloc_np[q][0] == 3.0
    ses.stmt.evict(by_uid["train-w0"], info)  # core: the next worker to start (w2) takes its place, same charge
    assert ses.q_alloc_np[q][0] == 3.0
    for uid in ("train-w1", "train-w2", "train-w3", "train-w4"):
        ses.stmt.evict(by_uid[uid], info)
    assert ses.q_alloc_np[q][0] == 1.0  # only the head is left
    ses.stmt.rollback(cp)
    assert ses.q_alloc_np[q] == [3.0, 3000.0, 3 * GiB]
    assert {ses.pods[p].uid for ps in job.podsets.values() for p in core_rows(ses, ps, ACTIVE)} == {
        "train-head",
        "train-w0",
        "train-w1",
    }


def test_the_core_follows_bind_order_not_container_start_order() -> None:
    """Pods bound in one order may start their containers in another; the core is the first bound, so a burst pod
    whose container happened to start first does not take a core slot."""
    pods = [_pod("train", "head", 1, "headgroup", node="n0", t=1, bound_at=1.0)]
    for name, bound, started in (("w0", 2.0, 9.0), ("w1", 3.0, 8.0), ("late", 5.0, 6.0)):
        pods.append(_pod("train", name, 1, "workers", node="n0", t=started, bound_at=bound))
    assert _protected([_ray("train", "a", pods)], 100, 3) == ({"train-head", "train-w0", "train-w1"}, 3)


def test_burst_growth_may_reclaim_while_the_core_is_above_a_lowered_quota() -> None:
    """A running core above its queue's quota (the quota was lowered after it started): growing the burst charges
    nothing in quota, so the job may still reclaim another queue's over-quota work for it, as a preemptible job."""
    pods = [_pod("train", "head", 1, "headgroup", node="n0", t=1)]
    pods += [_pod("train", f"w{i}", 1, "workers", node="n0", t=2 + i) for i in range(2)]
    pods += [_pod("train", "w2", 1, "workers")]  # a pending burst worker
    greedy = _ray(
        "greedy",
        "b",
        [_pod("greedy", "head", 0, "headgroup", node="n0", t=1)]
        + [_pod("greedy", f"w{i}", 1, "workers", node="n0", t=2) for i in range(5)],
        min_workers=0,
        preemptibility=Preemptibility.PREEMPTIBLE,
    )
    res = _cycle([_ray("train", "a", pods), greedy], quota_a=2, quota_b=0)
    assert {b.pod for b in res.binds} == {"train-w2"}
    assert len([e for e in res.evictions if e.job == "ns/greedy"]) == 1

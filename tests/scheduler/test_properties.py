"""Property tests of the core over random clusters (hypothesis).

Invariants that must hold for every snapshot: the same snapshot gives the same decisions; no node is ever given
more than it has; gangs are never left half-alive by the core; non-preemptible pods are never victims; every job
gets a status; over-quota division never hands out more than the capacity left after deserved quotas.
"""

from __future__ import annotations

from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.decisions import CycleResult
from kai_ray.scheduler.fairshare import ShareQueue, divide_level
from kai_ray.scheduler.snapshot import (
    Job,
    Node,
    Pod,
    PodPhase,
    Queue,
    Resources,
    SchedulerConfig,
    Snapshot,
)

GIB = 2.0**30


@st.composite
def clusters(draw: st.DrawFn) -> Snapshot:
    n_nodes = draw(st.integers(1, 6))
    nodes = [
        Node(
            f"n{i}",
            Resources(draw(st.sampled_from([0, 2, 4, 8])), 32_000.0, 256 * GIB),
            max_pods=draw(st.integers(2, 20)),
        )
        for i in range(n_nodes)
    ]
    queues = [Queue("root", quota=Resources(-1, -1, -1))]
    n_q = draw(st.integers(1, 3))
    for q in range(n_q):
        queues.append(
            Queue(
                f"q{q}",
                parent="root",
                priority=draw(st.sampled_from([50, 100, 200])),
                quota=Resources(float(draw(st.integers(0, 8))), -1, -1),
                limit=Resources(float(draw(st.sampled_from([-1, 4, 16]))), -1, -1),
                over_quota_weight=Resources(float(draw(st.integers(0, 3))), 1, 1),
                created_at=float(q),
            )
        )
    # running pods are placed on nodes only where they fit, so the input itself is consistent
    free = {n.name: [n.allocatable.gpu, n.allocatable.cpu, n.max_pods] for n in nodes}
    jobs: list[Job] = []
    for j in range(draw(st.integers(1, 8))):
        size = draw(st.integers(1, 4))
        gpus = float(draw(st.sampled_from([0, 1, 2, 4])))
        running = draw(st.booleans())
        pods = []
        placed_ok = True
        for k in range(size):
            phase, node = PodPhase.PENDING, None
            if running:
                node = next((nm for nm, f in free.items() if f[0] >= gpus and f[1] >= 1000 and f[2] >= 1), None)
                if node is None:
                    placed_ok = False
                else:
                    free[node][0] -= gpus
                    free[node][1] -= 1000
                    free[node][2] -= 1
                    phase = PodPhase.RUNNING
            pods.append(
                Pod(
                    f"j{j}-{k}",
                    f"j{j}-{k}",
                    "ns",
                    f"ns/j{j}",
                    Resources(gpus, 1000, GIB),
                    phase=phase,
                    node=node,
                    is_ray_head=(k == 0),
                    start_time=0.0,
                )
            )
        if running and not placed_ok:
            pods = [p for p in pods if p.phase is PodPhase.RUNNING]
            if not pods:
                continue
        jobs.append(
            Job(
                "ns",
                f"j{j}",
                f"q{draw(st.integers(0, n_q - 1))}",
                priority=draw(st.sampled_from([50, 75, 100, 125])),
                min_member=draw(st.integers(1, len(pods))),
                created_at=float(j),
                pods=pods,
                max_member=draw(st.one_of(st.none(), st.integers(len(pods), len(pods) + 2))),
            )
        )
    groups: dict[tuple[str, str], float] = {}  # running fractional pods share GPUs, each a whole device
    for f in range(draw(st.integers(0, 8))):  # fractional-GPU pods, pending or running on a shared GPU
        frac = draw(st.sampled_from([0.25, 0.4, 0.5, 0.75]))
        phase, node, group = PodPhase.PENDING, None, None
        if draw(st.booleans()):
            joinable = sorted(k for k, used in groups.items() if used + frac <= 1.0 + 1e-9 and free[k[0]][2] >= 1)
            if joinable and draw(st.booleans()):
                node, group = draw(st.sampled_from(joinable))
            else:
                node = next((nm for nm, fr in free.items() if fr[0] >= 1 and fr[1] >= 500 and fr[2] >= 1), None)
                if node is not None:
                    free[node][0] -= 1
                    group = f"{node}-gpu{sum(1 for k in groups if k[0] == node)}"
            if node is not None and group is not None:
                groups[(node, group)] = groups.get((node, group), 0.0) + frac
                free[node][1] -= 500
                free[node][2] -= 1
                phase = PodPhase.RUNNING
        pod = Pod(
            f"f{f}",
            f"f{f}",
            "ns",
            f"ns/f{f}",
            Resources(frac if node else 0, 500, GIB),
            phase=phase,
            node=node,
            gpu_fraction=frac,
            gpu_group=group,
            start_time=0.0,
        )
        jobs.append(
            Job(
                "ns",
                f"f{f}",
                f"q{draw(st.integers(0, n_q - 1))}",
                priority=draw(st.sampled_from([50, 75, 100, 125])),
                pods=[pod],
                created_at=100.0 + f,
            )
        )
    cfg = SchedulerConfig(
        queue_priority_in_quota_reclaim=draw(st.booleans()), placement_gpu=draw(st.sampled_from(["binpack", "spread"]))
    )
    return Snapshot(nodes, queues, jobs, now=1000.0, config=cfg)


def _fingerprint(res: CycleResult) -> tuple[object, ...]:
    return (
        [(b.pod, b.node, b.pipelined, b.gpu_group, b.reason) for b in res.binds],
        [(e.pod, e.action, e.preemptor, e.reason) for e in res.evictions],
        sorted((k, v.scheduled, v.reason, v.message) for k, v in res.jobs.items()),
        sorted((k, tuple(v.fair_share.items())) for k, v in res.queues.items()),
    )


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(clusters())
def test_deterministic(snap: Snapshot) -> None:
    assert _fingerprint(run_cycle(snap)) == _fingerprint(run_cycle(snap))


@SETTINGS
@given(clusters())
def test_invariants(snap: Snapshot) -> None:
    res = run_cycle(snap)
    assert not [f for f in res.findings if f.kind == "Cycle"], res.findings
    pods = {p.uid: p for j in snap.jobs for p in j.pods}
    jobs = {j.key: j for j in snap.jobs}
    evicted = {e.pod for e in res.evictions}
    # node capacity after the cycle (victims gone, binds in; pipelined binds land on the victims' room); a shared
    # GPU holds at most 1.0 of fractions and occupies one whole device
    used: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    shared: dict[tuple[str, str], float] = defaultdict(float)

    def hold(pod: Pod, node: str, group: str | None) -> None:
        u = used[node]
        u[1] += pod.request.cpu
        u[2] += 1
        if pod.gpu_fraction is not None:
            assert group, (pod.uid, node)
            shared[(node, group)] += pod.gpu_fraction
        else:
            u[0] += pod.request.gpu

    for p in pods.values():
        if p.phase is PodPhase.RUNNING and p.uid not in evicted:
            hold(p, p.node or "", p.gpu_group or f"{p.uid}-gpu")
    for e in res.evictions:
        if e.moved_to:  # a moved (consolidated) pod's copy holds its new node
            hold(pods[e.pod], e.moved_to, e.moved_group)
    for b in res.binds:
        assert pods[b.pod].phase is PodPhase.PENDING
        hold(pods[b.pod], b.node, b.gpu_group)
    for key, total in shared.items():
        assert total <= 1.0 + 1e-9, (key, total)
        used[key[0]][0] += 1.0
    for n in snap.nodes:
        u = used[n.name]
        assert u[0] <= n.allocatable.gpu + 1e-9, (n.name, u)
        assert u[1] <= n.allocatable.cpu + 1e-6, (n.name, u)
        assert u[2] <= n.max_pods, (n.name, u)
    # victims: never non-preemptible; the core never leaves a gang below its minimum
    for e in res.evictions:
        assert jobs[e.job].preemptible or e.action.value == "stalegangeviction", e
    for key, j in jobs.items():
        alive = sum(1 for p in j.pods if (p.phase is PodPhase.RUNNING and p.uid not in evicted))
        alive += sum(1 for b in res.binds if b.job == key)
        alive += sum(1 for e in res.evictions if e.job == key and e.moved_to)  # re-created on its new node
        was_alive = sum(1 for p in j.pods if p.phase is PodPhase.RUNNING)
        if any(p.uid in evicted for p in j.pods) and was_alive >= j.min_member:
            assert alive == 0 or alive >= j.min_member, (key, alive, j.min_member)
        if j.max_member is not None:
            assert alive <= max(j.max_member, j.min_member) or alive == was_alive
        assert key in res.jobs
    # gangs are bound whole: a job with no running pods either gets >= min binds or none
    for key, j in jobs.items():
        if all(p.phase is PodPhase.PENDING for p in j.pods):
            n = sum(1 for b in res.binds if b.job == key)
            assert n == 0 or n >= j.min_member, (key, n)


@settings(max_examples=300, deadline=None)
@given(
    total=st.integers(0, 200),
    queues=st.lists(
        st.tuples(
            st.integers(0, 40),
            st.integers(0, 120),
            st.integers(0, 4),
            st.sampled_from([1, 2, 3]),
            st.sampled_from([-1, 10, 50]),
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_fair_share_never_exceeds_capacity(total: int, queues: list[tuple[int, int, int, int, int]]) -> None:
    qs = [
        ShareQueue(
            uid=f"q{i}",
            priority=p,
            created_at=float(i),
            deserved=[float(d), 0.0, 0.0],
            max_allowed=[float(lim), -1.0, -1.0],
            weight=[float(w), 1.0, 1.0],
            request=[float(r), 0.0, 0.0],
        )
        for i, (d, r, w, p, lim) in enumerate(queues)
    ]
    left = divide_level(float(total), qs, 0)
    handed = sum(q.fair_share[0] for q in qs)
    deserved_phase = sum(min(q.deserved[0], q.requestable(0)) for q in qs)
    assert handed <= max(float(total), deserved_phase) + 1e-9
    assert left >= -1e-9
    if deserved_phase <= total:
        assert abs(handed + left - total) < 1e-6 or handed <= total
    for q in qs:
        assert q.fair_share[0] >= min(q.deserved[0], q.requestable(0)) - 1e-9

"""The incremental session decides exactly what a session built from scratch decides.

A small world evolves through random events (PodGroups arrive with whole-GPU, fractional and GPU-memory pods,
the cycle's binds and evictions are applied, releasing pods go, PodGroups finish, nodes change, a pod is recreated
under a PodGroup that another one already holds). After each event both paths run a cycle on the same snapshot:
``run_cycle(snapshot)`` and ``run_cycle(snapshot, state)``, where ``state`` is told only what changed. Every
decision, status and finding must be equal.
"""

from __future__ import annotations

import dataclasses
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.decisions import CycleResult
from kai_ray.scheduler.incremental import IncrementalState
from kai_ray.scheduler.session import Session
from kai_ray.scheduler.session_build import build_session
from kai_ray.scheduler.snapshot import Job, Node, Pod, PodPhase, Queue, Resources, Snapshot

GIB = 1 << 30


class World:
    """Nodes, queues and PodGroups as an adapter would hold them, reporting each change to ``state``."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.state = IncrementalState()
        self.nodes = [self._node(i) for i in range(rng.randint(2, 6))]
        self.queues = [
            Queue("root", quota=Resources(-1, -1, -1)),
            Queue("a", parent="root", quota=Resources(rng.choice([2.0, 4.0, -1]), -1, -1)),
            Queue("b", parent="root", quota=Resources(rng.choice([0.0, 2.0]), -1, -1)),
        ]
        self.jobs: dict[str, Job] = {}
        self.now = 0.0
        self.serial = 0

    def _node(self, i: int) -> Node:
        rng = self.rng
        extended = {"example.com/fpga": 2.0} if rng.random() < 0.2 else {}
        return Node(
            f"n{i}",
            Resources(float(rng.choice([0, 2, 4, 8])), float(rng.choice([16000, 64000])), 256.0 * GIB),
            max_pods=rng.choice([4, 110]),
            gpu_memory_mib=rng.choice([0, 40000, 80000]),
            ready=rng.random() > 0.1,
            extended=extended,
        )

    def snapshot(self) -> Snapshot:
        return Snapshot(list(self.nodes), list(self.queues), list(self.jobs.values()), now=self.now)

    def _pod(self, job: str, k: int) -> Pod:
        rng = self.rng
        self.serial += 1
        kind = rng.random()
        gpu, frac, mem = 0.0, None, None
        if kind < 0.4:
            gpu = float(rng.choice([1, 1, 2, 4]))
        elif kind < 0.65:
            frac = rng.choice([0.25, 0.5, 0.3, 0.11, 0.7])
        elif kind < 0.75:
            mem = rng.choice([10000, 20000])
        extended = {"example.com/fpga": 1.0} if rng.random() < 0.05 else {}
        uid = f"ns/{job}-{self.serial}"
        if rng.random() < 0.03 and self.jobs:  # a uid another PodGroup already holds: a finding, never placed
            other = rng.choice(list(self.jobs.values()))
            if other.pods:
                uid = other.pods[0].uid
        return Pod(
            uid,
            f"{job}-{k}",
            "ns",
            f"ns/{job}",
            Resources(gpu, float(rng.choice([1000, 2000, 8000])), float(rng.choice([1, 4, 16])) * GIB),
            gpu_fraction=frac,
            gpu_memory_mib=mem,
            created_at=self.now,
            extended=extended,
        )

    def arrive(self) -> None:
        rng = self.rng
        name = f"j{self.serial:04d}"
        n = rng.randint(1, 3)
        job = Job(
            "ns",
            name,
            rng.choice(["a", "b", "b", "root" if rng.random() < 0.05 else "a"]),
            priority=rng.choice([50, 50, 100, 125]),
            min_member=rng.randint(1, n),
            max_member=rng.choice([None, n + 1]),
            created_at=self.now,
            uid=name,
        )
        job.pods = [self._pod(name, k) for k in range(n)]
        self.jobs[job.key] = job
        self.state.job_changed(job.key)

    def apply(self, res: CycleResult) -> None:
        """The controllers' part: binds make pods Running; an eviction deletes the pod (or leaves it releasing)
        and the owner recreates it Pending."""
        by_uid = {(p.uid, j.key): p for j in self.jobs.values() for p in j.pods}
        for b in res.binds:
            pod = by_uid.get((b.pod, b.job))
            if pod is None or pod.phase is not PodPhase.PENDING or b.pipelined:
                continue
            pod.phase, pod.node, pod.gpu_group, pod.start_time = PodPhase.RUNNING, b.node, b.gpu_group, self.now
            self.state.job_changed(b.job)
        for e in res.evictions:
            pod = by_uid.get((e.pod, e.job))
            job = self.jobs.get(e.job)
            if pod is None or job is None or pod not in job.pods:
                continue
            if self.rng.random() < 0.3:
                pod.phase = PodPhase.RELEASING
            else:
                job.pods.remove(pod)
                job.pods.append(self._pod(job.name, len(job.pods)))
            self.state.job_changed(e.job)

    def event(self) -> None:
        rng = self.rng
        self.now += rng.choice([1.0, 30.0, 600.0])
        roll = rng.random()
        running = [j for j in self.jobs.values() if any(p.phase is not PodPhase.PENDING for p in j.pods)]
        if roll < 0.45 or not self.jobs:
            self.arrive()
        elif roll < 0.6 and running:
            job = rng.choice(running)  # finishes: the PodGroup and its pods are deleted
            del self.jobs[job.key]
            self.state.job_changed(job.key)
        elif roll < 0.7:
            for job in self.jobs.values():  # releasing pods go
                gone = [p for p in job.pods if p.phase is PodPhase.RELEASING]
                if gone:
                    job.pods = [p for p in job.pods if p not in gone]
                    self.state.job_changed(job.key)
        elif roll < 0.78:
            i = rng.randrange(len(self.nodes))  # a node changes (resized, cordoned, not ready)
            self.nodes[i] = dataclasses.replace(self._node(i), unschedulable=rng.random() < 0.2)
            self.state.nodes_changed()
        elif roll < 0.85 and self.jobs:
            job = rng.choice(list(self.jobs.values()))  # the adapter hands a new Job object (same PodGroup)
            self.jobs[job.key] = dataclasses.replace(job, pods=list(job.pods), priority=rng.choice([50, 125]))
            self.state.job_changed(job.key)
        elif roll < 0.9 and self.jobs:
            job = rng.choice(list(self.jobs.values()))  # a pending pod named a node by someone else (bound)
            pending = [p for p in job.pods if p.phase is PodPhase.PENDING]
            if pending:
                pending[0].node = rng.choice(self.nodes).name
                self.state.job_changed(job.key)
        elif roll < 0.95 and self.jobs:
            self.edit(rng.choice(list(self.jobs.values())))
        # else: nothing changed; the next cycle reuses everything

    def edit(self, job: Job) -> None:
        """A PodGroup's pods or spec change between cycles: a running pod completes and goes, a pod is added, or
        the spec's minMember or queue is edited (the adapter hands a new Job object)."""
        rng = self.rng
        roll = rng.random()
        running = [p for p in job.pods if p.phase is PodPhase.RUNNING]
        if roll < 0.3 and running:
            job.pods = [p for p in job.pods if p is not running[0]]
        elif roll < 0.5:
            job.pods = [*job.pods, self._pod(job.name, len(job.pods))]
        elif roll < 0.75:
            job = dataclasses.replace(job, pods=list(job.pods), min_member=rng.randint(1, max(1, len(job.pods))))
        else:
            job = dataclasses.replace(job, pods=list(job.pods), queue=rng.choice(["a", "b"]))
        self.jobs[job.key] = job
        self.state.job_changed(job.key)


def decisions(res: CycleResult) -> tuple[object, ...]:
    return (res.binds, res.evictions, res.jobs, res.queues, res.findings)


@settings(max_examples=120, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_incremental_equals_from_scratch(seed: int) -> None:
    world = World(random.Random(seed))
    for _ in range(25):
        world.event()
        snap = world.snapshot()
        scratch = run_cycle(snap)
        incremental = run_cycle(snap, world.state)
        assert not [f for f in scratch.findings if f.kind == "Cycle"], scratch.findings
        assert decisions(incremental) == decisions(scratch)
        world.apply(scratch)


# what opening a session fills in, read back the same way from both paths (positions, not objects, for the gangs)
_SESSION_LISTS = ("p_job", "p_status", "p_node", "p_group", "p_req", "p_frac", "p_gpumem", "p_start", "initial_status")
_SESSION_ARRAYS = ("free", "rel", "rel_pods", "pods_free", "xfree", "xrel", "frac_room", "frac_room_future")


def opened(ses: Session) -> dict[str, object]:
    out: dict[str, object] = {name: list(getattr(ses, name)) for name in _SESSION_LISTS}
    out.update({name: getattr(ses, name).tobytes() for name in _SESSION_ARRAYS})
    out["pods"] = [p.uid for p in ses.pods]
    out["p_mig"] = dict(ses.p_mig)
    out["groups"] = {n: {k: tuple(v) for k, v in g.items()} for n, g in sorted(ses.groups.items()) if g}
    out["slot_dirty"] = set(ses.slot_dirty)
    out["any_releasing"] = ses.any_releasing
    out["jobs"] = [
        (j.key, j.idx, j.queue, j.pods, j.n_active, j.n_pend, j.rank, j.ready, j.invalid, j.init_active, j.init_pending)
        for j in ses.jobs
    ]
    out["sets"] = [(ps.name, ps.pods, ps.n_active, ps.n_alive) for j in ses.jobs for ps in j.podsets.values()]
    out["q_alloc"] = ses.q_alloc
    out["findings"] = ses.findings
    return out


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_kept_placement_opens_the_session_a_scratch_build_opens(seed: int) -> None:
    """Bit for bit: node arrays (floating-point sums in the same order), shared-GPU names, every per-pod list and
    every gang counter, after PodGroups arrive, bind, lose or gain pods, and have their spec edited."""
    world = World(random.Random(seed))
    for _ in range(30):
        world.event()
        if world.rng.random() < 0.3 and world.jobs:
            world.edit(world.rng.choice(list(world.jobs.values())))
        snap = world.snapshot()
        kept = opened(world.state.open(snap))
        assert kept == opened(build_session(snap))
        world.apply(run_cycle(snap))


def test_an_unreported_change_is_not_seen() -> None:
    """The contract, shown: the state trusts the adapter. A pod bound without a report keeps its old row."""
    world = World(random.Random(7))
    world.arrive()
    job = next(iter(world.jobs.values()))
    run_cycle(world.snapshot(), world.state)
    pod = job.pods[0]
    pod.phase, pod.node = PodPhase.RUNNING, world.nodes[0].name
    stale = run_cycle(world.snapshot(), world.state)
    fresh = run_cycle(world.snapshot())
    assert stale.jobs[job.key] != fresh.jobs[job.key] or stale.binds != fresh.binds
    world.state.job_changed(job.key)
    assert decisions(run_cycle(world.snapshot(), world.state)) == decisions(fresh)

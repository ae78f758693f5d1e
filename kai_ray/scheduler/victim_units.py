"""Victim jobs and their eviction units, the raw material of the scenario search (:mod:`.solver`).

KAI cuts a victim into eviction units (``GetTasksToEvict``: one elastic surplus pod, else one surplus subgroup, else
the whole gang) and re-derives them from cloned jobs for every scenario. Here each candidate's steps are simulated
once per search, inside the statement and rolled back, and cached on the session until the job changes, so the
generators and the victims queue only read lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kai_ray.scheduler.decisions import Action, Reason
from kai_ray.scheduler.session import ACTIVE, ALLOCATED, BOUND, PIPELINED, EvictInfo, JobInfo, Session
from kai_ray.scheduler.snapshot import Disruption
from kai_ray.scheduler.tasks import evict_key, tasks_to_evict

Vec = tuple[float, float, float]


@dataclass(slots=True)
class VictimJob:
    """A candidate victim job and its eviction steps, computed once per search (KAI re-derives them from clones)."""

    job: JobInfo
    steps: list[list[int]] = field(default_factory=list)
    cores: list[bool] = field(default_factory=list)  # the step ends the gang
    states: list[int] = field(default_factory=list)  # elastic state of what remains before the step
    allocs: list[Vec] = field(default_factory=list)  # resources of what remains before the step
    nodes: list[int] = field(default_factory=list)  # nodes the job runs on (sorted by name)
    risks: list[float] = field(default_factory=list)  # work the step's pods would lose (kai-ray, :mod:`.workloss`)


@dataclass(frozen=True, slots=True)
class Unit:
    vj: VictimJob
    step: int

    @property
    def pods(self) -> list[int]:
        return self.vj.steps[self.step]

    @property
    def core(self) -> bool:
        return self.vj.cores[self.step]

    @property
    def key(self) -> tuple[int, int]:
        return (self.vj.job.idx, self.step)


class VictimRep:
    """What KAI's victims queue holds: a victim job from one step on (its remaining pods)."""

    __slots__ = ("alloc", "created_at", "priority", "queue", "risk", "state", "step", "uid", "vj")

    def __init__(self, vj: VictimJob, step: int) -> None:
        job = vj.job
        self.vj = vj
        self.step = step
        self.queue = job.queue
        self.priority = job.priority
        self.created_at = job.created_at
        self.uid = job.uid
        self.state = vj.states[step]
        self.alloc = vj.allocs[step]
        self.risk = unit_risk(vj, step)

    def elastic_state(self) -> int:
        return self.state


def unit_risk(vj: VictimJob, step: int) -> float:
    """Work a unit's eviction loses (:mod:`.workloss`): the job's for a step that ends the gang, else its pods'."""
    if vj.cores[step]:
        return vj.job.risk
    return vj.risks[step]


def victim_jobs(ses: Session, jobs: list[JobInfo], surplus_only: set[int] | None = None) -> list[VictimJob]:
    """The eviction steps of each candidate (running, nothing placed this cycle); ``surplus_only`` jobs (protected
    by a min-runtime) offer only the steps that keep their gang alive."""
    out: list[VictimJob] = []
    info = EvictInfo(Action.PREEMPT, Reason.PREEMPTED, None, "", False, False)
    cache: dict[int, tuple[int, bool, VictimJob | None]] = ses.memo.setdefault("victims", {})
    for job in jobs:
        protect = surplus_only is not None and job.idx in surplus_only
        hit = cache.get(job.idx)
        if hit is not None and hit[0] == job.version and hit[1] == protect:
            if hit[2] is not None:
                out.append(hit[2])
            continue
        before = len(out)
        _victim_job(ses, job, protect, info, out)
        cache[job.idx] = (job.version, protect, out[-1] if len(out) > before else None)
    return out


def _victim_job(ses: Session, job: JobInfo, protect: bool, info: EvictInfo, out: list[VictimJob]) -> None:
    st = ses.p_status
    active = [p for p in job.pods if st[p] in (BOUND, ALLOCATED, PIPELINED)]
    if not active or len(active) != job.n_active:
        return  # moved pods are not evicted again in the same cycle
    p_node = ses.p_node
    if len(active) == 1:
        node = p_node[active[0]]
        nodes = [node] if node >= 0 else []
    else:
        names = {p_node[p] for p in active if p_node[p] >= 0}
        nodes = sorted(names) if len(names) > 1 else list(names)  # node indexes follow name order
    mode = job.spec.disruption
    # the common case: the whole gang (never a semi-preemptible one: only its burst goes, step by step); built in
    # one call, as a preemption at 5,000 nodes weighs every one of 40,000 running jobs
    if mode is Disruption.ALL or (mode is None and not job.semi and not job.has_surplus()):
        if not protect:
            step = sorted(active, key=lambda p: evict_key(ses, p)) if len(active) > 1 else active
            out.append(VictimJob(job, [step], [True], [job.elastic_state()], [_sum_req(ses, active)], nodes, []))
        return
    vj = VictimJob(job)
    vj.nodes = nodes
    cp = ses.stmt.checkpoint()
    while job.n_active > 0:
        pods, keeps = tasks_to_evict(ses, job)
        if not pods or (protect and (not keeps or (mode is Disruption.SINGLE and not job.has_surplus()))):
            break
        vj.states.append(job.elastic_state())
        vj.allocs.append(_sum_req(ses, [p for p in job.pods if st[p] in ACTIVE]))
        vj.steps.append(pods)
        vj.cores.append(not keeps)
        vj.risks.append(sum(ses.p_risk[p] for p in pods))  # GPU-seconds: every pod of the step loses its own
        for p in pods:
            ses.stmt.evict(p, info)
    ses.stmt.rollback(cp)
    if vj.steps:
        out.append(vj)


def _sum_req(ses: Session, pods: list[int]) -> Vec:
    g = c = m = 0.0
    for p in pods:
        r = ses.charged(p)
        g, c, m = g + r[0], c + r[1], m + r[2]
    return (g, c, m)


__all__ = ["Unit", "Vec", "VictimJob", "VictimRep", "unit_risk", "victim_jobs"]

"""Victim search shared by preempt, reclaim and consolidation: KAI's scenario search over our statement log.

KAI (``actions/common/solvers``) does not pick victims by formula; it *simulates*. Candidate victims are cut into
eviction units (``GetTasksToEvict``: one elastic surplus pod, else one surplus subgroup, else the whole gang) and
popped from a victims queue in reverse queue/job order, each queue judged as if what was already popped from it
were gone. Scenarios are built from those units by generators, and each scenario is tried for real: evict its
victims, then place the pending job and re-place the victims (moved victims restart elsewhere instead of dying) in
job order, then ask the action's validator. The first scenario that works is kept.

Generators, in order: *node-local greedy* (after each new unit, the units touching one node of that unit's job)
and *multi-node gang* (the accumulated units, restricted to the fewest nodes whose capacity covers the demand, then
more). For a gang, a binary search finds the largest number of its pods that can be placed, carrying the victims of
each success into the next try, before the whole step is solved. A cheap filter (idle + releasing + victim GPUs
must be able to hold the pending pods) skips hopeless scenarios; failed scenarios are remembered by fingerprint.

kai-ray's deliberate departures (each a strict improvement, each tested):
* when the found victims spread a gang that fits on one node over several, victims on one node are taken instead
  if that is no worse for anyone (same queues, no higher priority, no more pods, no more gangs ended), so a
  preemptor lands on the fewest nodes;
* the kept victim set is pruned to be minimal (a unit is dropped when the scenario still works without it);
* the search budget counts simulated scenarios, not seconds, so a cycle stays deterministic.

Everything runs inside the session's statement: a scenario is a checkpoint, a failed one a rollback.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from kai_ray.scheduler.allocation import capacity_failure, choose_gpu_group, choose_node, fit_mask, place_tasks
from kai_ray.scheduler.decisions import Action, Reason
from kai_ray.scheduler.ordering import JobsOrderByQueues, job_key
from kai_ray.scheduler.placement import signature
from kai_ray.scheduler.session import (
    ACTIVE,
    ALLOCATED,
    BOUND,
    CPU,
    EPS,
    EVICTED,
    GPU,
    MEM,
    PIPELINED,
    Allocated,
    EvictInfo,
    JobInfo,
    Session,
)
from kai_ray.scheduler.snapshot import Disruption
from kai_ray.scheduler.tasks import evict_key, tasks_to_allocate, tasks_to_evict, tasks_to_replace

Vec = tuple[float, float, float]


def job_start(ses: Session, job: JobInfo) -> float:
    if job.spec.last_start is not None:
        return job.spec.last_start
    starts = [ses.p_start[p] for p in job.pods if ses.p_status[p] in ACTIVE]
    return min(starts) if starts else ses.now


# ---------------------------------------------------------------------- victims and their units


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


class _Rep:
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
        self.risk = _unit_risk(vj, step)

    def elastic_state(self) -> int:
        return self.state


def _unit_risk(vj: VictimJob, step: int) -> float:
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
    vj = VictimJob(job)
    names = {ses.p_node[p] for p in active if ses.p_node[p] >= 0}
    vj.nodes = sorted(names) if len(names) > 1 else list(names)  # node indexes follow name order
    mode = job.spec.disruption
    # the common case: the whole gang (never a semi-preemptible one: only its burst goes, step by step)
    if mode is Disruption.ALL or (mode is None and not job.semi and not job.has_surplus()):
        if not protect:
            vj.steps.append(sorted(active, key=lambda p: evict_key(ses, p)) if len(active) > 1 else active)
            vj.cores.append(True)
            vj.states.append(job.elastic_state())
            vj.allocs.append(_sum_req(ses, active))
            out.append(vj)
        return
    cp = ses.checkpoint()
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
            ses.evict(p, info)
    ses.rollback(cp)
    if vj.steps:
        out.append(vj)


def _sum_req(ses: Session, pods: list[int]) -> Vec:
    g = c = m = 0.0
    for p in pods:
        r = ses.charged(p)
        g, c, m = g + r[0], c + r[1], m + r[2]
    return (g, c, m)


# ---------------------------------------------------------------------- scenarios


@dataclass(slots=True)
class Scenario:
    tasks: list[int]  # the pending pods to place
    recorded: list[Unit]  # victims carried from an earlier success (always evicted)
    potential: list[Unit]  # victims this scenario adds

    def units(self) -> list[Unit]:
        return self.recorded + self.potential

    def fingerprint(self) -> tuple[frozenset[int], frozenset[tuple[int, int]], frozenset[tuple[int, int]]]:
        return (
            frozenset(self.tasks),
            frozenset(u.key for u in self.recorded),
            frozenset(u.key for u in self.potential),
        )


# (units chosen, pods moved) -> None when acceptable, else why not
Validator = Callable[[list[Unit], set[int]], str | None]

NODE_LOCAL, MULTI_NODE = "NodeLocalGreedy", "MultiNodeGang"


class _Accum:
    """Victims accumulated for one probe and what KAI's filters and generators read of them, kept incrementally:
    victim GPUs per node, the victim jobs on each node, and (multi-node generator) the potential units on each node
    in the order they came."""

    def __init__(self, solver: JobSolver, tasks: list[int]) -> None:
        ses = solver.ses
        self.solver = solver
        self.need = sorted((ses.p_req[p][0] for p in tasks), reverse=True)
        self.gpus: dict[int, float] = {}  # node -> GPUs the victims free there
        self.jobs_on: dict[int, set[int]] = {}  # node -> victim jobs with a pod there
        self.potential_on: dict[int, list[Unit]] = {}
        self.potential_gpu: dict[int, float] = {}
        self.first_seen: dict[int, int] = {}
        self.order: dict[tuple[int, int], int] = {}
        self.selectors = [ses.masks.mask(ses.pods[p]) for p in tasks if signature(ses.pods[p]) != _NO_SIGNATURE]
        self.touched: set[int] = set()
        self._seen_pods = 0

    def add(self, u: Unit, index: int | None = None) -> None:
        ses = self.solver.ses
        node_of = self.solver._node_of_pod
        for p in u.pods:
            n = node_of[p]
            if index is not None:
                self._seen_pods += 1
            if n < 0:
                continue
            g = ses.p_req[p][0]
            self.gpus[n] = self.gpus.get(n, 0.0) + g
            self.jobs_on.setdefault(n, set()).add(u.vj.job.idx)
            self.touched.add(n)
            if index is not None:
                self.first_seen.setdefault(n, self._seen_pods)
                lst = self.potential_on.setdefault(n, [])
                if not lst or lst[-1] is not u:
                    lst.append(u)
                self.potential_gpu[n] = self.potential_gpu.get(n, 0.0) + g
        if index is not None:
            self.order[u.key] = index

    def valid(self) -> bool:
        """KAI's accumulated-scenario filters: every pod with a node selector has a node among the usable ones, and
        the idle, releasing and victims' GPUs of the best nodes can hold the pending GPU requests."""
        solver = self.solver
        if self.selectors:
            allowed = solver.feasible.copy()
            if self.touched:
                allowed[list(self.touched)] = True
            if not all((m & allowed).any() for m in self.selectors):
                return False
        need = self.need
        if not need or need[0] <= 0:
            return True
        room = solver._gpu_room
        caps = [float(room[n]) + g for n, g in self.gpus.items()]
        taken = 0
        for n in solver._room_order():
            if taken >= len(need):
                break
            if n in self.gpus:
                continue
            caps.append(float(room[n]))
            taken += 1
        caps.sort(reverse=True)
        holders = caps[: len(need)]
        used = [0.0] * len(holders)
        for req in need:
            if req <= 0:
                return True
            for i, total in enumerate(holders):
                if total + EPS < req:
                    break
                if total - used[i] + EPS >= req:
                    used[i] += req
                    break
            else:
                return False
        return True


_NO_SIGNATURE: tuple[tuple[object, ...], ...] = ((), (), ())


class JobSolver:
    """Find and apply victims that let ``job`` place its next step, KAI's way; False (nothing applied) if none."""

    def __init__(
        self,
        ses: Session,
        job: JobInfo,
        candidates: list[VictimJob],
        action: Action,
        reason: Reason,
        validator: Validator | None = None,
        budget: list[int] | None = None,
    ) -> None:
        self.ses = ses
        self.job = job
        self.vjobs = candidates
        self.action = action
        self.reason = reason
        self.validator = validator
        self.failure = ""
        self.budget = budget if budget is not None else [ses.cfg.max_scenarios_per_action]
        self.job_budget = ses.cfg.max_scenarios_per_job
        self._sequence: list[Unit] = []
        self._seq_iter: Iterator[Unit] | None = None
        self._failed: set[object] = set()
        self.simulated = 0
        n = len(ses.nodes)
        self._node_of_pod = ses.p_node
        gpu_room = ses.free[GPU] + ses.rel[GPU] + ses.frac_room_future
        if any(ses.p_req[p][0] <= 0 and not ses.p_frac[p] and not ses.p_gpumem[p] for p in job.pods):
            self.feasible = np.ones(n, dtype=bool)  # KAI: a job with a CPU-only pod may use every node
        else:
            self.feasible = gpu_room > EPS  # else only nodes with idle or releasing GPUs, plus the victims' nodes
        self._gpu_room = gpu_room.copy()
        self._seq_index: dict[tuple[int, int], int] = {}
        self._pending: dict[int, list[JobInfo]] | None = None
        self._room_sorted: list[int] | None = None

    # -- budget
    def exhausted(self) -> bool:
        return self.budget[0] <= 0 or self.simulated >= self.job_budget

    # -- the victims queue, materialised lazily (the session is back at the same state before every scenario)
    def sequence(self) -> Iterator[Unit]:
        i = 0
        while True:
            if i < len(self._sequence):
                yield self._sequence[i]
                i += 1
                continue
            if self._seq_iter is None:
                self._seq_iter = self._pop_units()
            nxt = next(self._seq_iter, None)
            if nxt is None:
                return
            self._seq_index[nxt.key] = len(self._sequence)
            self._sequence.append(nxt)

    def _pop_units(self) -> Iterator[Unit]:
        order = JobsOrderByQueues(self.ses, victims=True)
        order.extend([_Rep(vj, 0) for vj in self.vjobs])
        while not order.empty():
            rep: _Rep | None = order.pop()  # type: ignore[assignment]
            if rep is None:
                return
            yield Unit(rep.vj, rep.step)
            if rep.step + 1 < len(rep.vj.steps):
                order.push(_Rep(rep.vj, rep.step + 1))  # type: ignore[arg-type]

    # -- the accumulated victims and KAI's cheap filters over them, kept incrementally
    def _room_order(self) -> list[int]:
        if self._room_sorted is None:
            room = self._gpu_room
            self._room_sorted = sorted(range(room.size), key=lambda n: -room[n])
        return self._room_sorted

    def _accum(self, tasks: list[int], recorded: list[Unit]) -> _Accum:
        acc = _Accum(self, tasks)
        for u in recorded:
            acc.add(u)
        return acc

    def _accumulated(self, tasks: list[int], recorded: list[Unit]) -> Iterator[tuple[list[Unit], _Accum]]:
        """KAI's accumulated scenario builder: victims added one unit at a time, least deserving first (recorded
        ones skipped), each valid accumulation yielded."""
        skip = {u.key for u in recorded}
        acc = self._accum(tasks, recorded)
        potential: list[Unit] = []
        for unit in self.sequence():
            if unit.key in skip:
                continue
            potential.append(unit)
            acc.add(unit, len(potential) - 1)
            if acc.valid():
                yield potential, acc

    def _node_local(self, tasks: list[int], recorded: list[Unit]) -> Iterator[Scenario]:
        if recorded and self._accum(tasks, recorded).valid():
            yield Scenario(tasks, recorded, [])
        for potential, acc in self._accumulated(tasks, recorded):
            latest = potential[-1].vj
            seen: set[frozenset[tuple[int, int]]] = set()
            for n in latest.nodes:
                jobs_here = acc.jobs_on.get(n, set())
                victims = [u for u in potential if u.vj.job.idx in jobs_here]
                key = frozenset(u.key for u in victims)
                if not victims or key in seen:
                    continue
                seen.add(key)
                yield Scenario(tasks, recorded, victims)

    def _multi_node(self, tasks: list[int], recorded: list[Unit]) -> Iterator[Scenario]:
        ses = self.ses
        if self._accum(tasks, recorded).valid():
            yield Scenario(tasks, recorded, [])
        node_of = self._node_of_pod
        demand = sum(ses.p_req[p][0] for p in tasks)
        smallest = min((ses.p_req[p][0] for p in tasks), default=0.0)
        freed: dict[int, float] = {}
        for u in recorded:
            for p in u.pods:
                if node_of[p] >= 0:
                    freed[node_of[p]] = freed.get(node_of[p], 0.0) + ses.p_req[p][0]
        room = self._gpu_room
        base_nodes = set(np.flatnonzero(self.feasible).tolist()) | set(freed)  # KAI: + recorded victims' nodes
        base_total = sum(float(room[n]) + freed.get(n, 0.0) for n in base_nodes)
        for _potential, acc in self._accumulated(tasks, recorded):
            node_units = acc.potential_on
            cap = {n: acc.potential_gpu[n] + freed.get(n, 0.0) + float(room[n]) for n in node_units}
            nodes = sorted(
                (n for n in cap if not smallest > 0 or cap[n] + EPS >= smallest),
                key=lambda n: (cap[n], acc.first_seen[n]),
            )
            baseline = base_total - sum(float(room[n]) + freed.get(n, 0.0) for n in node_units if n in base_nodes)
            remaining = max(0.0, demand - baseline)
            k, total = 0, 0.0
            if remaining > EPS:
                k = len(nodes) + 1
                for i, n in enumerate(nodes):
                    total += cap[n]
                    if total + EPS >= remaining:
                        k = i + 1
                        break
            step = 1
            while k <= len(nodes):
                picked: list[Unit] = []
                keys: set[tuple[int, int]] = set()
                for n in nodes[:k]:
                    for u in node_units[n]:
                        if u.key not in keys:
                            keys.add(u.key)
                            picked.append(u)
                picked.sort(key=lambda u: acc.order[u.key])
                yield Scenario(tasks, recorded, picked)
                if k >= len(nodes):
                    break
                k = min(k + step, len(nodes))
                step *= 2

    def _single_node(self, tasks: list[int], queues: set[int], top: int) -> Iterator[Scenario]:
        """kai-ray: for each node, its least deserving victim units (of the given queues, priority at most ``top``)
        until the pods could fit there; nodes needing the fewest pods lost first."""
        ses = self.ses
        node_of = self._node_of_pod
        need = [sum(ses.p_req[p][r] for p in tasks) for r in range(3)]
        alloc = ses.alloc
        per_node: dict[int, list[tuple[tuple[object, ...], Unit]]] = {}
        for vj in self.vjobs:
            job = vj.job
            if job.queue not in queues or job.priority > top:
                continue
            for step in range(len(vj.steps)):
                nodes = {node_of[p] for p in vj.steps[step]}
                if len(nodes) != 1 or -1 in nodes:
                    break  # a later step needs this one gone first: stop at the first step off one node
                (n,) = nodes
                risk = _unit_risk(vj, step)
                key = (job.priority, -job.elastic_state(), risk, -job.created_at, job.uid, step)
                per_node.setdefault(n, []).append((key, Unit(vj, step)))
        fut = ses.free + ses.rel
        options: list[tuple[int, int, float, str, list[Unit]]] = []
        for n, keyed in per_node.items():
            if any(alloc[r, n] + EPS * max(1.0, need[r]) < need[r] for r in range(3)):
                continue
            have = [float(fut[r, n]) for r in range(3)]
            chosen: list[Unit] = []
            taken: set[tuple[int, int]] = set()
            for _, u in sorted(keyed, key=lambda kv: kv[0]):
                if all(have[r] + EPS * max(1.0, need[r]) >= need[r] for r in range(3)):
                    break
                if u.step > 0 and (u.vj.job.idx, u.step - 1) not in taken:
                    continue
                chosen.append(u)
                taken.add(u.key)
                for p in u.pods:
                    req = ses.p_req[p]
                    for r in range(3):
                        have[r] += req[r]
            if chosen and all(have[r] + EPS * max(1.0, need[r]) >= need[r] for r in range(3)):
                risk = sum(_unit_risk(u.vj, u.step) for u in chosen)  # kai-ray: least work lost, then node name
                options.append((sum(len(u.pods) for u in chosen), len(chosen), risk, ses.nodes[n].name, chosen))
        for *_, chosen in sorted(options, key=lambda o: (o[0], o[1], o[2], o[3])):
            yield Scenario(tasks, [], chosen)

    # -- one scenario, for real
    def _evict(self, units: list[Unit]) -> None:
        ses = self.ses
        verb = {Action.PREEMPT: "preempted", Action.RECLAIM: "reclaimed", Action.CONSOLIDATION: "consolidated"}
        for u in units:
            msg = (
                f"{verb.get(self.action, 'evicted')} by {self.job.key} ({self.action.value}): "
                f"{'whole gang' if u.core else 'elastic surplus'} of {u.vj.job.key}"
            )
            info = EvictInfo(self.action, self.reason, self.job.key, msg, not u.core, u.core)
            for p in u.pods:
                if ses.p_status[p] in ACTIVE:
                    ses.evict(p, info)

    def _move(self, p: int, allowed: np.ndarray) -> bool:
        """Re-place an evicted victim, as KAI pipelines it: landing where it already runs cancels its eviction
        (for a shared-GPU pod, only on the same GPU; another GPU of the node is a move)."""
        ses = self.ses
        base = ses.masks.mask(ses.pods[p]) & allowed
        cand = fit_mask(ses, p, base, future=True)
        if not cand.any():
            return False
        node = choose_node(ses, p, cand, fit_mask(ses, p, base, future=False))
        shared = bool(ses.p_frac[p] or ses.p_gpumem[p])
        group = choose_gpu_group(ses, p, node)[0] if shared else None
        if node == self._node_of_pod[p] and (not shared or group == ses.p_group[p] or self._fits_back(p, group)):
            ses.unevict(p)
        else:
            ses.move(p, node, group)
        return True

    def _fits_back(self, p: int, group: str | None) -> bool:
        """A shared-GPU victim sent to "a GPU of its own" (``group`` None) may stay where it runs only if its own GPU
        still has room for it once the releasing shares leave: another victim may have been moved into that room."""
        ses = self.ses
        own = ses.p_group[p]
        if group is not None or own is None or own not in ses.groups[ses.p_node[p]]:
            return False
        used, rel = ses.groups[ses.p_node[p]][own]
        return 1.0 - used + rel + EPS >= ses.p_frac_on_node(p)

    def _replace(self, job: JobInfo, pool: set[int], allowed: np.ndarray) -> None:
        ses = self.ses
        mine = {p for p in job.pods if p in pool and ses.p_status[p] == EVICTED}
        tasks = tasks_to_replace(ses, job, mine)
        if not tasks or capacity_failure(ses, job, tasks) is not None:
            return
        cp = ses.checkpoint()
        for p in tasks:
            if not self._move(p, allowed):
                ses.rollback(cp)
                return

    def _pending_by_queue(self) -> dict[int, list[JobInfo]]:
        if self._pending is None:
            ses = self.ses
            self._pending = {}
            for j in ses.jobs:
                if j.queue >= 0 and j.invalid is None and j.ready and j.n_pend > 0 and j is not self.job:
                    self._pending.setdefault(j.queue, []).append(j)
        return self._pending

    def _allocation_order(self, victims: list[JobInfo], pool: set[int]) -> list[JobInfo]:
        """The preemptor and the victim jobs in KAI's job order (``GetJobsToAllocate``): the other pending jobs of
        their queues take part in the ordering, since a queue is compared by its best job, but are skipped."""
        ses = self.ses
        order = JobsOrderByQueues(ses)
        involved = [self.job, *victims]
        ids = {j.idx for j in involved}
        for vjob in victims:
            # KAI: a victim's virtually evicted pods are its pending step when the jobs are ordered
            back = tasks_to_replace(ses, vjob, {p for p in vjob.pods if p in pool})
            order.requests[vjob.idx] = (
                sum(ses.charged(p)[0] for p in back),
                sum(ses.p_req[p][1] for p in back),
                sum(ses.p_req[p][2] for p in back),
            )
        by_queue: dict[int, list[JobInfo]] = {}
        for j in involved:
            by_queue.setdefault(j.queue, []).append(j)
        items: list[JobInfo] = []
        pending = self._pending_by_queue()
        for q, mine in by_queue.items():
            last = max(job_key(j) for j in mine)
            others = [j for j in pending.get(q, ()) if j.idx not in ids and job_key(j) < last]
            items.extend(mine)
            items.extend(others)
        order.extend(items)
        seq: list[JobInfo] = []
        while not order.empty():
            nxt = order.pop()
            if nxt is None:
                break
            if nxt.idx in ids:
                seq.append(nxt)
        return seq

    def simulate(self, sc: Scenario) -> bool:
        """Apply the scenario; keep it applied and return True when it works, else roll back."""
        ses = self.ses
        self.simulated += 1
        self.budget[0] -= 1
        units = sc.units()
        cp = ses.checkpoint()
        self._evict(units)
        allowed = self.feasible.copy()
        pool: set[int] = set()
        victim_jobs: dict[int, JobInfo] = {}
        for u in units:
            victim_jobs[u.vj.job.idx] = u.vj.job
            for p in u.pods:
                pool.add(p)
                if self._node_of_pod[p] >= 0:
                    allowed[self._node_of_pod[p]] = True
        seq: list[JobInfo] = []
        if ses.cfg.preemptor_first:
            seq = [self.job, *victim_jobs.values()]
        else:
            seq = self._allocation_order(list(victim_jobs.values()), pool)
        placed = False
        for nxt in seq:
            if nxt is self.job:
                if not place_tasks(ses, self.job, sc.tasks, allowed, pipeline_only=True):
                    ses.rollback(cp)
                    return False
                placed = True
            else:
                self._replace(nxt, pool, allowed)
        if not placed:
            ses.rollback(cp)
            return False
        if self.validator is not None:
            spared = {p for p in pool if ses.p_status[p] != EVICTED}  # moved elsewhere, or back where it runs
            why = self.validator(units, spared)
            if why is not None:
                self.failure = self.failure or why  # the first refusal explains the natural choice
                ses.rollback(cp)
                return False
        return True

    # -- the search
    def _solve_with(self, scenarios: Iterator[Scenario]) -> Scenario | None:
        for sc in scenarios:
            if self.exhausted():
                return None
            fp = sc.fingerprint()
            if fp in self._failed:
                continue
            if self.simulate(sc):
                return sc
            self._failed.add(fp)
        return None

    def _probe(self, gen: str, tasks: list[int], recorded: list[Unit]) -> Scenario | None:
        if gen == NODE_LOCAL:
            return self._solve_with(self._node_local(tasks, recorded))
        return self._solve_with(self._multi_node(tasks, recorded))

    def _probe_discard(self, gen: str, tasks: list[int], recorded: list[Unit]) -> Scenario | None:
        cp = self.ses.checkpoint()
        sc = self._probe(gen, tasks, recorded)
        self.ses.rollback(cp)
        return sc

    def _with_generator(self, gen: str, tasks: list[int]) -> Scenario | None:
        """KAI's probe search: the largest k whose first k pods can be placed (doubling, then bisection), each
        success's victims recorded for the next probe; then the whole step."""
        n = len(tasks)
        recorded: list[Unit] = []
        lo, hi, k = 0, 0, 1
        while True:
            sc = self._probe_discard(gen, tasks[:k], recorded)
            if sc is None:
                if self.exhausted():
                    return None
                hi = k
                break
            recorded = sc.units()
            lo = k
            if k == n:
                break
            k = min(k * 2, n)
        if lo < n:
            while hi - lo > 1:
                mid = (lo + hi) // 2
                sc = self._probe_discard(gen, tasks[:mid], recorded)
                if sc is None:
                    if self.exhausted():
                        return None
                    hi = mid
                else:
                    recorded = sc.units()
                    lo = mid
        if lo == 0:
            return None
        return self._probe(gen, tasks, recorded)

    def solve(self) -> bool:
        ses = self.ses
        tasks = tasks_to_allocate(ses, self.job)
        if not tasks:
            self.failure = "nothing to place"
            return False
        if not self.vjobs:
            self.failure = "no eligible victims"
            return False
        best = None
        cp0 = ses.checkpoint()
        for gen in (NODE_LOCAL, MULTI_NODE):
            best = self._with_generator(gen, tasks)
            if best is not None or self.exhausted():
                break
        if best is None:
            ses.rollback(cp0)
            self.failure = self.failure or "no scenario of evictions makes room for it"
            return False
        if ses.cfg.fewest_nodes and self._spans_nodes(cp0) > 1 and self._fits_one_node(tasks):
            best = self._prefer_single_node(cp0, tasks, best)
        if ses.cfg.minimal_victims:
            best = self._prune(cp0, best)
        return True

    # -- kai-ray's refinements of a found solution
    def _spans_nodes(self, since: int) -> int:
        ses = self.ses
        idx = self.job.idx
        placed = {op.pod for op in ses.log[since:] if isinstance(op, Allocated)}
        return len({ses.p_node[p] for p in placed if ses.p_job[p] == idx})

    def _fits_one_node(self, tasks: list[int]) -> bool:
        ses = self.ses
        need = [sum(ses.p_req[p][r] for p in tasks) for r in range(3)]
        if any(ses.p_frac[p] or ses.p_gpumem[p] for p in tasks):
            return False
        return bool(np.all(ses.alloc + EPS >= np.array(need)[:, None], axis=0).any())

    def _prefer_single_node(self, cp0: int, tasks: list[int], best: Scenario) -> Scenario:
        """Swap the found victims for victims on one node when that is no worse for anyone: victims only from the
        same queues, of no higher priority, no more pods, no more gangs ended, and (kai-ray's work-at-risk order,
        :mod:`.workloss`) no more work lost."""
        ses = self.ses
        found = best.units()
        queues = {u.vj.job.queue for u in found}
        top = max(u.vj.job.priority for u in found)
        pods = sum(len(u.pods) for u in found)
        ended = sum(1 for u in found if u.core)
        risk = sum(_unit_risk(u.vj, u.step) for u in found)
        ses.rollback(cp0)
        for sc in self._single_node(tasks, queues, top):
            units = sc.units()
            if (
                any(u.vj.job.queue not in queues or u.vj.job.priority > top for u in units)
                or sum(len(u.pods) for u in units) > pods
                or sum(1 for u in units if u.core) > ended
                or sum(_unit_risk(u.vj, u.step) for u in units) > risk
            ):
                continue
            if self.simulate(sc) and self._spans_nodes(cp0) == 1:
                return sc
            ses.rollback(cp0)
        ses.rollback(cp0)
        if not self.simulate(best):  # pragma: no cover - the scenario was just verified
            raise RuntimeError("victim scenario no longer works")
        return best

    def _prune(self, cp0: int, best: Scenario) -> Scenario:
        ses = self.ses
        units = best.units()
        if len(units) < 2 or len(units) > ses.cfg.prune_limit:
            return best
        kept = list(units)
        seq_index = self._seq_index
        changed = False
        for u in sorted(units, key=lambda u: -seq_index.get(u.key, -1)):
            if u not in kept or any(v.vj is u.vj and v.step > u.step for v in kept):
                continue  # a later step of the same job needs this one gone first
            trial = [v for v in kept if v is not u]
            if not trial:
                continue
            ses.rollback(cp0)
            if self.simulate(Scenario(best.tasks, [], trial)):
                kept = trial
                changed = True
        ses.rollback(cp0)
        final = Scenario(best.tasks, [], kept) if changed else best
        if not self.simulate(final):  # pragma: no cover - the set was just verified
            raise RuntimeError("pruned victim scenario no longer works")
        return final


def split_victim_chunks(ses: Session, units: list[Unit], moved: set[int]) -> list[tuple[int, Vec]]:
    """KAI's reclaim costing (``splitVictimTasks``): per victim job and subgroup, the first ``min`` victim pods are
    one block and the rest count one by one; pods that were moved (re-placed) cost nothing."""
    by_job: dict[int, list[int]] = {}
    for u in units:
        by_job.setdefault(u.vj.job.idx, []).extend(u.pods)
    out: list[tuple[int, Vec]] = []
    for jidx, pods in by_job.items():
        job = ses.jobs[jidx]
        by_set: dict[int, list[int]] = {}
        for p in pods:
            by_set.setdefault(id(ses.p_set[p]), []).append(p)
        core = [0.0, 0.0, 0.0]
        core_any = False
        for plist in by_set.values():
            ps = ses.p_set[plist[0]]
            k = ps.min if ps is not None else len(plist)
            head, tail = (plist, []) if k >= len(plist) else (plist[:k], plist[k:])
            for p in tail:
                if p not in moved:
                    out.append((job.queue, ses.charged(p)))
            for p in head:
                if p in moved:
                    continue
                core_any = True
                r = ses.charged(p)
                core[0] += r[0]
                core[1] += r[1]
                core[2] += r[2]
        if core_any:
            out.append((job.queue, (core[0], core[1], core[2])))
    return out


__all__ = ["CPU", "GPU", "MEM", "JobSolver", "Scenario", "Unit", "VictimJob", "job_start", "victim_jobs"]

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

The eviction units live in :mod:`.victims` and the generators in :mod:`.scenarios`; this module tries their
scenarios for real (evict, place, re-place, validate), drives the probe search, and refines what it finds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from kai_ray.scheduler.allocation import capacity_failure, choose_gpu_group, choose_node, fit_mask, place_tasks
from kai_ray.scheduler.decisions import Action, Reason
from kai_ray.scheduler.ordering import JobsOrderByQueues, job_key
from kai_ray.scheduler.scenarios import MULTI_NODE, NODE_LOCAL, Scenario, ScenarioGenerators
from kai_ray.scheduler.session import ACTIVE, CPU, EPS, EVICTED, GPU, MEM, EvictInfo, JobInfo, Session
from kai_ray.scheduler.statement import Allocated
from kai_ray.scheduler.tasks import tasks_to_allocate, tasks_to_replace
from kai_ray.scheduler.victim_units import Unit, Vec, VictimJob, unit_risk, victim_jobs


def job_start(ses: Session, job: JobInfo) -> float:
    if job.spec.last_start is not None:
        return job.spec.last_start
    starts = [ses.p_start[p] for p in job.pods if ses.p_status[p] in ACTIVE]
    return min(starts) if starts else ses.now


# (units chosen, pods moved) -> None when acceptable, else why not
Validator = Callable[[list[Unit], set[int]], str | None]


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
        self._failed: set[object] = set()
        self.simulated = 0
        n = len(ses.nodes)
        self._node_of_pod = ses.p_node
        gpu_room = ses.free[GPU] + ses.rel[GPU] + ses.frac_room_future
        if any(ses.p_req[p][0] <= 0 and not ses.p_frac[p] and not ses.p_gpumem[p] for p in job.pods):
            self.feasible = np.ones(n, dtype=bool)  # KAI: a job with a CPU-only pod may use every node
        else:
            self.feasible = gpu_room > EPS  # else only nodes with idle or releasing GPUs, plus the victims' nodes
        self.generators = ScenarioGenerators(ses, candidates, self.feasible, gpu_room.copy())
        self._pending: dict[int, list[JobInfo]] | None = None

    # -- budget
    def exhausted(self) -> bool:
        return self.budget[0] <= 0 or self.simulated >= self.job_budget

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
                    ses.stmt.evict(p, info)

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
            ses.stmt.unevict(p)
        else:
            ses.stmt.move(p, node, group)
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
        cp = ses.stmt.checkpoint()
        for p in tasks:
            if not self._move(p, allowed):
                ses.stmt.rollback(cp)
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
        cp = ses.stmt.checkpoint()
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
                    ses.stmt.rollback(cp)
                    return False
                placed = True
            else:
                self._replace(nxt, pool, allowed)
        if not placed:
            ses.stmt.rollback(cp)
            return False
        if self.validator is not None:
            spared = {p for p in pool if ses.p_status[p] != EVICTED}  # moved elsewhere, or back where it runs
            why = self.validator(units, spared)
            if why is not None:
                self.failure = self.failure or why  # the first refusal explains the natural choice
                ses.stmt.rollback(cp)
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
            return self._solve_with(self.generators.node_local(tasks, recorded))
        return self._solve_with(self.generators.multi_node(tasks, recorded))

    def _probe_discard(self, gen: str, tasks: list[int], recorded: list[Unit]) -> Scenario | None:
        cp = self.ses.stmt.checkpoint()
        sc = self._probe(gen, tasks, recorded)
        self.ses.stmt.rollback(cp)
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
        cp0 = ses.stmt.checkpoint()
        for gen in (NODE_LOCAL, MULTI_NODE):
            best = self._with_generator(gen, tasks)
            if best is not None or self.exhausted():
                break
        if best is None:
            ses.stmt.rollback(cp0)
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
        placed = {op.pod for op in ses.stmt.log[since:] if isinstance(op, Allocated)}
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
        risk = sum(unit_risk(u.vj, u.step) for u in found)
        ses.stmt.rollback(cp0)
        for sc in self.generators.single_node(tasks, queues, top):
            units = sc.units()
            if (
                any(u.vj.job.queue not in queues or u.vj.job.priority > top for u in units)
                or sum(len(u.pods) for u in units) > pods
                or sum(1 for u in units if u.core) > ended
                or sum(unit_risk(u.vj, u.step) for u in units) > risk
            ):
                continue
            if self.simulate(sc) and self._spans_nodes(cp0) == 1:
                return sc
            ses.stmt.rollback(cp0)
        ses.stmt.rollback(cp0)
        if not self.simulate(best):  # pragma: no cover - the scenario was just verified
            raise RuntimeError("victim scenario no longer works")
        return best

    def _prune(self, cp0: int, best: Scenario) -> Scenario:
        ses = self.ses
        units = best.units()
        if len(units) < 2 or len(units) > ses.cfg.prune_limit:
            return best
        kept = list(units)
        seq_index = self.generators.seq_index
        changed = False
        for u in sorted(units, key=lambda u: -seq_index.get(u.key, -1)):
            if u not in kept or any(v.vj is u.vj and v.step > u.step for v in kept):
                continue  # a later step of the same job needs this one gone first
            trial = [v for v in kept if v is not u]
            if not trial:
                continue
            ses.stmt.rollback(cp0)
            if self.simulate(Scenario(best.tasks, [], trial)):
                kept = trial
                changed = True
        ses.stmt.rollback(cp0)
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


__all__ = [
    "CPU",
    "GPU",
    "MEM",
    "JobSolver",
    "Scenario",
    "Unit",
    "Validator",
    "VictimJob",
    "job_start",
    "split_victim_chunks",
    "victim_jobs",
]

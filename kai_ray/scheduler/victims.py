"""Victim selection shared by preempt, reclaim and consolidation.

A victim job is cut into eviction *units* in KAI's elastic victim order (``GetTasksToEvict``): each surplus pod
above its PodSet minimum (lowest task priority first, Ray head last), then each whole surplus subgroup above
``minSubGroup``, then the remaining core as one block that ends the gang. Units are ranked least-deserving first:
victim queue rank, then lower job priority, then surplus before core, then newer jobs.

The search (``solve``) is KAI's node-local greedy generator in spirit: for each preemptor pod that does not fit,
pick the node where the least-deserving units free enough room (a unit also frees room on its other nodes), evict
them and pipeline the pod there. The chosen set is then checked by really placing the gang (``allocate_job``) and
the action's validator, and pruned: units are put back, most deserving first, while the gang still fits and the
validator still agrees. So the victim set is minimal with respect to single-unit removal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from kai_ray.scheduler.allocation import allocate_job, place_pod
from kai_ray.scheduler.decisions import Action, Reason
from kai_ray.scheduler.gang import tasks_to_allocate, tasks_to_evict
from kai_ray.scheduler.session import ACTIVE, BOUND, CPU, EPS, GPU, MEM, EvictInfo, JobInfo, Session

PRUNE_LIMIT = 64


@dataclass(slots=True)
class Unit:
    idx: int
    job: JobInfo
    pods: list[int]
    core: bool  # evicting it ends the gang
    key: tuple[object, ...]
    per_node: dict[int, list[float]] = field(default_factory=dict)
    total: tuple[float, float, float] = (0.0, 0.0, 0.0)
    deps: list[Unit] = field(default_factory=list)  # a core unit needs the job's earlier (surplus) units gone too


def job_start(ses: Session, job: JobInfo) -> float:
    if job.spec.last_start is not None:
        return job.spec.last_start
    starts = [ses.p_start[p] for p in job.pods if ses.p_status[p] in ACTIVE]
    return min(starts) if starts else ses.now


def build_units(
    ses: Session,
    victims: list[JobInfo],
    queue_rank: Callable[[JobInfo], tuple[object, ...]],
    surplus_only: set[int] | None = None,
) -> list[Unit]:
    """Eviction units of every victim job, in least-deserving-first order."""
    units: list[Unit] = []
    surplus_only = surplus_only or set()
    for job in victims:
        st = ses.p_status
        active = [p for p in job.pods if st[p] == BOUND]
        if not active or len(active) != job.n_active:
            continue  # pods placed this cycle are never victims
        steps: list[tuple[list[int], bool]] = []
        if not job.has_surplus():
            steps.append((active, True))
        else:
            cp = ses.checkpoint()
            info = EvictInfo(Action.PREEMPT, Reason.PREEMPTED, None, "", False, False)
            while job.n_active > 0:
                pods, keeps = tasks_to_evict(ses, job)
                if not pods:
                    break
                steps.append((pods, not keeps))
                for p in pods:
                    ses.evict(p, info)
            ses.rollback(cp)
        below = 2 if job.elastic_state() == 0 else 1
        earlier: list[Unit] = []
        for seq, (pods, core) in enumerate(steps):
            if core and job.idx in surplus_only:
                continue
            key = (*queue_rank(job), job.priority, 0 if not core else below, -job.rank, seq)
            u = Unit(len(units), job, pods, core, key)
            g = c = m = 0.0
            for p in pods:
                r = ses.p_req[p]
                n = ses.p_node[p]
                acc = u.per_node.setdefault(n, [0.0, 0.0, 0.0])
                acc[0] += r[0]
                acc[1] += r[1]
                acc[2] += r[2]
                g += r[0]
                c += r[1]
                m += r[2]
            u.total = (g, c, m)
            if core:
                u.deps = list(earlier)
            earlier.append(u)
            units.append(u)
    units.sort(key=lambda u: u.key)
    for i, u in enumerate(units):
        u.idx = i
    return units


Validator = Callable[[list[Unit]], bool]
Admissible = Callable[[Unit], bool]


class Solver:
    """Find and apply a minimal set of units whose eviction lets ``job`` place its next step."""

    def __init__(
        self,
        ses: Session,
        job: JobInfo,
        units: list[Unit],
        action: Action,
        reason: Reason,
        validator: Validator | None = None,
        admissible: Admissible | None = None,
        on_admit: Callable[[Unit], None] | None = None,
    ) -> None:
        self.ses = ses
        self.job = job
        self.units = units
        self.action = action
        self.reason = reason
        self.validator = validator
        self.admissible = admissible
        self.on_admit = on_admit
        self.failure = ""

    @staticmethod
    def closure(chosen: list[Unit]) -> list[Unit]:
        """``chosen`` plus every unit a chosen core depends on: a gang is never left below its minimum."""
        seen = {id(u) for u in chosen}
        out = list(chosen)
        for u in chosen:
            for d in u.deps:
                if id(d) not in seen:
                    seen.add(id(d))
                    out.append(d)
        out.sort(key=lambda u: u.key)
        return out

    # -- applying a set
    def _evict(self, chosen: list[Unit]) -> None:
        ses = self.ses
        verb = {Action.PREEMPT: "preempted", Action.RECLAIM: "reclaimed", Action.CONSOLIDATION: "consolidated"}
        for u in chosen:
            msg = (
                f"{verb.get(self.action, 'evicted')} by {self.job.key} ({self.action.value}): "
                f"{'whole gang' if u.core else 'elastic surplus'} of {u.job.key}"
            )
            info = EvictInfo(self.action, self.reason, self.job.key, msg, not u.core, u.core)
            for p in u.pods:
                if ses.p_status[p] in ACTIVE:
                    ses.evict(p, info)

    def _try(self, chosen: list[Unit]) -> bool:
        """Evict ``chosen`` and place the job; leaves the state applied on success, rolls back otherwise."""
        ses = self.ses
        cp = ses.checkpoint()
        self._evict(chosen)
        ok, _ = allocate_job(ses, self.job, explain=False)
        if ok and (self.validator is None or self.validator(chosen)):
            return True
        ses.rollback(cp)
        return False

    # -- search
    def _greedy(self) -> list[Unit] | None:
        ses = self.ses
        tasks = tasks_to_allocate(ses, self.job)
        if not tasks:
            return None
        node_units: dict[int, list[Unit]] = {}
        for u in self.units:
            for n in u.per_node:
                if n >= 0:
                    node_units.setdefault(n, []).append(u)
        evicted: set[int] = set()
        chosen: list[Unit] = []
        for p in tasks:
            if place_pod(ses, p, None):
                continue
            g, c, m = ses.p_req[p]
            if ses.p_frac[p] or ses.p_gpumem[p]:
                g = 1.0  # a shared pod is sure to fit on a freed whole GPU
            base = ses.masks.mask(ses.pods[p])
            alloc = ses.alloc
            ok_nodes = base & (alloc[GPU] + EPS >= g) & (alloc[CPU] + EPS * max(1.0, c) >= c)
            ok_nodes &= alloc[MEM] + EPS * max(1.0, m) >= m
            fut = ses.free + ses.rel
            slots = ses.pods_free + ses.rel_pods
            best: tuple[tuple[object, ...], int, int] | None = None
            best_units: list[Unit] = []
            for n in np.flatnonzero(ok_nodes).tolist():
                lst = node_units.get(n)
                if not lst:
                    continue
                need = [g - fut[GPU, n], c - fut[CPU, n], m - fut[MEM, n]]
                need_slots = 1 - int(slots[n])
                take: list[Unit] = []
                acc = [0.0, 0.0, 0.0]
                got_slots = 0
                fits = False
                for u in lst:
                    if u.idx in evicted or (self.admissible is not None and not self.admissible(u)):
                        continue
                    r = u.per_node[n]
                    acc[0] += r[0]
                    acc[1] += r[1]
                    acc[2] += r[2]
                    got_slots += sum(1 for q in u.pods if ses.p_node[q] == n)
                    take.append(u)
                    if (
                        acc[0] + EPS >= need[0]
                        and acc[1] + EPS * max(1.0, c) >= need[1]
                        and acc[2] + EPS * max(1.0, m) >= need[2]
                        and got_slots >= need_slots
                    ):
                        fits = True
                        break
                    if best is not None and u.key > best[0]:
                        break
                if not fits or not take:
                    continue
                cand = (take[-1].key, len(take), n)
                if best is None or cand < best:
                    best = cand
                    best_units = take
            if best is None:
                self.failure = "no node can make room for the gang by evicting eligible victims"
                return None
            best_units = [u for u in self.closure(best_units) if u.idx not in evicted]
            for u in best_units:
                evicted.add(u.idx)
                if self.on_admit is not None:
                    self.on_admit(u)
            self._evict(best_units)
            chosen.extend(best_units)
            only = np.zeros(len(ses.nodes), dtype=bool)
            only[best[2]] = True
            if not place_pod(ses, p, only):
                self.failure = "victims chosen but the pod still did not fit"
                return None
        return chosen

    def solve(self) -> bool:
        """Apply the best victim set and the job's placement; False (and nothing applied) when none exists."""
        ses = self.ses
        if not self.units:
            self.failure = "no eligible victims"
            return False
        cp0 = ses.checkpoint()
        chosen = self._greedy()
        ses.rollback(cp0)
        if chosen is None:
            return False
        chosen.sort(key=lambda u: u.key)
        self.failure = ""
        if not self._try(chosen):
            self.failure = self.failure or "the gang does not fit even after evicting the chosen victims"
            return False
        if len(chosen) <= PRUNE_LIMIT:
            for u in sorted(chosen, key=lambda u: u.key, reverse=True):
                if u not in chosen or any(u in v.deps for v in chosen):
                    continue  # a kept core needs it
                drop = {id(u)}
                trial = [v for v in chosen if id(v) not in drop]
                if not trial:
                    continue
                ses.rollback(cp0)
                if self._try(trial):
                    chosen = trial
            ses.rollback(cp0)
            if not self._try(chosen):  # pragma: no cover - the set was just verified
                return False
        return True

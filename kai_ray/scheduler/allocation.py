"""Placing a gang: the shared core of allocate, preempt, reclaim and consolidation.

``allocate_job`` places the job's next step (its missing minimum, or one elastic pod) inside the current statement:
capacity checks on the queue and every ancestor first (limit; in-quota for non-preemptible jobs and for a
semi-preemptible job's core), then the gang tree
member by member, each pod on the best-scoring node that fits. A pod that only fits on resources still held by
releasing pods (victims) is pipelined; then the whole job's placements of this statement become pipelined, as in
KAI. Nothing is undone here: the caller rolls back to its checkpoint when this returns False.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kai_ray.scheduler.decisions import Reason
from kai_ray.scheduler.fragmentation import bestfit_term, fgd_group, fgd_term
from kai_ray.scheduler.gang import PodSet, SubGroupSet, member_key
from kai_ray.scheduler.placement import signature
from kai_ray.scheduler.queues import RES_NAMES
from kai_ray.scheduler.semipreemptible import core_slots
from kai_ray.scheduler.session import (
    ACTIVE,
    CPU,
    EPS,
    GPU,
    MEM,
    PIPELINED,
    JobInfo,
    Session,
    le,
)
from kai_ray.scheduler.statement import Allocated
from kai_ray.scheduler.tasks import skippable_member, tasks_to_allocate
from kai_ray.scheduler.topology import Request, TopologyError, subset_nodes

INF = float("inf")


@dataclass(slots=True)
class Failure:
    reason: Reason
    message: str
    details: dict[str, Any]


def gang_shape(ses: Session, job: JobInfo, tasks: list[int]) -> tuple[object, ...]:
    """What decides whether a step can be placed, without the job's identity: two jobs of the same shape fit or
    fail alike on the same cluster state (KAI's scheduling signatures serve the same purpose)."""
    pods = ses.pods
    sets = ses.p_set
    return (
        job.spec.topology,
        tuple(
            (
                ses.p_req[p],
                ses.p_frac[p],
                ses.p_gpumem[p],
                signature(pods[p]),
                getattr(sets[p], "topology", None),
                pods[p].claims,  # DRA: devices are per claim, so no two claiming steps share a shape
            )
            for p in tasks
        ),
    )


FIT_REASONS = (Reason.GANG_DOES_NOT_FIT, Reason.NEVER_FITS, Reason.TOPOLOGY)


def quota_request(ses: Session, tasks: list[int]) -> tuple[float, float, float]:
    """What the tasks charge against limits and quotas (gpu-memory pods as a fraction of the LARGEST GPU, as KAI)."""
    g = c = m = 0.0
    for p in tasks:
        r = ses.charged(p) if ses.p_mig else ses.p_req[p]
        if ses.p_gpumem[p]:
            g += ses.p_gpumem[p] / ses.max_gpu_mem if ses.max_gpu_mem > 0 else 0.0
        else:
            g += r[0]
        c += r[1]
        m += r[2]
    return (g, c, m)


def in_quota_request(ses: Session, job: JobInfo, tasks: list[int]) -> tuple[float, float, float] | None:
    """The part of the tasks that must fit the queue's quota (KAI's in-quota rule): all of them for a non-preemptible
    job, the pods joining its core for a semi-preemptible one (the first free core slots of each PodSet, in task
    order), None for a preemptible job."""
    if not job.semi:
        return None if job.preemptible else quota_request(ses, tasks)
    slots: dict[int, int] = {}
    core: list[int] = []
    for p in tasks:
        ps = ses.p_set[p]
        if ps is None:
            continue
        left = slots.setdefault(id(ps), core_slots(ps))
        if left > 0:
            core.append(p)
            slots[id(ps)] = left - 1
    return quota_request(ses, core)


def queue_details(
    ses: Session,
    q: int,
    req: tuple[float, float, float],
    job: JobInfo,
    np_req: tuple[float, float, float] | None = None,
) -> dict[str, Any]:
    node = ses.tree.nodes[q]
    as_d = lambda v: dict(zip(RES_NAMES, (float(x) for x in v), strict=True))  # noqa: E731
    return {
        "name": node.name,
        "deserved": as_d(node.quota),
        "limit": as_d(node.limit),
        "fairShare": as_d(ses.q_fair[q]),
        "allocated": as_d(ses.q_alloc[q]),
        "allocatedNonPreemptible": as_d(ses.q_alloc_np[q]),
        "requested": as_d(ses.q_request[q]),
        "podGroupRequested": as_d(req),
        "podGroupRequestedNonPreemptible": as_d(
            np_req if np_req is not None else (req if not job.preemptible else (0.0, 0.0, 0.0))
        ),
    }


def upgrade_surge_of(ses: Session, job: JobInfo) -> JobInfo | None:
    """The active cluster whose RayService this job upgrades, while that cluster still runs (kai-ray, Ray-native).

    A zero-downtime RayService upgrade runs a second cluster beside the active one until it is ready; a
    non-preemptible service at its quota could never start it (KubeRay #1476, #4239). Its pending cluster is the
    service's upgrade surge: it skips the in-quota rule for non-preemptible jobs (the queue's and its ancestors'
    limits still hold, and it takes room from lower-priority work like any job); once KubeRay deletes the old
    cluster the surge is simply the service again, back within its quota."""
    facts = job.spec.raynative
    if not ses.cfg.upgrade_surge or facts is None or facts.upgrade_of is None:
        return None
    idx = ses.job_index.get(facts.upgrade_of)
    if idx is None or idx == job.idx:
        return None
    active = ses.jobs[idx]
    return active if active.n_active > 0 and active.queue == job.queue else None


def capacity_failure(ses: Session, job: JobInfo, tasks: list[int]) -> Failure | None:
    """KAI's IsJobOverQueueCapacity: limit on the queue and every ancestor, then in-quota for non-preemptible."""
    if job.queue < 0:
        return None
    req = quota_request(ses, tasks)
    chain = ses.tree.nodes[job.queue].chain
    breach = _first_breach(ses, chain, req, ses.q_alloc, "limit")
    if breach is not None:
        q, r, used, cap = breach
        msg = (
            f"queue {ses.tree.nodes[q].name!r} would exceed its {RES_NAMES[r]} limit: limit {cap:g}, "
            f"allocated {used:g}, requested {req[r]:g}"
        )
        return Failure(Reason.OVER_LIMIT, msg, {"queue": queue_details(ses, q, req, job), "resource": RES_NAMES[r]})
    np_req = in_quota_request(ses, job, tasks)
    if np_req is not None and upgrade_surge_of(ses, job) is None:
        breach = _first_breach(ses, chain, np_req, ses.q_alloc_np, "quota")
        if breach is not None:
            q, r, used, cap = breach
            who = "semi-preemptible job's core" if job.semi else "non-preemptible job"
            msg = (
                f"{who} needs in-quota {RES_NAMES[r]} of queue {ses.tree.nodes[q].name!r}: quota "
                f"{cap:g}, non-preemptible allocated {used:g}, requested {np_req[r]:g}"
            )
            return Failure(
                Reason.NON_PREEMPTIBLE_OVER_QUOTA,
                msg,
                {"queue": queue_details(ses, q, req, job, np_req), "resource": RES_NAMES[r]},
            )
    return None


def _first_breach(
    ses: Session, chain: Any, req: Any, usage: Any, cap_attr: str
) -> tuple[Any, int, float, float] | None:
    """First (queue, resource, used, cap) up the ancestor chain where used + request exceeds the cap (-1: none)."""
    for q in chain:
        cap = getattr(ses.tree.nodes[q], cap_attr)
        used = usage[q]
        for r in range(3):
            if cap[r] == -1 or req[r] == 0:
                continue
            if not le(used[r] + req[r], cap[r]):
                return q, r, float(used[r]), float(cap[r])
    return None


# ---------------------------------------------------------------------- one pod


def fit_mask(ses: Session, p: int, base: np.ndarray, future: bool) -> np.ndarray:
    """The nodes of ``base`` with room for pod ``p`` now, or (``future``) once releasing pods are gone: a pod that
    only fits the future room is pipelined."""
    g, c, m = ses.p_req[p]
    free = ses.free
    if future:
        free = free + ses.rel
        mask = base & (ses.pods_free + ses.rel_pods > 0)
    else:
        mask = base & (ses.pods_free > 0)
    if ses.p_frac[p] or ses.p_gpumem[p]:
        room = ses.frac_room_future if future else ses.frac_room
        if ses.p_gpumem[p]:
            with np.errstate(divide="ignore"):
                need = np.where(ses.gpu_mem > 0, ses.p_gpumem[p] / np.maximum(ses.gpu_mem, 1e-9), INF)
            mask = mask & (need <= 1.0 + EPS) & ((room + EPS >= need) | (free[GPU] >= 1.0 - EPS))
            mask = mask & _node_quota_ok(ses, p, need)
        else:
            mask = mask & ((room + EPS >= g) | (free[GPU] >= 1.0 - EPS))
    elif g > 0:
        mask = mask & (free[GPU] + EPS >= g)
    if c > 0:
        mask = mask & (free[CPU] + EPS * max(1.0, c) >= c)
    if m > 0:
        mask = mask & (free[MEM] + EPS * max(1.0, m) >= m)
    x = ses.p_xreq[p]
    if x is not None:
        xfree = ses.xfree[x[0]]
        if future:
            xfree = xfree + ses.xrel[x[0]]
        mask = mask & (xfree + EPS * np.maximum(1.0, x[1])[:, None] >= x[1][:, None]).all(axis=0)
    claims = ses.pods[p].claims
    if claims and ses.dra is not None and mask.any():
        mask = ses.dra.mask(claims, mask, future, ses.jobs[ses.p_job[p]].spec.queue)
    return mask


def _node_quota_ok(ses: Session, p: int, need: np.ndarray) -> np.ndarray:
    """KAI's per-node capacity check for gpu-memory pods: the GPU share the pod takes depends on the node's GPU
    size, so the queue limit (and, when non-preemptible, the quota) is checked with that node's share."""
    job = ses.jobs[ses.p_job[p]]
    ok = np.ones(need.size, dtype=bool)
    if job.queue < 0:
        return ok
    ps = ses.p_set[p]
    in_quota = not job.preemptible or (job.semi and ps is not None and core_slots(ps) > 0)
    for q in ses.tree.nodes[job.queue].chain:
        node = ses.tree.nodes[q]
        if node.limit[GPU] != -1:
            ok &= ses.q_alloc[q][GPU] + need <= node.limit[GPU] + EPS
        if in_quota and node.quota[GPU] != -1 and upgrade_surge_of(ses, job) is None:
            ok &= ses.q_alloc_np[q][GPU] + need <= node.quota[GPU] + EPS
    return ok


PLACEMENT_POLICIES = ("binpack", "spread", "bestfit", "fgd", "cpufgd")  # KAI's two, then kai-ray's (fragmentation.py)
FGD_FAMILY = ("fgd", "cpufgd")  # the same fraction-to-GPU choice (fragmentation.fgd_group)


def placement_term(ses: Session, p: int, cand: np.ndarray) -> np.ndarray:
    """The placement policy's preference among candidate nodes (higher is better; at most 9, below every other
    plugin's step).

    KAI's node-placement plugin: bin-pack prefers the node with the least non-allocated (idle + releasing)
    amount of the pod's main resource (GPUs for GPU pods, CPU for CPU pods); spread the largest share of it."""
    g = ses.p_req[p][0]
    gpu_task = g > 0 or ses.p_frac[p] > 0 or ses.p_gpumem[p] > 0
    r = GPU if gpu_task else CPU
    strategy = ses.cfg.placement_gpu if gpu_task else ses.cfg.placement_cpu
    if strategy == "bestfit":
        return bestfit_term(ses, p, cand)
    if strategy in FGD_FAMILY:
        return fgd_term(ses, p, cand, stranding=strategy == "cpufgd")
    nonalloc = ses.free[r] + ses.rel[r]
    alloc = ses.alloc[r]
    has = cand & (alloc > 0)
    if not has.any():
        return np.zeros(cand.size)
    if strategy == "spread":
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(has, 9.0 * nonalloc / np.where(alloc > 0, alloc, 1.0), 0.0)
    lo, hi = float(nonalloc[has].min()), float(nonalloc[has].max())
    if hi - lo <= EPS:
        return np.where(has, 9.0, 0.0)
    return np.where(has, 9.0 * (1.0 - (nonalloc - lo) / (hi - lo)), 0.0)


def choose_node(ses: Session, p: int, cand: np.ndarray, fit: np.ndarray, bonus: np.ndarray | None = None) -> int:
    """KAI's node order: the sum of plugin scores, each on its own scale so the order is lexicographic — a shared
    GPU the fraction fits on (gpusharingorder), fitting idle resources rather than pipelining (nodeavailability),
    a CPU-only node for a CPU-only pod (resourcetype), then the placement policy. Ties go to node-name order."""
    score = np.where(fit, 1000.0, 0.0)
    kai_policy = ses.cfg.placement_gpu in ("binpack", "spread")
    if (ses.p_frac[p] or ses.p_gpumem[p]) and ses.cfg.gpu_sharing_order and kai_policy:
        need: np.ndarray | float = ses.p_frac[p]
        if ses.p_gpumem[p]:
            with np.errstate(divide="ignore"):
                need = np.where(ses.gpu_mem > 0, ses.p_gpumem[p] / np.maximum(ses.gpu_mem, 1e-9), INF)
        score = score + np.where(ses.frac_room_shared + EPS >= need, 10000.0, 0.0)
    elif ses.p_req[p][0] <= 0:
        score = score + np.where(ses.cpu_only, 10.0, 0.0)
    score = score + placement_term(ses, p, cand)
    if bonus is not None:
        score = score + bonus  # topology: the pod's preferred-level domain order
    return int(np.where(cand, score, -INF).argmax())


def choose_gpu_group(ses: Session, p: int, node: int) -> tuple[str | None, bool]:
    """The shared GPU for a fraction on ``node`` and whether it must wait for releasing shares (pipelined).

    KAI's gpupack order: the most used shared GPU the fraction fits on, counting shares being released (a GPU
    whose tenants are all leaving is a whole GPU again); else a whole idle GPU; else a whole releasing one."""
    f = ses.node_gpu_fraction(p, node)
    if ses.cfg.placement_gpu in FGD_FAMILY and ses.p_frac[p] and not ses.any_releasing:
        target = fgd_group(ses, p, node)
        if target is not None and target < 1.0 - EPS:
            for name, (used, _rel) in sorted(ses.groups[node].items()):
                if abs((1.0 - used) - target) <= 1e-9:
                    return name, False
        if ses.free[GPU, node] >= 1.0 - EPS:
            return None, False
    best: tuple[float, str, bool] | None = None
    for name, (used, rel) in sorted(ses.groups[node].items()):
        if rel >= used - EPS:
            continue
        if 1.0 - used + rel + EPS >= f and (best is None or used > best[0]):
            best = (used, name, 1.0 - used + EPS < f)
    if best is not None:
        return best[1], best[2]
    return None, ses.free[GPU, node] < 1.0 - EPS


def place_pod(
    ses: Session, p: int, allowed: np.ndarray | None, pipeline_only: bool = False, bonus: np.ndarray | None = None
) -> bool:
    """Put one pending pod on the best node that fits (idle first, else pipelined onto releasing resources).

    ``pipeline_only``: a what-if placement of the victim search (KAI's isPipelineOnly): idle and releasing room
    count alike and the pod is pipelined."""
    base = ses.masks.mask(ses.pods[p])
    if allowed is not None:
        base = base & allowed
    fit = fit_mask(ses, p, base, future=False)
    cand = fit_mask(ses, p, base, future=True) if ses.any_releasing or pipeline_only else fit
    if not cand.any():
        return False
    node = choose_node(ses, p, cand, fit, bonus)
    pipelined = pipeline_only or not bool(fit[node])
    group = None
    if ses.p_frac[p] or ses.p_gpumem[p]:
        group, wait = choose_gpu_group(ses, p, node)
        pipelined = pipelined or wait
    ses.stmt.allocate(p, node, pipelined, group)
    return True


def place_batch(ses: Session, tasks: list[int], allowed: np.ndarray | None) -> int:
    """Place identical whole-GPU pods in one vectorised pass; returns how many were placed.

    Equivalent to placing them one by one with bin-packing: the fullest fitting node stays the fullest after a pod
    lands on it, so sequential placement fills nodes in ascending order of free resource (ties: node order). Only
    used when nothing is releasing (no pipelining decisions) and the pods share request and predicates.
    """
    if ses.any_releasing:
        return 0
    p0 = tasks[0]
    req = ses.p_req[p0]
    if ses.p_frac[p0] or ses.p_gpumem[p0]:
        return 0
    pods = ses.pods
    if pods[p0].claims:
        return 0  # each pod's devices are chosen on its node (place_pod)
    sig0 = signature(pods[p0])
    xreq = ses.p_xreq
    if xreq[p0] is not None:
        return 0  # extended resources: each pod is fitted on its own (fit_mask)
    for p in tasks[1:]:
        if ses.p_req[p] != req or ses.p_frac[p] or ses.p_gpumem[p] or xreq[p] is not None or signature(pods[p]) != sig0:
            return 0
    g, c, m = req
    gpu_task = g > 0
    if (ses.cfg.placement_gpu if gpu_task else ses.cfg.placement_cpu) != "binpack":
        return 0
    mask = ses.masks.mask(pods[p0]) & (ses.pods_free > 0)
    if allowed is not None:
        mask &= allowed
    free = ses.free
    for r, v in ((GPU, g), (CPU, c), (MEM, m)):
        if v > 0:
            mask &= free[r] + EPS * max(1.0, v) >= v
    k = len(tasks)
    nn = mask.size
    # composite key: fullest first, ties by node order; exact in float64 for GPU counts and millicores
    key = np.where(mask, free[GPU if gpu_task else CPU] * (nn + 1) + ses.node_arange, np.inf)
    if k < nn and gpu_task:
        first = np.argpartition(key, k - 1)[:k]
        first = first[np.argsort(key[first], kind="stable")]
    else:
        first = np.argsort(key, kind="stable")
    order = [n for n in first.tolist() if mask[n]]
    if not gpu_task:  # CPU-only nodes first (KAI's resourcetype plugin), each part still fullest first
        cpu_only = ses.cpu_only
        order = [n for n in order if cpu_only[n]] + [n for n in order if not cpu_only[n]]
    if not order:
        return 0
    pods_free = ses.pods_free
    placed = 0
    for n in order:
        cap = int(pods_free[n])
        for r, v in ((GPU, g), (CPU, c), (MEM, m)):
            if v > 0:
                cap = min(cap, int((free[r, n] + EPS * max(1.0, v)) // v))
        take = min(cap, k - placed)
        for _ in range(take):
            ses.stmt.allocate(tasks[placed], n, False)
            placed += 1
        if placed == k:
            break
    return placed


# ---------------------------------------------------------------------- gang


class GangPlacer:
    """One attempt to place a job's tasks; remembers the first pod that did not fit and where it failed."""

    def __init__(self, ses: Session, job: JobInfo, pipeline_only: bool = False) -> None:
        self.ses = ses
        self.job = job
        self.pipeline_only = pipeline_only
        self.failed_pod: int | None = None
        self.placed_before_fail = 0
        self.topology_error: str | None = None
        self.scores: dict[int, np.ndarray] = {}  # member id -> topology node scores (preferred level)
        self.shortfall: tuple[str | None, dict[str, float]] = (None, {})

    def run(self, tasks: list[int], allowed: np.ndarray | None = None) -> bool:
        if allowed is None:
            allowed = np.ones(len(self.ses.nodes), dtype=bool)
        return self._set(self.job.root, tasks, allowed)

    def _need(self, tasks: list[int]) -> tuple[float, float, float]:
        g = c = m = 0.0
        for p in tasks:
            r = self.ses.p_req[p]
            g += r[0]
            c += r[1]
            m += r[2]
        return (g, c, m)

    def _request(self, tasks: list[int]) -> Request:
        ses = self.ses
        gpu = [ses.p_req[p][0] > 0 or bool(ses.p_frac[p]) or bool(ses.p_gpumem[p]) for p in tasks]
        largest = None
        if all(gpu) or not any(gpu):  # KAI counts copies of the largest pod only when the pods are alike
            largest = tuple(max(ses.p_req[p][r] for p in tasks) for r in range(3))
        frac = largest is not None and 0 < largest[0] < 1
        return Request(self._need(tasks), len(tasks), largest, bool(frac))  # type: ignore[arg-type]

    def _subsets(self, member: PodSet | SubGroupSet, tasks: list[int], allowed: np.ndarray) -> list[np.ndarray]:
        ses = self.ses
        if member.topology is None:
            return [allowed]
        active = np.zeros(len(ses.nodes), dtype=bool)
        st = ses.p_status
        for ps in member.podsets():
            for p in ps.pods:
                if st[p] in ACTIVE and ses.p_node[p] >= 0:
                    active[ses.p_node[p]] = True
        try:
            sets, scores = subset_nodes(ses, member.topology, self._request(tasks), allowed, active)
        except TopologyError as exc:
            self.topology_error = str(exc)
            return []
        if scores is not None:
            self.scores[id(member)] = scores
        return sets

    def _bonus(self, ps: PodSet) -> np.ndarray | None:
        member: PodSet | SubGroupSet | None = ps
        while member is not None:
            got = self.scores.get(id(member))
            if got is not None:
                return got
            member = member.parent
        return None

    def _set(self, sgs: SubGroupSet, tasks: list[int], allowed: np.ndarray) -> bool:
        if not tasks:
            return True
        ses = self.ses
        for nodes in self._subsets(sgs, tasks, allowed):
            cp = ses.stmt.checkpoint()
            if self._members(sgs, tasks, nodes):
                return True
            ses.stmt.rollback(cp)
        return False

    def _members(self, sgs: SubGroupSet, tasks: list[int], allowed: np.ndarray) -> bool:
        ses = self.ses
        for member in sorted(sgs.members, key=member_key):
            if isinstance(member, PodSet):
                mine = [p for p in tasks if ses.p_set[p] is member]
                if mine and not self._podset(member, mine, allowed):
                    return False
            else:
                sets = {id(ps) for ps in member.podsets()}
                mine = [p for p in tasks if id(ses.p_set[p]) in sets]
                if mine and not self._set(member, mine, allowed):
                    return False
        return True

    def _podset(self, ps: PodSet, tasks: list[int], allowed: np.ndarray) -> bool:
        ses = self.ses
        for nodes in self._subsets(ps, tasks, allowed):
            cp = ses.stmt.checkpoint()
            ok = True
            bonus = self._bonus(ps)
            batch = len(tasks) > 1 and not self.pipeline_only and bonus is None
            start = place_batch(ses, tasks, nodes) if batch else 0
            for i in range(start, len(tasks)):
                p = tasks[i]
                if not place_pod(ses, p, nodes, self.pipeline_only, bonus):
                    if self.failed_pod is None:
                        self.failed_pod = p
                        self.placed_before_fail = i
                        self.shortfall = best_node_shortfall(ses, p, nodes)
                    ok = False
                    break
            if ok:
                return True
            ses.stmt.rollback(cp)
        return False


def allocate_job(ses: Session, job: JobInfo, explain: bool = True) -> tuple[bool, bool]:
    """Place the job's next step in the open statement. Returns (placed, pipelined)."""
    skip: frozenset[str] = frozenset()
    since = ses.stmt.checkpoint()
    while True:
        tasks = tasks_to_allocate(ses, job, skip)
        if not tasks:
            return False, False
        fail = capacity_failure(ses, job, tasks)
        if fail is not None:
            if explain:
                job.fail(fail.reason, fail.message, fail.details)
            return False, False
        placer = GangPlacer(ses, job)
        if placer.run(tasks):
            break
        alt = skippable_member(ses, job, placer.failed_pod, skip) if placer.failed_pod is not None else None
        if alt is None:
            if explain:
                explain_fit_failure(ses, job, tasks, placer)
            return False, False
        skip = skip | {alt}
    pipelined = any(ses.p_status[op.pod] == PIPELINED for op in ses.stmt.log[since:] if isinstance(op, Allocated))
    if pipelined:
        ses.stmt.convert_to_pipelined(job, since)
    return True, pipelined


def place_tasks(
    ses: Session, job: JobInfo, tasks: list[int], allowed: np.ndarray | None = None, pipeline_only: bool = False
) -> bool:
    """Place exactly ``tasks`` of the job, all or nothing, in the open statement (the victim search's what-if):
    queue limits and quotas first, then the gang tree. Nothing is explained or undone here."""
    if not tasks or capacity_failure(ses, job, tasks) is not None:
        return False
    return GangPlacer(ses, job, pipeline_only).run(tasks, allowed)


def explain_fit_failure(ses: Session, job: JobInfo, tasks: list[int], placer: GangPlacer) -> None:
    if placer.topology_error and placer.failed_pod is None:
        job.fail(Reason.TOPOLOGY, placer.topology_error)
        return
    p = placer.failed_pod if placer.failed_pod is not None else tasks[0]
    pod = ses.pods[p]
    never = never_fits(ses, p)
    if never is not None:
        job.fail(Reason.NEVER_FITS, f"pod {pod.name} can never fit: {never}", {"pod": pod.uid})
        return
    total = ses_need(ses, tasks)
    over = [RES_NAMES[r] for r in range(3) if total[r] > ses.capacity[r] + EPS * max(1.0, total[r])]
    if over:
        job.fail(
            Reason.NEVER_FITS,
            f"the gang needs more {', '.join(over)} than the whole cluster has",
            {
                "requested": dict(zip(RES_NAMES, total, strict=True)),
                "capacity": dict(zip(RES_NAMES, ses.capacity, strict=True)),
            },
        )
        return
    best, shortfall = placer.shortfall
    pset = ses.p_set[p]
    placed = placer.placed_before_fail
    sub = f" of subgroup {pset.name}" if pset is not None and pset.name != "default" else ""
    msg = f"gang does not fit: {len(tasks)} pods required, {placed} placed before pod {pod.name}{sub} found no node"
    if best is not None:
        lacking = ", ".join(f"{k} {v:g}" for k, v in shortfall.items() if v > 0) or "pod slots"
        msg += f"; best node {best} lacks {lacking}"
    details: dict[str, Any] = {
        "pod": pod.uid,
        "required": len(tasks),
        "placedBeforeFailure": placed,
        "bestNode": best,
        "shortfall": shortfall,
    }
    if placer.topology_error:
        details["topology"] = placer.topology_error
    job.fail(Reason.GANG_DOES_NOT_FIT, msg, details)


def ses_need(ses: Session, tasks: list[int]) -> tuple[float, float, float]:
    g = c = m = 0.0
    for p in tasks:
        r = ses.p_req[p]
        g += r[0]
        c += r[1]
        m += r[2]
    return (g, c, m)


def never_fits(ses: Session, p: int) -> str | None:
    """Why no node could hold this pod even if empty (static predicates or size), else None."""
    pod = ses.pods[p]
    base = ses.masks.mask(pod)
    if not base.any():
        return "no node passes its node selector, affinity, taints and readiness"
    g, c, m = ses.p_req[p]
    alloc = ses.alloc
    if ses.p_frac[p] or ses.p_gpumem[p]:
        ok = base & (alloc[GPU] >= 1)
        if ses.p_gpumem[p]:
            ok = ok & (ses.gpu_mem >= ses.p_gpumem[p])
    else:
        ok = base & (alloc[GPU] + EPS >= g)
    ok = ok & (alloc[CPU] + EPS * max(1.0, c) >= c) & (alloc[MEM] + EPS * max(1.0, m) >= m)
    if not ok.any():
        return f"bigger than every eligible node (gpu={g:g} cpu={c:g}m memory={m:g})"
    x = ses.p_xreq[p]
    if x is not None:
        for row, v in zip(x[0].tolist(), x[1].tolist(), strict=True):
            has = ses.xalloc[row] + EPS * max(1.0, v) >= v
            if not (ok & has).any():
                return f"no node has {ses.xnames[row]} {v:g}"
            ok = ok & has
    if pod.claims and ses.dra is not None:
        return ses.dra.unsatisfiable(pod.claims, base, ses.jobs[ses.p_job[p]].spec.queue)
    return None


def best_node_shortfall(ses: Session, p: int, allowed: np.ndarray | None) -> tuple[str | None, dict[str, float]]:
    base = ses.masks.mask(ses.pods[p])
    if allowed is not None and (base & allowed).any():
        base = base & allowed
    if not base.any():
        return None, {}
    g: float | np.ndarray
    g, c, m = ses.p_req[p]
    if ses.p_frac[p] or ses.p_gpumem[p]:
        g = np.where(ses.frac_room + EPS >= ses.p_frac[p], 0.0, 1.0) if ses.p_frac[p] else 1.0
    free = ses.free
    short = np.stack([np.maximum(0.0, g - free[GPU]), np.maximum(0.0, c - free[CPU]), np.maximum(0.0, m - free[MEM])])
    scale = np.array([max(1.0, float(np.max(ses.alloc[r]))) for r in range(3)])[:, None]
    cost = (short / scale).sum(axis=0) + (ses.pods_free <= 0) * 1.0
    x = ses.p_xreq[p]
    if x is not None:
        xshort = np.maximum(0.0, x[1][:, None] - ses.xfree[x[0]])
        xscale = np.maximum(1.0, ses.xalloc[x[0]].max(axis=1, initial=0.0))[:, None]
        cost = cost + (xshort / xscale).sum(axis=0)
    cost = np.where(base, cost, INF)
    i = int(cost.argmin())
    out = {RES_NAMES[r]: float(short[r, i]) for r in range(3)}
    if x is not None:
        for k, row in enumerate(x[0].tolist()):
            out[ses.xnames[row]] = float(xshort[k, i])
    if ses.pods_free[i] <= 0:
        out["pods"] = 1.0
    return ses.nodes[i].name, out

"""Which pods of a gang to place next, and which to take away first (the gang tree itself is :mod:`.gang`).

Allocation (KAI ``GetTasksToAllocate``): while a SubGroupSet is below its minimum, the first K unsatisfied children
(ordered least-satisfied first) contribute exactly the pods they lack; once satisfied, the job grows by ONE pod (or
one subgroup's missing minimum) per attempt, so elastic growth interleaves with other jobs. kai-ray adds ceilings:
``Job.max_member`` and ``SubGroup.max_member`` stop elastic growth.

Eviction (KAI ``GetTasksToEvict``): one surplus pod above a PodSet's minimum first (lowest task priority, Ray head
last), else one whole surplus subgroup above ``minSubGroup``, else the whole gang. An upstream Kubernetes PodGroup's
``disruptionMode`` replaces these steps (:class:`~kai_ray.scheduler.snapshot.Disruption`). A semi-preemptible job
gives one burst pod per step and never its core (:mod:`.semipreemptible`).
"""

from __future__ import annotations

from kai_ray.scheduler.gang import Member, PodSet, SubGroupSet, has_surplus, member_key
from kai_ray.scheduler.semipreemptible import burst_rows
from kai_ray.scheduler.session import ACTIVE, PENDING, JobInfo, Session
from kai_ray.scheduler.snapshot import Disruption


def task_key(ses: Session, p: int) -> tuple[int, int, float, str]:
    """Placement order within a PodSet: Ray head first, then higher task priority, then older, then uid."""
    pod = ses.pods[p]
    return (0 if pod.is_ray_head else 1, -pod.task_priority, pod.created_at, pod.uid)


def _ordered(members: list[Member]) -> list[Member]:
    return sorted(members, key=member_key)


def tasks_to_allocate(ses: Session, job: JobInfo, skip: frozenset[str] = frozenset()) -> list[int]:
    """The job's next allocation step. ``skip`` names subgroups to pass over in a minSubGroup gang phase."""
    if skip:
        return _collect_set(ses, job, job.root, skip)
    cached = job.cache.get("tta")
    if cached is not None and cached[0] == job.version:
        return list(cached[1])
    if job.n_active >= job.max_total and job.root.satisfied():
        out: list[int] = []
    else:
        out = _collect_set(ses, job, job.root)
    job.cache["tta"] = (job.version, out)
    return list(out)


def _pending_sorted(ses: Session, ps: PodSet, pool: set[int] | None = None) -> list[int]:
    if pool is None:
        st = ses.p_status
        pods = ses.pods
        cands = [p for p in ps.pods if st[p] == PENDING and not pods[p].gated]
    else:
        cands = [p for p in ps.pods if p in pool]
    cands.sort(key=lambda p: task_key(ses, p))
    return cands


def _collect_podset(ses: Session, job: JobInfo, ps: PodSet, pool: set[int] | None = None) -> list[int]:
    if ps.n_active >= ps.min:
        if ps.n_active >= ps.max or job.n_active >= job.max_total:
            return []
        return _pending_sorted(ses, ps, pool)[:1]
    return _pending_sorted(ses, ps, pool)[: ps.min - ps.n_active]


def _collect_set(
    ses: Session, job: JobInfo, sgs: SubGroupSet, skip: frozenset[str] = frozenset(), pool: set[int] | None = None
) -> list[int]:
    k = sgs.k()
    children = _ordered(sgs.members)
    if not sgs.satisfied():
        if skip:
            children = [c for c in children if c.name not in skip or c.satisfied()]
        out: list[int] = []
        for child in children[:k]:
            if child.satisfied():
                continue
            if isinstance(child, SubGroupSet):
                out.extend(_collect_set(ses, job, child, skip, pool))
            else:
                out.extend(_collect_podset(ses, job, child, pool))
        return out
    for child in children:
        if isinstance(child, SubGroupSet):
            tasks = _collect_set(ses, job, child, pool=pool)
        else:
            tasks = _collect_podset(ses, job, child, pool)
        if tasks:
            return tasks
    return []


def tasks_to_replace(ses: Session, job: JobInfo, pool: set[int]) -> list[int]:
    """The next allocation step of a victim job drawn from its just-evicted pods ``pool``: what KAI re-places when it
    simulates evicting them (its virtually releasing tasks count as allocatable). A ``disruptionMode: All`` gang
    comes back whole or not at all: keeping part of it would be disrupting the rest."""
    if job.spec.disruption is Disruption.ALL:
        return sorted(pool, key=lambda p: task_key(ses, p))
    return _collect_set(ses, job, job.root, pool=pool)


def skippable_member(ses: Session, job: JobInfo, pod: int, skip: frozenset[str]) -> str | None:
    """The member to pass over after ``pod`` failed, when a minSubGroup set still has spare members.

    KAI only ever tries the first minSubGroup children (least satisfied, then by name); kai-ray also tries the
    next one when a child cannot be placed, so a gang is not blocked by one oversized optional subgroup.
    """
    member: PodSet | SubGroupSet | None = ses.p_set[pod]
    while member is not None and member.parent is not None:
        parent = member.parent
        if parent.min_k is not None and not parent.satisfied():
            spare = [m for m in parent.members if m.name not in skip and m is not member]
            if len(spare) >= parent.min_k - sum(1 for m in parent.members if m.satisfied()):
                return member.name
        member = parent
    return None


def has_tasks_to_allocate(ses: Session, job: JobInfo) -> bool:
    return bool(tasks_to_allocate(ses, job))


# ---------------------------------------------------------------------- eviction


def evict_key(ses: Session, p: int) -> tuple[int, int, float, float, str]:
    """Reverse of placement order: workers before the head, lower task priority first, then (kai-ray) the pod whose
    Ray node would lose least work (idle first, then busy for the shortest time; ``Session.p_risk``, 0 when Ray
    said nothing), then newest first."""
    pod = ses.pods[p]
    return (1 if pod.is_ray_head else 0, pod.task_priority, ses.p_risk[p], -pod.created_at, _neg(pod.uid))


def _neg(s: str) -> str:
    return "".join(chr(0x10FFFF - ord(c)) for c in s)


def _active_sorted(ses: Session, ps: PodSet) -> list[int]:
    st = ses.p_status
    cands = [p for p in ps.pods if st[p] in ACTIVE]
    cands.sort(key=lambda p: evict_key(ses, p))
    return cands


def _all_active(ses: Session, m: Member) -> list[int]:
    out: list[int] = []
    for ps in m.podsets():
        out.extend(_active_sorted(ses, ps))
    return out


def _holds_head(ses: Session, m: Member) -> bool:
    st = ses.p_status
    return any(ses.pods[p].is_ray_head and st[p] in ACTIVE for ps in m.podsets() for p in ps.pods)


def _elastic_from_set(ses: Session, sgs: SubGroupSet) -> list[int]:
    n_sat = sgs.n_satisfied_members()
    if n_sat == 0:
        return []
    members = _ordered(sgs.members)
    members.reverse()
    if has_surplus(sgs):
        for m in members:
            if isinstance(m, SubGroupSet):
                tasks = _elastic_from_set(ses, m)
            elif m.n_active > m.min:
                tasks = _active_sorted(ses, m)[:1]
            else:
                tasks = []
            if tasks:
                return tasks
    if sgs.k() < n_sat:
        # a surplus subgroup holding the Ray head goes last (KAI would pick by name; the head is the cluster)
        for m in sorted(members, key=lambda m: _holds_head(ses, m)):
            if m.satisfied():
                tasks = _all_active(ses, m)
                if tasks:
                    return tasks
    return []


def tasks_to_evict(ses: Session, job: JobInfo) -> tuple[list[int], bool]:
    """The next eviction step for a victim job, and whether the job keeps running afterwards.

    A semi-preemptible job's step is its burst pod that goes first in eviction order (none once only its core is left:
    the core is never a victim). An upstream gang's ``disruptionMode`` overrides KAI's steps: ``All`` is one step of
    every active pod, ``Single`` one pod per step (the first in eviction order) until none is left."""
    if job.semi:
        burst = burst_rows(ses, job.podsets.values(), ACTIVE)
        return ([min(burst, key=lambda p: evict_key(ses, p))] if burst else []), True
    mode = job.spec.disruption
    if mode is Disruption.ALL:
        return _all_active(ses, job.root), False
    if mode is Disruption.SINGLE:
        active = _all_active(ses, job.root)
        active.sort(key=lambda p: evict_key(ses, p))
        return active[:1], len(active) > 1
    tasks = _elastic_from_set(ses, job.root)
    if tasks:
        return tasks, True
    return _all_active(ses, job.root), False

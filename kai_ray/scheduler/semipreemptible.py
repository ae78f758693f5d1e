"""Semi-preemptible gangs: a non-preemptible core fixed by the spec, and a preemptible burst above it.

KAI's third preemptibility mode (``semi-preemptible``, alpha) protects a gang's minimum and lets the rest burst:
the core is charged to the queue's non-preemptible allocation (so it is only placed within deserved quota) and is
never a victim; the pods above it are placed over quota and are the victims, first. KAI computes the core afresh
each session from the gang tree, satisfied members first, then by name, so a member that becomes satisfied late can
take an incumbent's core slot and move the queue's non-preemptible charge after admission (KAI issue "core
membership is unstable across sessions").

A Ray object has a natural core that never moves: its head, the RayJob submitter and each worker group's
``minReplicas`` workers. Here the core is a *count per PodSet*, fixed by the spec (``PodSet.core``: the podgrouper's
``kai-ray.io/subgroup-core`` where it differs from the minimum, else the PodSet's ``minMember``), and its members
are the PodSet's first ``core`` active pods by bind time, then creation time, then uid. A pod that arrives or is bound
later is always behind the incumbents, whatever order the pods are listed, created or started in, so the same pods
stay protected and the charge stays the same from one cycle to the next.

Pure functions over a narrow view of the session (:class:`PodView`): the session calls them to keep
``q_alloc_np`` current, the actions to size a step's in-quota part and to pick burst victims.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable
from typing import Protocol

from kai_ray.scheduler.gang import PodSet, SubGroupSet
from kai_ray.scheduler.snapshot import Job, Pod, Preemptibility

Vec = tuple[float, float, float]
ZERO: Vec = (0.0, 0.0, 0.0)


class PodView(Protocol):
    """What the core reads of a session: pod rows, their states and start times, and their queue charge."""

    pods: list[Pod]
    p_status: list[int]
    p_start: list[float]

    def charged(self, p: int) -> Vec: ...


def job_mode(job: Job, root: SubGroupSet, queue_default: Preemptibility | None) -> tuple[Preemptibility, str]:
    """The job's effective preemptibility, and a note when a semi-preemptible request cannot be honoured.

    Precedence: the object's own setting (``kai.scheduler/preemptibility`` label, or a hand-written
    ``spec.preemptibility``), then its leaf queue's ``kai-ray.io/default-preemptibility``, then the value derived from
    the priority class (KAI's rule, priority < 100 is preemptible). A semi-preemptible gang whose tree has an inner
    node with ``minSubGroup`` below its member count, or an upstream gang with a ``disruptionMode``, has no core that
    is fixed by its spec (which subgroups are core would depend on which are satisfied): it runs non-preemptible, as
    KAI runs a semi-preemptible auto-segmented workload."""
    if job.preemptibility is not None and not job.preemptibility_derived:
        mode = job.preemptibility
    elif queue_default is not None:
        mode = queue_default
    elif job.preemptibility is not None:
        mode = job.preemptibility
    else:
        mode = Preemptibility.PREEMPTIBLE if job.priority < 100 else Preemptibility.NON_PREEMPTIBLE
    if mode is not Preemptibility.SEMI_PREEMPTIBLE:
        return mode, ""
    if job.disruption is not None:
        why = f"disruptionMode {job.disruption.value} decides its victims"
    else:
        why = _moving_core(root)
    if why:
        return Preemptibility.NON_PREEMPTIBLE, f"semi-preemptible is not supported ({why}); it runs non-preemptible"
    return mode, ""


def _moving_core(sgs: SubGroupSet) -> str:
    """Why the tree under ``sgs`` has no fixed core ("" when it has one)."""
    if sgs.min_k is not None and sgs.min_k < len(sgs.members):
        where = f"subgroup {sgs.name!r}" if sgs.name else "the PodGroup"
        return f"{where} has minSubGroup {sgs.min_k} of {len(sgs.members)}: which subgroups are core would move"
    for m in sgs.members:
        if isinstance(m, SubGroupSet):
            why = _moving_core(m)
            if why:
                return why
    return ""


def core_key(view: PodView, p: int) -> tuple[float, float, str]:
    """Core order within a PodSet: bound first (``Pod.bound_at``, else its start time; a pod placed in this cycle
    counts as now), then created first, then uid. Nothing in it changes once a pod is bound, and nothing depends on
    the order pods are listed in."""
    pod = view.pods[p]
    at = pod.bound_at
    return (view.p_start[p] if at is None else at, pod.created_at, pod.uid)


def core_rows(view: PodView, ps: PodSet, active: Collection[int], changing: int = -1, sign: int = 0) -> list[int]:
    """The pods of ``ps`` in its core: its first ``ps.core`` active pods in :func:`core_key` order.

    ``changing``/``sign``: pod ``changing`` is joining (+1) or leaving (-1) the active pods while its state is
    being updated (the session's counters move before or after the state, depending on the operation)."""
    st = view.p_status
    cands = [p for p in ps.pods if p != changing and st[p] in active]
    if sign > 0 and changing >= 0:
        cands.append(changing)
    if len(cands) <= ps.core:
        return cands
    if ps.core <= 0:
        return []
    return heapq.nsmallest(ps.core, cands, key=lambda p: core_key(view, p))


def core_charge(view: PodView, ps: PodSet, active: Collection[int], changing: int = -1, sign: int = 0) -> Vec:
    """What the core of ``ps`` charges its queue's non-preemptible allocation."""
    g = c = m = 0.0
    for p in core_rows(view, ps, active, changing, sign):
        r = view.charged(p)
        g, c, m = g + r[0], c + r[1], m + r[2]
    return (g, c, m)


def open_core(view: PodView, podsets: Iterable[PodSet], active: Collection[int], charged: dict[str, Vec]) -> Vec:
    """What a semi-preemptible job's core charges at session open; each PodSet's part is kept in ``charged``."""
    g = c = m = 0.0
    for ps in podsets:
        part = charged[ps.name] = core_charge(view, ps, active)
        g, c, m = g + part[0], c + part[1], m + part[2]
    return (g, c, m)


def core_delta(
    view: PodView, ps: PodSet, active: Collection[int], charged: dict[str, Vec], changing: int, sign: int
) -> Vec | None:
    """How the core charge of ``ps`` moves when pod ``changing`` joins (+1) or leaves (-1) the active pods (None: it
    does not). Recomputed from the pods rather than adjusted, so undoing a change restores the charge exactly."""
    new = core_charge(view, ps, active, changing, sign)
    old = charged.get(ps.name, ZERO)
    if new == old:
        return None
    charged[ps.name] = new
    return (new[0] - old[0], new[1] - old[1], new[2] - old[2])


def core_slots(ps: PodSet) -> int:
    """How many of the next pods placed into ``ps`` join its core (its active pods all precede them)."""
    return max(0, ps.core - ps.n_active)


def burst_rows(view: PodView, podsets: Collection[PodSet], active: Collection[int]) -> list[int]:
    """The active pods of a semi-preemptible job outside its core: the only pods a victim search may take."""
    st = view.p_status
    out: list[int] = []
    for ps in podsets:
        if ps.n_active <= ps.core:
            continue
        core = set(core_rows(view, ps, active))
        out.extend(p for p in ps.pods if st[p] in active and p not in core)
    return out

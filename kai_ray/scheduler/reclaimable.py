"""KAI's reclaim rules (proportion plugin ``reclaimable``): who may reclaim, from whom, and which victim sets.

* ``can_reclaim``: the reclaimer's leaf queue stays within its fair share with the job (and, for a non-preemptible
  job, its non-preemptible allocation within quota).
* ``victim_queue_allowed``: checked on the two queues where the reclaimer's and victim's ancestor paths diverge.
* ``Reclaimable.validate``: each victim chunk (elastic pods one by one, the core as one block) must pass
  MaintainFairShare (victim stays above its allocatable share) or GuaranteeDeservedQuota (reclaimer within
  deserved, victim above deserved) or, with ``queue_priority_in_quota_reclaim``, InQuotaQueuePriority (strictly
  higher-priority reclaimer within deserved); then, up the reclaimer's chain, the saturation ratio
  (allocated / fair share) must stay below every involved sibling's (anti-ping-pong), and a non-preemptible
  reclaimer stays in quota on every ancestor.
"""

from __future__ import annotations

import math

from kai_ray.scheduler.fairshare import UNLIMITED, allocatable_share
from kai_ray.scheduler.session import Session, le

Vec = tuple[float, float, float]


class QueueState:
    """Queue attributes frozen at the start of one reclaimer's solution (KAI's jobSimulationQueues)."""

    def __init__(self, ses: Session) -> None:
        self.ses = ses
        self.alloc = [list(a) for a in ses.q_alloc]
        self.alloc_np = [list(a) for a in ses.q_alloc_np]

    def allocatable(self, q: int) -> list[float]:
        n = self.ses.tree.nodes[q]
        fair = self.ses.q_fair[q]
        return [allocatable_share(n.quota[r], fair[r], n.limit[r]) for r in range(3)]

    def fits_deserved(self, q: int, req: Vec) -> bool:
        quota = self.ses.tree.nodes[q].quota
        return all(le(self.alloc[q][r] + req[r], quota[r]) for r in range(3))


def leveled(ses: Session, a: int, b: int) -> tuple[int, int]:
    """The two queues at the point where the paths root->a and root->b diverge (KAI getLeveledQueues)."""
    pa = list(reversed(ses.tree.nodes[a].chain))
    pb = list(reversed(ses.tree.nodes[b].chain))
    la, lb = pa[0], pb[0]
    for i in range(min(len(pa), len(pb))):
        la, lb = pa[i], pb[i]
        if la != lb:
            break
    return la, lb


def can_reclaim(ses: Session, q: int, req: Vec, preemptible: bool, np_req: Vec | None = None) -> str | None:
    """None when the reclaimer's queue may reclaim, else why not. ``np_req``: the in-quota part of ``req`` when it is
    not all of it (a semi-preemptible job's core)."""
    alloc = ses.q_alloc[q]
    fair = ses.q_fair[q]
    name = ses.tree.nodes[q].name
    for r in range(3):
        if not le(alloc[r] + req[r], fair[r]):
            return (
                f"queue {name!r} would exceed its fair share of {('gpu', 'cpu', 'memory')[r]} "
                f"({alloc[r] + req[r]:g} > {fair[r]:g})"
            )
    if not preemptible:
        anp = ses.q_alloc_np[q]
        quota = ses.tree.nodes[q].quota
        need = req if np_req is None else np_req
        if not all(le(anp[r] + need[r], quota[r]) for r in range(3)):
            who = "non-preemptible job" if np_req is None else "semi-preemptible job's core"
            return f"{who} would exceed the quota of queue {name!r}"
    return None


def victim_queue_allowed(ses: Session, st: QueueState, reclaimer_q: int, victim_q: int, req: Vec) -> bool:
    rq, vq = leveled(ses, reclaimer_q, victim_q)
    if rq == vq:
        return True
    if not st.fits_deserved(rq, req):
        return _over_allocatable(st, vq, st.alloc[vq])
    nodes = ses.tree.nodes
    if ses.cfg.queue_priority_in_quota_reclaim and nodes[rq].priority > nodes[vq].priority:
        return True
    under = False
    quota = nodes[vq].quota
    for r in range(3):
        if req[r] <= 0 or quota[r] == UNLIMITED:
            continue
        if st.alloc[vq][r] > quota[r]:
            return True
        if st.alloc[vq][r] < quota[r]:
            under = True
    return not under


def _over_allocatable(st: QueueState, q: int, remaining: list[float]) -> bool:
    share = st.allocatable(q)
    return not all(le(remaining[r], share[r]) for r in range(3))


def _ratio(alloc: float, fair: float) -> float:
    if fair == 0:
        return math.inf if alloc > 0 else 0.0
    if fair == UNLIMITED:
        return 0.0
    return alloc / fair


def validate(
    ses: Session,
    st: QueueState,
    reclaimer_q: int,
    req: Vec,
    preemptible: bool,
    chunks: list[tuple[int, Vec]],
    np_req: Vec | None = None,
) -> str | None:
    """None when evicting ``chunks`` (victim leaf queue, resources) for the reclaimer is allowed, else why not."""
    nodes = ses.tree.nodes
    remaining: dict[int, list[float]] = {}
    involved: dict[int, set[int]] = {}
    in_quota_priority = ses.cfg.queue_priority_in_quota_reclaim
    for vq_leaf, res in chunks:
        rq, vq = leveled(ses, reclaimer_q, vq_leaf)
        rem = remaining.setdefault(vq, list(st.alloc[vq]))
        ok = _over_allocatable(st, vq, rem)
        if not ok and st.fits_deserved(rq, req):
            quota = nodes[vq].quota
            ok = not all(le(rem[r], quota[r]) for r in range(3))
            if not ok and in_quota_priority and nodes[rq].priority > nodes[vq].priority:
                ok = True
        if not ok:
            return (
                f"queue {nodes[vq].name!r} would drop to or below its allocatable share and is not above "
                "its deserved quota"
            )
        res_names = {r for r in range(3) if res[r] > 0}
        for q in nodes[vq_leaf].chain:
            rr = remaining.setdefault(q, list(st.alloc[q]))
            for r in range(3):
                rr[r] -= res[r]
            involved.setdefault(q, set()).update(res_names)
    mult = ses.cfg.reclaimer_saturation_multiplier
    req_res = {r for r in range(3) if req[r] > 0}
    for q in nodes[reclaimer_q].chain:
        mine = list(remaining.get(q, st.alloc[q]))
        for r in range(3):
            mine[r] += req[r]
        parent = nodes[q].parent
        for s, srem in remaining.items():
            if s == q or nodes[s].parent != parent:
                continue
            for r in involved.get(s, set()) | req_res:
                fq, fs = ses.q_fair[q][r], ses.q_fair[s][r]
                if fq == UNLIMITED and fs == UNLIMITED:
                    continue
                rq_ratio = _ratio(mine[r], fq)
                rs_ratio = _ratio(srem[r], fs)
                if rq_ratio > 1 and fs > 0 and rq_ratio * mult >= rs_ratio:
                    return (
                        f"anti-ping-pong: queue {nodes[q].name!r} would be more saturated than sibling "
                        f"{nodes[s].name!r} ({rq_ratio:.2f} vs {rs_ratio:.2f})"
                    )
        if not preemptible:
            anp = st.alloc_np[q]
            quota = nodes[q].quota
            need = req if np_req is None else np_req
            if not all(le(anp[r] + need[r], quota[r]) for r in range(3)):
                return f"non-preemptible reclaimer would exceed the quota of {nodes[q].name!r}"
    return None

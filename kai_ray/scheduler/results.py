"""Turning the final session state into decisions: binds, evictions, per-job verdicts and queue status.

Why diff states instead of recording decisions as actions go: actions try and roll back many hypotheses; only the
surviving state matters. A pod pending at the start and allocated at the end is a bind; a pod active at the start
and evicted at the end is an eviction, carrying the action and preemptor recorded when it was evicted.
"""

from __future__ import annotations

from kai_ray.durations import span
from kai_ray.scheduler.decisions import Action, Bind, CycleResult, Evict, JobStatus, QueueStatus, Reason
from kai_ray.scheduler.device_ledger import ClaimAllocation
from kai_ray.scheduler.queues import RES_NAMES
from kai_ray.scheduler.session import (
    ACTIVE,
    ALLOCATED,
    EVICTED,
    MOVED,
    PENDING,
    PIPELINED,
    EvictInfo,
    JobInfo,
    Session,
)
from kai_ray.scheduler.snapshot import ZERO, Resources
from kai_ray.scheduler.statement import Allocated, Evicted


def _running_status(key: str) -> JobStatus:
    return JobStatus(key, True, Reason.SCHEDULED, "running", {"bound": 0})


def _as_dict(v: list[float] | tuple[float, ...]) -> dict[str, float]:
    return {k: float(x) for k, x in zip(RES_NAMES, v, strict=True)}


def _usage(u: Resources | None) -> dict[str, float]:
    return (u or ZERO).as_dict()


def build_result(ses: Session) -> CycleResult:
    res = CycleResult()
    init = ses.initial_status
    st = ses.p_status
    order: list[int] = []
    seen: set[int] = set()
    for op in ses.stmt.log:
        if isinstance(op, Allocated) and op.pod not in seen:
            seen.add(op.pod)
            order.append(op.pod)
    # count of active pods per PodSet at the start, to tell gang binds from elastic growth
    base: dict[int, int] = {}
    for p in order:
        ps = ses.p_set[p]
        if ps is not None and id(ps) not in base:
            base[id(ps)] = sum(1 for q in ps.pods if init[q] in ACTIVE)
    bound_jobs: dict[int, int] = {}
    for p in order:
        if init[p] != PENDING or st[p] not in (ALLOCATED, PIPELINED, MOVED):
            continue  # (MOVED: allocated earlier in the cycle, then a victim re-placed elsewhere: a pipelined bind)
        ps = ses.p_set[p]
        assert ps is not None
        job = ses.jobs[ses.p_job[p]]
        n = base.get(id(ps), 0) + 1
        base[id(ps)] = n
        pipelined = st[p] in (PIPELINED, MOVED)
        where, group = ses.p_moved[p] if st[p] == MOVED else (ses.p_node[p], ses.p_group[p])
        if pipelined:
            reason = Reason.PIPELINED
        elif n > ps.min:
            reason = Reason.ELASTIC_SCALE_UP
        else:
            reason = Reason.SCHEDULED
        node = ses.nodes[where].name
        msg = f"{'pipelined onto resources being released on' if pipelined else 'bound to'} {node}"
        res.binds.append(
            Bind(
                pod=ses.pods[p].uid,
                job=job.key,
                node=node,
                reason=reason,
                gpu_group=group,
                pipelined=pipelined,
                message=msg,
                claims=_claim_allocations(ses, p),
            )
        )
        bound_jobs[job.idx] = bound_jobs.get(job.idx, 0) + 1
    moved = ses.p_moved
    for op in ses.stmt.log:
        if isinstance(op, Evicted) and st[op.pod] in (EVICTED, MOVED) and init[op.pod] in ACTIVE:
            p = op.pod
            info = ses.evict_info[p]
            job = ses.jobs[ses.p_job[p]]
            res.evictions.append(
                Evict(
                    pod=ses.pods[p].uid,
                    job=job.key,
                    action=info.action,
                    reason=info.reason,
                    preemptor=info.preemptor,
                    elastic=info.elastic,
                    whole_gang=info.whole_gang,
                    message=_with_loss_note(ses, p, info),
                    moved_to=ses.nodes[moved[p][0]].name if p in moved else None,
                    moved_group=moved[p][1] if p in moved else None,
                    queue=job.spec.queue,
                )
            )
    seen_evict: set[str] = set()
    uniq = []
    for e in res.evictions:
        if e.pod not in seen_evict:
            seen_evict.add(e.pod)
            uniq.append(e)
    res.evictions = uniq
    for job in ses.jobs:
        res.jobs[job.key] = job_status(ses, job, bound_jobs.get(job.idx, 0))
    for qn in ses.tree.nodes:
        i = qn.idx
        res.queues[qn.name] = QueueStatus(
            name=qn.name,
            fair_share=_as_dict(ses.q_fair[i]),
            allocated=_as_dict(ses.q_alloc[i]),
            allocated_non_preemptible=_as_dict(ses.q_alloc_np[i]),
            requested=_as_dict(ses.q_request[i]),
            usage=_usage(ses.snapshot.usage.get(qn.name)) if ses.snapshot.usage is not None else {},
        )
    res.findings = list(ses.findings)
    res.stats = dict(ses.stats)
    return res


def _with_loss_note(ses: Session, p: int, info: EvictInfo) -> str:
    """The eviction message, plus what Ray said about the victim when that chose it among equals."""
    if info.action not in (Action.PREEMPT, Action.RECLAIM, Action.CONSOLIDATION):
        return info.message
    note = ses.jobs[ses.p_job[p]].risk_note if info.whole_gang else ses.p_risk_note.get(p, "")
    return f"{info.message}; victim order: {note}" if note else info.message


def job_status(ses: Session, job: JobInfo, bound: int) -> JobStatus:
    st = ses.p_status
    if job.invalid is not None:
        reason, msg = job.invalid
        return JobStatus(job.key, False, reason, msg)
    if job.version == 0 and job.n_pend == 0 and job.fail_reason is None and job.n_active > 0 and job.min_satisfied():
        return _running_status(job.key)  # untouched running job: the common case, kept cheap
    pending = sum(1 for p in job.pods if st[p] == PENDING)
    evicted = sum(1 for p in job.pods if st[p] == EVICTED)
    pipelined = sum(1 for p in job.pods if st[p] == PIPELINED or (st[p] == MOVED and ses.initial_status[p] == PENDING))
    satisfied = job.min_satisfied()
    if evicted and not satisfied:
        e = next(ses.evict_info[p] for p in job.pods if st[p] == EVICTED)
        details: dict[str, object] = {"action": e.action.value, "preemptor": e.preemptor, "evictedPods": evicted}
        if job.stale_since is not None:
            details["staleSince"] = job.stale_since
        return JobStatus(job.key, False, e.reason, f"evicted: {e.message}", details)
    if satisfied and job.n_active > 0:
        if pipelined:
            return JobStatus(
                job.key,
                True,
                Reason.PIPELINED,
                f"{pipelined} pods pipelined onto resources that evicted pods are releasing",
                {"pipelined": pipelined},
            )
        if pending and job.fail_reason is not None:
            return JobStatus(
                job.key,
                True,
                Reason.SCHEDULED,
                f"running at or above its minimum; {pending} elastic pods pending: {job.fail_message}",
                {"pendingElastic": pending, "blocking": job.fail_reason.value, **job.fail_details},
            )
        msg = f"{bound} pods bound this cycle" if bound else "running"
        if pending:
            msg += f"; {pending} pods pending"
        if evicted:
            msg += f"; {evicted} surplus pods evicted"
        return JobStatus(job.key, True, Reason.SCHEDULED, msg, {"bound": bound})
    if job.stale_since is not None and job.n_active > 0:
        grace = job.spec.staleness_grace
        if grace is None:
            grace = ses.cfg.default_staleness_grace
        left = job.stale_since + grace - ses.now
        when = "never (stale-gang eviction disabled)" if grace < 0 else f"in {span(left)}" if left > 0 else "now"
        return JobStatus(
            job.key,
            False,
            Reason.STALE_GANG,
            f"running below its gang minimum for {span(ses.now - job.stale_since)}; evicted whole {when}",
            {"staleSince": job.stale_since, "gracePeriodSeconds": grace},
        )
    if not job.ready:
        return JobStatus(
            job.key, False, Reason.NOT_READY, "fewer schedulable (non-gated) pods exist than the gang minimum requires"
        )
    if job.fail_reason is not None:
        return JobStatus(job.key, False, job.fail_reason, job.fail_message, dict(job.fail_details))
    if pending == 0:
        return JobStatus(job.key, False, Reason.GANG_DOES_NOT_FIT, "no schedulable pods")
    return JobStatus(job.key, False, Reason.GANG_DOES_NOT_FIT, "not attempted this cycle")


def _claim_allocations(ses: Session, p: int) -> tuple[ClaimAllocation, ...]:
    """The devices of each of the pod's claims (new or already allocated): the adapter writes what is missing."""
    claims = ses.pods[p].claims
    if not claims or ses.dra is None:
        return ()
    names = [n.name for n in ses.nodes]
    return tuple(a for a in (ses.dra.allocation(k, names) for k in claims) if a is not None)

"""Which gangs held by the queue-admission gate may go now: KAI's ``ungate`` (its queue-admission gating design).

Why a gate at all: a pod left pending because its queue is over quota looks, to a node autoscaler, like a pod that
needs a node, so the autoscaler buys nodes nobody may use. Pods of opted-in queues are therefore created with the
scheduling gate ``kai.scheduler/queue-admission`` (the podgrouper's webhook adds it, without computing anything); a
gated pod is invisible to autoscalers and to the other actions. This module is the other half: after the cycle's
actions it decides, on the cycle's own queue state, which gated gangs their queue's capacity admits; the adapter
removes their gates (``kai_ray.k8s.scheduling.ungate``).

The rules, as KAI's design has them:

- The gate caches the capacity verdict (:func:`kai_ray.scheduler.allocation.capacity_failure`'s two checks: every
  limit up the queue chain, and in-quota for non-preemptible gangs); it is removed only on an affirmative decision,
  and allocation still enforces quota, so a gate removed by hand or a webhook that was down costs nothing but noise.
- A whole gang at once (every pod that carries only this gate), in fair-share order: the queue furthest below its
  fair share first, then higher priority, then older; a gang already partly ungated (a leader died mid-way) first of
  all, so a torn gang converges. Each admission is charged before the next is weighed, so admissions in one cycle
  never together exceed a limit.
- Reservation: a gang ungated but not yet placed (waiting for a node) has consumed nothing, so the next cycle would
  admit another gang against the same quota. Its pods' requests are therefore counted as reserved while they are
  pending without a gate and carry the ``kai.scheduler/queue-admitted-timestamp`` annotation written with the
  ungating, for at most ``reservation_ttl`` seconds. That state lives on the pods: a new leader (or a restarted one)
  reads the same reservations, so nothing leaks across leader changes, and a gang that no longer fits after being
  ungated keeps its place (its reservation) until it binds or the reservation expires (then it competes at
  allocation, exactly as without gates).
- Only gangs whose queue gates wait on the decision (``SchedulerConfig.queue_admission_gating``: ``all``, or
  ``queues`` and the Queue opted in). A gang whose queue does not gate, or no longer does (its opt-in label removed,
  the operator restarted with ``off``), is ungated unconditionally and without the stamp (nothing was admitted, so
  nothing is reserved): a gate nobody will decide on must not hold a pod for ever; allocation still enforces quota.
- A gang whose queue does not exist stays gated under ``all`` (it was gated for that queue) and says so; once the
  queue is created the normal decision applies. Under ``queues`` a missing queue cannot have opted in: its gang is
  let go and reads ``queue ... does not exist`` as any pending gang would.
- Pods with any other gate are never touched (their gate's owner decides).

A gang kept gated gets its queue's capacity verdict as its status, marked ``gated: queue over quota`` (details
``gated: True``), so it is told apart from ``no node fits``.
"""

from __future__ import annotations

from dataclasses import dataclass

from kai_ray.scheduler.allocation import quota_request
from kai_ray.scheduler.decisions import CycleResult, JobStatus, Reason
from kai_ray.scheduler.queues import RES_NAMES
from kai_ray.scheduler.session import PENDING, JobInfo, Session, le

GATED = "gated: queue over quota"
UNGATING = "ungated: its queue's quota admits it; waiting for its gates to be removed"
UNGATING_FREELY = "ungated: its queue does not gate admission; waiting for its gates to be removed"
DEFAULT_RESERVATION_TTL = 600.0  # seconds an ungated, still pending gang holds its queue's room


@dataclass(frozen=True, slots=True)
class Ungate:
    job: str
    pods: tuple[str, ...]  # Pod.uid of every pod whose only gate is the queue-admission gate
    admitted: bool = True  # by a quota decision (stamped: room reserved); False: its queue does not gate


Vec = list[float]


def _gated_pods(ses: Session, job: JobInfo) -> list[int]:
    return [p for p in job.pods if ses.p_status[p] == PENDING and ses.pods[p].quota_gated]


def _queue_gates(ses: Session, job: JobInfo, gating: str) -> bool:
    """Whether ``job``'s gated pods wait on the quota decision: every queue under ``all`` (a missing one too),
    an existing opted-in queue under ``queues``, none under ``off``."""
    if gating == "all":
        return True
    return gating == "queues" and job.queue >= 0 and ses.tree.nodes[job.queue].admission_gating


def _reserved(ses: Session, ttl: float) -> tuple[list[Vec], list[Vec], set[int]]:
    """Requests of pods ungated by a quota decision and still pending (within ``ttl``), summed up each queue's
    chain; and the jobs that hold such pods (partly ungated gangs go first)."""
    nq = len(ses.tree.nodes)
    res: list[Vec] = [[0.0, 0.0, 0.0] for _ in range(nq)]
    res_np: list[Vec] = [[0.0, 0.0, 0.0] for _ in range(nq)]
    holding: set[int] = set()
    for job in ses.jobs:
        if job.queue < 0:
            continue
        held = [
            p
            for p in job.pods
            if ses.p_status[p] == PENDING
            and not ses.pods[p].gated
            and ses.pods[p].admitted_at is not None
            and ses.now - (ses.pods[p].admitted_at or 0.0) < ttl
        ]
        if not held:
            continue
        holding.add(job.idx)
        req = quota_request(ses, held)
        for q in ses.tree.nodes[job.queue].chain:
            for k in range(3):
                res[q][k] += req[k]
                if not job.preemptible:
                    res_np[q][k] += req[k]
    return res, res_np, holding


def _over_limit(name: str, r: int, cap: float, used: float, req: float) -> tuple[Reason, str]:
    return Reason.OVER_LIMIT, (
        f"queue {name!r} would exceed its {RES_NAMES[r]} limit: limit "
        f"{cap:g}, allocated and reserved {used:g}, requested {req:g}"
    )


def _over_quota(name: str, r: int, cap: float, used: float, req: float) -> tuple[Reason, str]:
    return Reason.NON_PREEMPTIBLE_OVER_QUOTA, (
        f"non-preemptible job needs in-quota {RES_NAMES[r]} of queue {name!r}: quota {cap:g}, "
        f"non-preemptible allocated and reserved {used:g}, requested {req:g}"
    )


def _breach(
    ses: Session, job: JobInfo, req: tuple[float, float, float], used: list[Vec], used_np: list[Vec]
) -> tuple[Reason, str] | None:
    """The first cap the gang would pass (limit up the chain, then in-quota for non-preemptible); None when none."""
    checks = [(used, "limit", _over_limit)]
    if not job.preemptible:
        checks.append((used_np, "quota", _over_quota))
    for charged, cap_of, say in checks:
        for q in ses.tree.nodes[job.queue].chain:
            node = ses.tree.nodes[q]
            caps = node.limit if cap_of == "limit" else node.quota
            for r in range(3):
                if caps[r] != -1 and req[r] and not le(charged[q][r] + req[r], caps[r]):
                    return say(node.name, r, caps[r], charged[q][r], req[r])
    return None


def decide_ungates(
    ses: Session, reservation_ttl: float = DEFAULT_RESERVATION_TTL, gating: str = "off"
) -> tuple[list[Ungate], list[JobStatus]]:
    """After the cycle's actions: the gangs whose gates go now, and a status for every gang that stays gated or is
    being ungated (``gating``: ``SchedulerConfig.queue_admission_gating``)."""
    cands: dict[int, list[tuple[JobInfo, list[int]]]] = {}
    out: list[Ungate] = []
    statuses: list[JobStatus] = []
    for job in ses.jobs:
        pods = _gated_pods(ses, job)
        if not pods:
            continue
        if not _queue_gates(ses, job, gating):
            out.append(Ungate(job.key, tuple(ses.pods[p].uid for p in pods), admitted=False))
            if job.queue >= 0:  # a missing queue keeps its own verdict ("queue ... does not exist")
                statuses.append(JobStatus(job.key, False, Reason.NOT_READY, UNGATING_FREELY, {"ungating": True}))
            continue
        if job.queue < 0:
            why = job.invalid[1] if job.invalid else "its queue does not exist"
            statuses.append(JobStatus(job.key, False, Reason.QUEUE_DOES_NOT_EXIST, f"gated: {why}", {"gated": True}))
            continue
        cands.setdefault(job.queue, []).append((job, pods))
    if not cands:
        return out, statuses
    res, res_np, holding = _reserved(ses, reservation_ttl)
    used = [[a + r for a, r in zip(alloc, rsv, strict=True)] for alloc, rsv in zip(ses.q_alloc, res, strict=True)]
    used_np = [[a + r for a, r in zip(al, rs, strict=True)] for al, rs in zip(ses.q_alloc_np, res_np, strict=True)]
    for lst in cands.values():
        lst.sort(key=lambda jp: (jp[0].idx not in holding, -jp[0].priority, jp[0].created_at, jp[0].key))

    def share(q: int) -> float:
        fair = ses.q_fair[q][0]
        return used[q][0] / fair if fair > 0 else (0.0 if used[q][0] <= 0 else float("inf"))

    while cands:
        q = min(cands, key=lambda qi: (cands[qi][0][0].idx not in holding, share(qi), ses.tree.nodes[qi].name))
        job, pods = cands[q].pop(0)
        if not cands[q]:
            del cands[q]
        req = quota_request(ses, pods)
        breach = _breach(ses, job, req, used, used_np)
        if breach is not None:
            statuses.append(JobStatus(job.key, False, breach[0], f"{GATED}; {breach[1]}", {"gated": True}))
            continue
        for qi in ses.tree.nodes[job.queue].chain:
            for k in range(3):
                used[qi][k] += req[k]
                if not job.preemptible:
                    used_np[qi][k] += req[k]
        out.append(Ungate(job.key, tuple(ses.pods[p].uid for p in pods)))
        statuses.append(JobStatus(job.key, False, Reason.NOT_READY, UNGATING, {"ungating": True}))
    return out, statuses


def apply_ungates(
    ses: Session, result: CycleResult, reservation_ttl: float = DEFAULT_RESERVATION_TTL, gating: str = "off"
) -> None:
    """Put the decision on the cycle's result: ``result.ungate``, and the verdicts of gated or ungating gangs (a gang
    still short of pods because some are gated would otherwise read ``NotReadyForScheduling``)."""
    ungates, statuses = decide_ungates(ses, reservation_ttl, gating)
    result.ungate = ungates
    for st in statuses:
        prev = result.jobs.get(st.job)
        if prev is None or not prev.scheduled:
            result.jobs[st.job] = st

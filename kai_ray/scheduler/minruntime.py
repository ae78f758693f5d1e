"""Min-runtime protection and preemption delay (KAI's minruntime plugin and PodGroup ``preemptionDelay``).

A victim job that has run less than its queue's min-runtime keeps its core: only elastic surplus above its minimum
may be taken. The preempt window comes from the victim's queue, walking up to the first queue that sets it; the
reclaim window (default method ``lca``) from the queue one step below the lowest common ancestor of reclaimer and
victim towards the victim, then upwards; ``queue`` resolves like preempt. Config defaults apply when none is set.
"""

from __future__ import annotations

from kai_ray.scheduler.session import JobInfo, Session
from kai_ray.scheduler.solver import job_start


def preempt_min_runtime(ses: Session, victim: JobInfo) -> float:
    for q in ses.tree.nodes[victim.queue].chain:
        v = ses.tree.nodes[q].preempt_min_runtime
        if v is not None:
            return v
    return ses.cfg.default_preempt_min_runtime


def reclaim_min_runtime(ses: Session, reclaimer: JobInfo, victim: JobInfo) -> float:
    nodes = ses.tree.nodes
    vchain = nodes[victim.queue].chain
    start = 0
    if ses.cfg.reclaim_min_runtime_resolve == "lca":
        rset = set(nodes[reclaimer.queue].chain)
        for i, q in enumerate(vchain):
            if q in rset:
                start = max(0, i - 1)  # one step below the LCA, towards the victim
                break
        else:
            start = len(vchain) - 1  # different top-level queues: the victim's top-level queue
    for q in vchain[start:]:
        v = nodes[q].reclaim_min_runtime
        if v is not None:
            return v
    return ses.cfg.default_reclaim_min_runtime


def protected(ses: Session, victim: JobInfo, window: float) -> bool:
    return window > 0 and ses.now - job_start(ses, victim) < window


def preemption_delay(ses: Session, job: JobInfo) -> float:
    d = job.spec.preemption_delay
    return ses.cfg.default_preemption_delay if d is None else d


def within_preemption_delay(ses: Session, job: JobInfo) -> bool:
    d = preemption_delay(ses, job)
    return d > 0 and ses.now - job.created_at < d

"""Stale gang eviction: a running gang below its minimum for longer than its grace period is evicted whole.

KAI: a job with active pods, none succeeded, and its gang minimum unmet is stale; after ``stalenessGracePeriod``
(PodGroup field, else the config default; negative disables) all its active pods are evicted, so no half-alive
gang holds resources forever. The first time it is seen stale is ``Job.stale_since`` (the adapter persists
``kai.scheduler/stale-podgroup-timestamp``); when unknown, this cycle starts the clock.
"""

from __future__ import annotations

from kai_ray.durations import span
from kai_ray.scheduler.bounded import evict_overdue
from kai_ray.scheduler.decisions import Action, Reason
from kai_ray.scheduler.session import ACTIVE, DONE, EvictInfo, Session


def stale_gang_action(ses: Session) -> None:
    evict_overdue(ses)  # kai-ray's bounded waits (ready-timeout, max-runtime): same purpose, same action
    for job in ses.jobs:
        st = ses.p_status
        if job.n_active == 0 or job.min_satisfied():
            continue
        if any(st[p] == DONE and ses.pods[p].phase.value == "Succeeded" for p in job.pods):
            continue
        grace = job.spec.staleness_grace
        if grace is None:
            grace = ses.cfg.default_staleness_grace
        since = job.spec.stale_since if job.spec.stale_since is not None else ses.now
        job.stale_since = since
        if grace < 0 or ses.now - since < grace:
            continue
        msg = (
            f"gang {job.key} has run below its minimum for {span(ses.now - since)} "
            f"(grace {span(grace)}); "
            "evicting all its pods"
        )
        info = EvictInfo(Action.STALE_GANG_EVICTION, Reason.STALE_GANG, None, msg, False, True)
        for p in job.pods:
            if st[p] in ACTIVE:
                ses.stmt.evict(p, info)

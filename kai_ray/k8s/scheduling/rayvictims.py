"""From the cache's entries to the Ray path's records, and from its outcomes to the reclaim metrics.

Dispatch writes each victim down once, from what the informers already hold (the pod's Ray labels, its PodGroup's
Ray owner, the drain deadline its PodGroup and Queue ask for), so the Ray path never reads the cache nor the API for
it again; what the Ray path did is counted here against the victims' queue.
"""

from __future__ import annotations

import logging
from typing import Any

from kai_ray import constants as c
from kai_ray.k8s.base.metrics import SchedulerMetrics
from kai_ray.k8s.ray.drainfirst import drain_deadline
from kai_ray.k8s.ray.rayplan import FALLBACK_CODES, ray_owner
from kai_ray.k8s.ray.victims import PendingStop, RayOwner, ReclaimOutcome, Victim
from kai_ray.k8s.scheduling.entries import PgEntry, PodEntry, QueueEntry
from kai_ray.k8s.scheduling.reporting import ray_owner_ref
from kai_ray.scheduler.decisions import Evict, StopPending

log = logging.getLogger(__name__)


def victim_of(p: PodEntry, e: Evict, pg: PgEntry | None, q: QueueEntry | None, default_deadline: float) -> Victim:
    """The victim record of one eviction decision, from the cached pod, PodGroup and Queue."""
    meta = p.raw[0] if p.raw else None
    labels: dict[str, Any] = dict(meta.get("labels") or {}) if isinstance(meta, dict) else {}
    owner = ray_owner(pg.raw) if pg is not None else None
    cluster = labels.get(c.RAY_CLUSTER) or None
    seconds = default_deadline
    if cluster is not None:  # only a Ray node is drained
        deadline = drain_deadline(pg.raw if pg else None, q.raw if q else None, default_deadline)
        seconds = deadline.seconds
        if deadline.problem:
            log.info(
                "drain deadline of %s/%s: %s; using the %s one", p.namespace, p.group, deadline.problem, deadline.source
            )
    return Victim(
        namespace=p.namespace,
        pod=p.name,
        uid=p.uid,
        job=e.job,
        podgroup=p.group,
        queue=e.queue,
        reason=e.reason.value,
        preemptor=e.preemptor,
        cluster=cluster,
        node_type=labels.get(c.RAY_NODE_TYPE),
        owner=RayOwner(*owner) if owner is not None else None,
        elastic=e.elastic,
        whole_gang=e.whole_gang,
        drain_deadline_s=seconds,
    )


def pending_stop(d: StopPending, pg: PgEntry) -> PendingStop:
    """The core's max-pending decision with the Ray owner its PodGroup names (the Event goes to the same object)."""
    ref = ray_owner_ref(pg.raw)
    owner = RayOwner(ref["kind"], ref["name"]) if ref is not None else None
    return PendingStop(d, pg.namespace, pg.name, owner)


def count_outcome(metrics: SchedulerMetrics, out: ReclaimOutcome) -> None:
    """A Ray-aware reclaim finished (a shrink, a suspend, or a drain before an eviction): count it and its drains
    against the victims' queue (kai_ray_elastic_shrinks_total, kai_ray_suspends_total, kai_ray_ray_drains_total)."""
    queues = {v.pod: v.queue for v in out.victims}
    for rec in out.records:
        queue = next((q for q in (queues.get(pod, "") for pod in rec.pods) if q), "")
        if rec.kind == "shrink":
            fell_back = rec.code in FALLBACK_CODES or rec.code == "Error"
            result = "ok" if rec.ok else ("fallback" if fell_back else "deferred")
            metrics.elastic_shrinks.labels(queue, result).inc()
        elif rec.kind == "suspend":
            metrics.suspends.labels(queue, "ok" if rec.ok else ("deferred" if rec.deferred else "fallback")).inc()
        for d in rec.drains:
            metrics.ray_drains.labels(queue, d.status).inc()

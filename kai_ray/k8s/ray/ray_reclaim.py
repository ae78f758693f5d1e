"""The Ray path of the scheduler's victims: shrink, suspend, or drain first, on worker threads.

:meth:`RayReclaim.take` sorts the victims of one cycle. Elastic victims that are KubeRay workers become one shrink per
RayCluster (drain, then ``replicas`` down and ``workersToDelete``); the victims of a job that loses its whole gang,
when its PodGroup's owner is one of ``suspend_kinds``, become a suspend of that owner (every victim of that job:
shrinking the surplus of a gang that goes anyway would only race the suspend); other Ray nodes are drained, then
evicted; what is no Ray node is handed back at once for plain eviction. The API work runs on a small thread pool,
because a drain waits up to the gang's deadline; each piece of work ends in a
:class:`~kai_ray.k8s.ray.victims.ReclaimOutcome`, a future the caller applies (evict, release, count).

Refusals that a shrink can never express (a head pod, an unknown group, ...) fall back to eviction, drained first,
while ``PendingDeletes`` is deferred (killing the pod would restart the recreate loop). A RayJob that cannot be
suspended now is never evicted instead (KubeRay would fail it for good): its victims are released and the next cycle
decides again.

Drain first (:mod:`kai_ray.k8s.ray.drainfirst`): whatever happens to a KubeRay pod, shrink, suspend or eviction, its
Ray node is drained with the ``PREEMPTION`` reason and the gang's deadline first, so Ray Train gets its preemption
notice and Serve moves replicas away. ``gcs_address``: ``"auto"`` (the head pod's IP and GCS port), ``None`` (no
draining), or a function ``(namespace, cluster) -> address``.

:meth:`RayReclaim.stop_pending` is the same path for a gang past its max-pending-time: suspend its Ray owner.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from kai_ray import constants as c
from kai_ray.durations import span
from kai_ray.k8s.base.rest import ApiError, Kube
from kai_ray.k8s.ray.drainfirst import DrainReport, apply_drain
from kai_ray.k8s.ray.elastic import SuspendOutcome, apply_shrink, apply_suspend
from kai_ray.k8s.ray.raygcs import DrainOutcome
from kai_ray.k8s.ray.rayplan import FALLBACK_CODES, NOTHING_TO_DO
from kai_ray.k8s.ray.victims import (
    PendingStop,
    ReclaimOutcome,
    ReclaimRecord,
    Result,
    StopOutcome,
    Victim,
    by_cluster,
)
from kai_ray.scheduler.decisions import Reason

log = logging.getLogger(__name__)

PATCH_FAILED = "PatchFailed"  # apply_suspend's code for an API error (a conflict past its retries, a 5xx)
KEPT_RECORDS = 1000


class RayReclaim:
    """The Ray-aware reclaim of one scheduler replica. ``records`` keeps the last reclaims (tests, explain)."""

    def __init__(
        self,
        kube: Kube,
        *,
        shrink: bool = True,
        suspend_kinds: Sequence[str] = ("RayJob",),
        gcs_address: str | Callable[[str, str], str | None] | None = "auto",
        workers: int = 16,  # a drain waits up to its deadline: many clusters drain at once
    ) -> None:
        self.kube = kube
        self.shrink = shrink
        self.suspend_kinds = tuple(suspend_kinds)
        self.gcs_address = gcs_address
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kai-ray-reclaim")
        self.records: list[ReclaimRecord] = []
        self._lock = threading.Lock()

    def close(self, wait: bool = True) -> None:
        self.pool.shutdown(wait=wait, cancel_futures=not wait)

    def take(self, victims: Sequence[Victim]) -> tuple[list[Victim], list[Future[ReclaimOutcome]]]:
        """Start the Ray way for the victims it applies to: (victims to evict the plain way now, outcomes to come)."""
        plain: list[Victim] = []
        shrinks: list[Victim] = []
        drains: list[Victim] = []
        suspends: dict[tuple[str, str, str, str], list[Victim]] = {}
        by_job: dict[str, list[Victim]] = {}
        for v in victims:
            by_job.setdefault(v.job or f"{v.namespace}/{v.podgroup}", []).append(v)
        for items in by_job.values():
            v0 = items[0]
            owner = v0.owner
            whole = self.suspend_kinds and v0.podgroup and any(v.whole_gang for v in items)
            if whole and owner is not None and owner.kind in self.suspend_kinds:
                suspends[(v0.namespace, owner.kind, owner.name, v0.podgroup or "")] = items
                continue
            for v in items:
                if self.shrink and v.elastic and v.node_type == "worker" and v.cluster:
                    shrinks.append(v)
                elif v.cluster and self.gcs_address is not None:
                    drains.append(v)
                else:
                    plain.append(v)
        futures: list[Future[ReclaimOutcome]] = []
        for (ns, cluster, _), group in by_cluster(shrinks)[0].items():
            futures.append(self.pool.submit(self._shrink, ns, cluster, group))
        for (ns, kind, name, pg), group in suspends.items():
            futures.append(self.pool.submit(self._suspend, ns, kind, name, pg, group))
        for (ns, cluster, _), group in by_cluster(drains, per_podgroup=True)[0].items():
            futures.append(self.pool.submit(self._drain_then_evict, ns, cluster, group))
        return plain, futures

    def stop_pending(self, stop: PendingStop) -> Future[StopOutcome]:
        """Suspend the Ray owner of a gang past its max-pending-time (``suspend`` and ``fail`` alike)."""
        return self.pool.submit(self._stop_pending, stop)

    def _stop_pending(self, stop: PendingStop) -> StopOutcome:
        if stop.owner is None:
            return StopOutcome(stop, False, "its PodGroup has no RayCluster, RayJob or RayService owner")
        d = stop.decision
        beyond = f"pending {span(d.waited)}, beyond its max-pending-time {span(d.limit)}"
        try:
            out = apply_suspend(
                self.kube,
                stop.owner.kind,
                stop.namespace,
                stop.owner.name,
                reason=Reason.MAX_PENDING_TIME_EXCEEDED.value,
                message=f"{beyond} ({c.MAX_PENDING_ACTION}: {d.action})",
            )
        except ApiError as exc:
            out = SuspendOutcome(False, PATCH_FAILED, str(exc))
        if out.code == PATCH_FAILED:
            return StopOutcome(stop, False, out.message, retry=True)
        return StopOutcome(stop, out.applied or out.code == NOTHING_TO_DO, out.message)

    # --- the work on the pool: each returns what dispatch does next ---------------------------------------------

    def _address(self, namespace: str, cluster: str) -> str | None:
        if callable(self.gcs_address):
            return self.gcs_address(namespace, cluster)
        return self.gcs_address

    def _record(self, rec: ReclaimRecord) -> ReclaimRecord:
        with self._lock:
            self.records.append(rec)
            del self.records[:-KEPT_RECORDS]
        return rec

    def _drain(self, namespace: str, cluster: str, items: list[Victim]) -> DrainReport:
        """Drain the Ray nodes of these victims of one RayCluster and wait (bounded by the gang's deadline)."""
        deadline_s = items[0].drain_deadline_s
        try:
            return apply_drain(
                self.kube,
                namespace,
                cluster,
                [v.pod for v in items],
                message=items[0].message,
                deadline_s=deadline_s,
                gcs_address=self._address(namespace, cluster),
            )
        except Exception as exc:
            log.warning("draining Ray nodes of RayCluster %s/%s failed: %s; evicting anyway", namespace, cluster, exc)
            return DrainReport(cluster, deadline_s)

    def _drain_record(self, namespace: str, cluster: str, items: list[Victim]) -> ReclaimRecord:
        t0 = time.monotonic()
        report = self._drain(namespace, cluster, items)
        names = [v.pod for v in items]
        message = f"drained {len(report.accepted)} of {len(names)} Ray nodes in {report.waited_s:.1f}s, then evicted"
        return self._record(
            ReclaimRecord(
                "drain", f"{namespace}/{cluster}", names, True, "", message, time.monotonic() - t0, report.drains
            )
        )

    def _drain_then_evict(self, namespace: str, cluster: str, items: list[Victim]) -> ReclaimOutcome:
        rec = self._drain_record(namespace, cluster, items)
        return ReclaimOutcome(Result.DRAINED, tuple(items), (rec,), evict=tuple(items))

    def _fall_back(self, items: list[Victim], done: ReclaimRecord) -> ReclaimOutcome:
        """Evict instead; the Ray nodes among the victims are drained first (by RayCluster)."""
        records = [done]
        if self.gcs_address is not None:
            for (ns, cluster, _), group in by_cluster(items)[0].items():
                records.append(self._drain_record(ns, cluster, group))
        return ReclaimOutcome(Result.FELL_BACK, tuple(items), tuple(records), evict=tuple(items))

    def _shrink(self, namespace: str, cluster: str, items: list[Victim]) -> ReclaimOutcome:
        t0 = time.monotonic()
        names = [v.pod for v in items]
        target = f"{namespace}/{cluster}"
        try:
            out = apply_shrink(
                self.kube,
                namespace,
                cluster,
                names,
                reason=items[0].reason,
                message=items[0].message,
                podgroup=items[0].podgroup,
                gcs_address=self._address(namespace, cluster),
                drain_deadline_s=items[0].drain_deadline_s,
            )
        except Exception as exc:
            log.warning("shrink of RayCluster %s/%s failed: %s; evicting instead", namespace, cluster, exc)
            return self._fall_back(
                items, self._record(ReclaimRecord("shrink", target, names, False, "Error", str(exc), 0.0))
            )
        took = time.monotonic() - t0
        ok = out.in_effect
        rec = self._record(ReclaimRecord("shrink", target, names, ok, out.plan.code, out.message, took, out.drains))
        if ok:
            log.info("shrank RayCluster %s/%s in %.1fs: %s", namespace, cluster, took, out.message)
            return ReclaimOutcome(Result.SHRUNK, tuple(items), (rec,))
        if out.plan.code in FALLBACK_CODES:
            log.info("cannot shrink RayCluster %s/%s (%s); evicting", namespace, cluster, out.message)
            return self._fall_back(items, rec)
        log.info("shrink of RayCluster %s/%s deferred: %s", namespace, cluster, out.message)
        return ReclaimOutcome(Result.DEFERRED, tuple(items), (rec,))

    def _suspend(self, namespace: str, kind: str, name: str, podgroup: str, items: list[Victim]) -> ReclaimOutcome:
        t0 = time.monotonic()
        drains: list[DrainOutcome] = []
        if self.gcs_address is not None:
            for (ns, cluster, _), group in by_cluster(items)[0].items():
                drains.extend(self._drain(ns, cluster, group).drains)
        try:
            out = apply_suspend(
                self.kube, kind, namespace, name, reason=items[0].reason, message=items[0].message, podgroup=podgroup
            )
        except Exception as exc:
            out = SuspendOutcome(False, "Error", str(exc))
        deferred = not out.applied and kind == "RayJob"
        rec = self._record(
            ReclaimRecord(
                "suspend",
                f"{namespace}/{name}",
                [v.pod for v in items],
                out.applied,
                out.code,
                out.message,
                time.monotonic() - t0,
                drains,
                deferred=deferred,
            )
        )
        if out.applied:
            return ReclaimOutcome(Result.SUSPENDED, tuple(items), (rec,))
        if deferred:
            # Evicting a RayJob's pods fails it for good (KubeRay does not recreate its head): never. The victims go
            # back to the core, which decides again next cycle (the suspend is retried, or someone else yields).
            log.info("cannot suspend RayJob %s/%s now (%s); its pods are not evicted", namespace, name, out.message)
            return ReclaimOutcome(Result.DEFERRED, tuple(items), (rec,), release=tuple(items))
        log.info("cannot suspend %s %s/%s (%s); evicting its pods", kind, namespace, name, out.message)
        return ReclaimOutcome(Result.FELL_BACK, tuple(items), (rec,), evict=tuple(items))

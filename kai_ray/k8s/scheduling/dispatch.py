"""Sends a cycle's decisions: bindings through ``pods/binding``, evictions through the Eviction API (the Ray path,
:class:`~kai_ray.k8s.ray.ray_reclaim.RayReclaim`, first), and the max-pending actions on Ray owners.

Nothing here is awaited by the cycle loop: work goes to the binder pool, and the cache *assumes* each binding before
it is sent, so the next cycle can run while bindings are in flight and still never binds a pod twice nor gives its
room away. A pod is marked evicting before its eviction is sent, for the same reason. Work that reaches a replica no
longer leading is dropped and its assumption forgotten. The metrics that only dispatch can see (bind and eviction
results, time from a PodGroup's creation until its gang is bound, which action made room for a gang) are counted here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kai_ray import constants as c
from kai_ray.bridge import parse_time
from kai_ray.durations import rfc3339
from kai_ray.k8s.base.events import NORMAL, WARNING, EventRecorder
from kai_ray.k8s.base.metrics import SchedulerMetrics
from kai_ray.k8s.base.rest import ApiError, Kube
from kai_ray.k8s.base.workqueue import Dispatcher
from kai_ray.k8s.config import OperatorConfig
from kai_ray.k8s.ray.ray_reclaim import RayReclaim
from kai_ray.k8s.ray.victims import ReclaimOutcome, StopOutcome
from kai_ray.k8s.scheduling import status as st
from kai_ray.k8s.scheduling.cache import SchedulerCache
from kai_ray.k8s.scheduling.entries import PgEntry, PodEntry, SnapshotView
from kai_ray.k8s.scheduling.maxpending import max_pending_report
from kai_ray.k8s.scheduling.rayvictims import count_outcome, pending_stop, victim_of
from kai_ray.k8s.scheduling.release_binds import AwaitedVictims, ReleasePlan, can_bind, plan_of
from kai_ray.k8s.scheduling.reporting import STATUS_PRIORITY, Reporter, kai_object_ref, pod_ref, ray_owner_ref
from kai_ray.k8s.scheduling.resume import is_virtual
from kai_ray.scheduler.decisions import CycleResult, Evict, JobStatus, Reason
from kai_ray.scheduler.device_ledger import ClaimAllocation

log = logging.getLogger(__name__)

BIND_PRIORITY = 0
EVICT_PRIORITY = 1
WRITE_HOLDOFF = 0.5  # seconds after the last binding was dispatched before status/Event writes resume


@dataclass(eq=False)
class BindPace:
    """When bindings were last handed to the binder pool: status and Event writes (the writer pool's gate) wait
    while bindings are being sent, so a burst of arrivals is scheduled first."""

    binder: Dispatcher
    last_bind: float = 0.0  # monotonic

    def writes_may_go(self) -> bool:
        return not self.binder.busy() and time.monotonic() - self.last_bind > WRITE_HOLDOFF


@dataclass
class _GangTiming:
    """A gang whose bindings are out, timed from its PodGroup's creation until the last of them succeeds."""

    binds_left: int
    uid: str
    created: float
    queue: str


@dataclass(eq=False)
class Dispatch:
    """Bindings and evictions of one scheduler replica. Victims go to ``reclaim`` (the Ray path) first;
    ``is_leader`` is asked again just before each call is sent; ``dra_reserve`` writes a pod's claims before its
    binding (:func:`kai_ray.k8s.scheduling.dra_claims.reserve`)."""

    config: OperatorConfig
    kube: Kube
    cache: SchedulerCache
    metrics: SchedulerMetrics
    events: EventRecorder
    binder: Dispatcher
    writer: Dispatcher
    reporter: Reporter
    reclaim: RayReclaim
    is_leader: Callable[[], bool]
    pace: BindPace
    dra_reserve: Callable[[str, str, str, tuple[ClaimAllocation, ...]], None] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _gangs_binding: dict[str, _GangTiming] = field(default_factory=dict, init=False)
    _scheduled_once: dict[str, str] = field(default_factory=dict, init=False)  # job -> PodGroup uid timed
    _made_room: dict[str, str] = field(default_factory=dict, init=False)  # job -> the action that evicted for it
    _reclaiming: dict[str, tuple[PodEntry, Evict]] = field(default_factory=dict, init=False)  # on the Ray path
    _max_pending_acted: dict[str, float] = field(default_factory=dict, init=False)  # job -> the wait acted on
    _awaited_victims: AwaitedVictims = field(default_factory=AwaitedVictims, init=False)  # for pipelined gangs
    _release_plan: ReleasePlan | None = field(default=None, init=False)  # under the deciding lock (release_binds)

    def binds(self, view: SnapshotView, result: CycleResult) -> None:
        """Assume and send the cycle's bindings (pipelined ones wait for their victims to go, kept as the plan that
        :meth:`bind_if_released` binds), and stamp the PodGroups of gangs that start."""
        self._release_plan = plan_of(view, result)
        wanted: list[tuple[PodEntry, str, str]] = []
        claims: dict[str, tuple[ClaimAllocation, ...]] = {}
        for b in result.binds:
            if b.pipelined or is_virtual(b.pod):
                continue  # waits for its victims to go, or does not exist yet (a suspended gang's)
            p = view.pods_by_uid.get(b.pod)
            if p is None:
                self.metrics.binds.labels("skipped").inc()
                continue
            wanted.append((p, b.node, b.job))
            if b.claims:
                claims[p.key] = b.claims
        if not wanted:
            return
        ok = self.cache.assume_many([(p.key, p.uid, node) for p, node, _ in wanted])
        sent = [(p, node, job) for (p, node, job), assumed in zip(wanted, ok, strict=True) if assumed]
        self.metrics.binds.labels("skipped").inc(len(wanted) - len(sent))  # already bound or in flight: never twice
        starting = {job for _, _, job in sent if view.active_before.get(job, 0) == 0}
        self._send(sent, claims, starting)

    def bind_if_released(self) -> int:
        """Bind the latest cycle's pipelined pods once their victims are gone, if nothing they relied on moved
        (:mod:`~kai_ray.k8s.scheduling.release_binds`); the pods bound (0: the victims are not all gone, or the
        next cycle decides, as under KAI). Whoever comes first calls it, holding the loop's deciding lock as
        :meth:`binds` does: the release watcher, or the next cycle before its snapshot."""
        if not self._awaited_victims.gone(self.cache):
            return 0
        plan, self._release_plan = self._release_plan, None
        if plan is None or not self.is_leader() or not can_bind(plan, self.cache):
            return 0
        with self.cache.lock:
            ok = self.cache.assume_many([(b.key, b.uid, b.node) for b in plan.binds])
            if not all(ok):  # a watch event slipped in since the check: all or nothing
                for b, assumed in zip(plan.binds, ok, strict=True):
                    if assumed:
                        self.cache.forget(b.key, b.uid)
                return 0
            sent = [(self.cache.pods[b.key], b.node, b.job) for b in plan.binds]
        self._send(sent, {}, set(plan.starting))
        self.metrics.release_binds.inc(len(sent))
        log.info("bound %d pipelined pods as their victims left, before the next cycle", len(sent))
        return len(sent)

    def _send(
        self,
        sent: list[tuple[PodEntry, str, str]],
        claims: Mapping[str, tuple[ClaimAllocation, ...]],
        starting: set[str],
    ) -> None:
        """Queue the bindings of assumed pods; stamp the PodGroups of the gangs in ``starting``."""
        if not sent:
            return
        work: list[tuple[str, Callable[[], None]]] = []
        started: dict[str, int] = defaultdict(int)
        for p, node, job in sent:
            if job in starting:
                started[job] += 1
            work.append((f"bind/{p.key}", partial(self._bind, p, node, claims.get(p.key, ()))))
        for job, n in started.items():
            self._gang_starting(job, n)
        self.pace.last_bind = time.monotonic()
        self.binder.submit_many(work, priority=BIND_PRIORITY)
        stamp: dict[str, str | None] = {c.LAST_START: rfc3339()}
        self.writer.submit_many(
            [self.reporter.annotation_work(job, stamp) for job in started], priority=STATUS_PRIORITY
        )

    def _bind(self, p: PodEntry, node: str, claims: tuple[ClaimAllocation, ...] = ()) -> None:
        if not self.is_leader():
            self.cache.forget(p.key, p.uid)
            self.metrics.binds.labels("not_leader").inc()
            return
        t0 = time.time()
        if claims and self.dra_reserve is not None:  # kube-scheduler's PreBind: claims allocated and reserved
            try:
                self.dra_reserve(p.namespace, p.name, p.uid, claims)
            except ApiError as exc:
                self.cache.forget(p.key, p.uid)  # scheduled again next cycle, from the claims as they are now
                self._gang_bound(p.job_key, False)
                self.metrics.binds.labels("error").inc()
                log.warning("bind %s -> %s: claims not reserved: %s", p.key, node, exc)
                return
        if p.created:
            self.metrics.task_scheduling_latency.observe(max(0.0, 1000 * (t0 - p.created)))
        try:
            self.kube.bind(p.namespace, p.name, p.uid, node)
        except ApiError as exc:
            self._gang_bound(p.job_key, False)
            if exc.conflict:
                self.cache.sent(p.key, p.uid)
                # Already bound (or replaced by a pod with a new UID): the watch will tell us where; never retry.
                self.metrics.binds.labels("conflict").inc()
                log.info("bind %s -> %s: %s", p.key, node, exc.message)
            else:
                self.cache.forget(p.key, p.uid)
                self.metrics.binds.labels("gone" if exc.not_found else "error").inc()
                if not exc.not_found:
                    log.warning("bind %s -> %s failed: %s", p.key, node, exc)
            return
        self.metrics.task_bind_latency.observe(1000 * (time.time() - t0))
        self.cache.sent(p.key, p.uid)
        self.metrics.binds.labels("ok").inc()
        self._gang_bound(p.job_key, True)
        self.events.emit(pod_ref(p), NORMAL, "Scheduled", f"Successfully assigned {p.key} to {node}")

    def evictions(self, view: SnapshotView, result: CycleResult) -> None:
        """Mark and send the cycle's evictions, the Ray path first; the ``Evicted`` condition, an Event and the
        last-eviction stamp on each victim's PodGroup."""
        victims: list[tuple[PodEntry, Evict]] = []
        for e in result.evictions:
            p = view.pods_by_uid.get(e.pod)
            if p is not None and self.cache.mark_evicting(p.key, p.uid):
                victims.append((p, e))
        if not victims:
            return
        if any(b.pipelined for b in result.binds):
            self._awaited_victims.add(p.key for p, _ in victims)
        by_job: dict[str, list[Evict]] = defaultdict(list)
        by_preemptor: dict[str, int] = defaultdict(int)
        for _, e in victims:
            by_job[e.job].append(e)
            self.metrics.queue_evictions.labels(e.queue, e.action.value).inc()
            pg = self.cache.pgs.get(e.job)
            if pg is not None:
                self.metrics.evicted_pods.labels(
                    pg.name, pg.namespace, pg.uid, self.config.node_pool or st.NODE_POOL, e.action.value
                ).inc()
            if e.preemptor:
                self._made_room[e.preemptor] = e.action.value
            by_preemptor[e.preemptor or "?"] += 1
        for preemptor, n in by_preemptor.items():  # the decision's timestamp (bench vs-kai reads it)
            log.info("evicting %d pods for %s", n, preemptor)
        self._take(victims)
        now = rfc3339()
        for job, evs in by_job.items():
            pg = self.cache.pgs.get(job)
            ref = kai_object_ref("PodGroup", pg.raw) if pg is not None else None
            if pg is not None and ref is not None:
                self.reporter.write_pg_status(job, st.evicted_status(evs, now))
                self.events.emit(ref, WARNING, evs[0].reason.value, st.eviction_message(evs))
            self.reporter.annotate_pg(job, {c.LAST_EVICTION: now, **self._raynative_stamps(pg, evs)})

    def _take(self, victims: list[tuple[PodEntry, Evict]]) -> None:
        """The Ray path takes what it can (a shrink, a suspend, a drain first); the rest is evicted at once, and what
        the Ray path leaves to evict or to release comes back as its outcome (:meth:`_reclaimed`)."""
        records = []
        for p, e in victims:
            pg = self.cache.pgs.get(e.job)
            q = self.cache.queues.get(e.queue) if pg is not None and e.queue else None
            records.append(victim_of(p, e, pg, q, self.config.drain_deadline))
            self._reclaiming[p.key] = (p, e)
        plain, outcomes = self.reclaim.take(records)
        for v in plain:
            p, e = self._reclaiming.pop(v.key)
            self.binder.submit(f"evict/{p.key}", partial(self.evict, p, e), priority=EVICT_PRIORITY)
        for fut in outcomes:
            fut.add_done_callback(self._reclaimed)

    def _reclaimed(self, fut: Future[ReclaimOutcome]) -> None:
        """Apply what a Ray-aware reclaim left to do (on the reclaim's thread, as soon as it is done): evict, release,
        count."""
        if fut.cancelled():  # the replica is stopping
            return
        try:
            out = fut.result()
        except Exception:
            log.exception("a Ray-aware reclaim failed; its victims are decided again once their mark expires")
            return
        count_outcome(self.metrics, out)
        for v in out.release:
            self._reclaiming.pop(v.key, None)
            self._awaited_victims.drop(v.key)  # it stays: nothing waits for it to go
            self.cache.unmark_evicting(v.key)
        for v in out.evict:
            taken = self._reclaiming.pop(v.key, None)
            if taken is not None:
                self.binder.submit(f"evict/{v.key}", partial(self.evict, *taken), priority=EVICT_PRIORITY)
        for v in out.victims:
            self._reclaiming.pop(v.key, None)

    def stop_pending(self, result: CycleResult) -> None:
        """The core's max-pending actions: the Ray path suspends each gang's owner, once per wait (the wait's start is
        remembered here and, for the next leader, in ``kai-ray.io/max-pending-acted``, which the core reads back)."""
        for d in result.stop_pending:
            pg = self.cache.pgs.get(d.job)
            if pg is None or self._max_pending_acted.get(d.job) == d.pending_since:
                continue
            self._max_pending_acted[d.job] = d.pending_since
            self.reclaim.stop_pending(pending_stop(d, pg)).add_done_callback(partial(self._stopped, pg.raw))

    def _stopped(self, raw: dict[str, Any], fut: Future[StopOutcome]) -> None:
        """Record the max-pending action on the PodGroup (record, condition) and say so on the Ray object."""
        if fut.cancelled():
            return
        try:
            out = fut.result()
        except Exception:
            log.exception("a max-pending action failed; a later cycle tries again")
            return
        job = f"{out.stop.namespace}/{out.stop.podgroup}"
        d = out.stop.decision
        if out.retry:  # the API failed us, not the object: a later cycle tries again
            log.info("%s: max-pending-action %s not taken yet: %s", job, d.action, out.why)
            self._max_pending_acted.pop(job, None)
            return
        report = max_pending_report(out)
        self.reporter.annotate_pg(job, report.annotations)
        self.reporter.write_pg_status(job, {"conditions": [report.condition]})
        self.events.emit(
            ray_owner_ref(raw) or kai_object_ref("PodGroup", raw), WARNING, report.condition["reason"], report.text
        )
        log.info("%s: %s", job, report.text)

    def _raynative_stamps(self, pg: PgEntry | None, evs: list[Evict]) -> dict[str, str | None]:
        """A gang evicted for its ready-timeout waits out the backoff (``kai-ray.io/requeue-after``); a gang
        with a max-runtime that loses its run keeps the admitted time it had (``kai-ray.io/admitted-seconds``)."""
        out: dict[str, str | None] = {}
        if any(e.reason is Reason.READY_TIMEOUT for e in evs):
            out[c.REQUEUE_AFTER] = rfc3339(time.time() + self.config.ready_timeout_backoff)
        ann = ((pg.raw.get("metadata") or {}).get("annotations") or {}) if pg is not None else {}
        start = parse_time(ann.get(c.LAST_START))
        if c.MAX_RUNTIME in ann and start is not None and any(e.whole_gang for e in evs):
            try:
                before = float(ann.get(c.ADMITTED_SECONDS) or 0.0)
            except ValueError:
                before = 0.0
            out[c.ADMITTED_SECONDS] = f"{before + max(0.0, time.time() - start):.0f}"
        return out

    def evict(self, p: PodEntry, e: Evict) -> None:
        """One pod, evicted or deleted (``eviction_mode``); also what the Ray path leaves to evict."""
        if not self.is_leader():
            self._awaited_victims.drop(p.key)
            self.cache.unmark_evicting(p.key)
            return
        action = e.action.value
        try:
            if self.config.eviction_mode == "delete":
                self.kube.delete_pod(p.namespace, p.name, p.uid, self.config.eviction_grace_seconds)
            else:
                self.kube.evict(p.namespace, p.name, p.uid, self.config.eviction_grace_seconds)
        except ApiError as exc:
            if exc.not_found:
                self.metrics.evictions.labels(action, "gone").inc()
                return
            self._awaited_victims.drop(p.key)  # it stays (a PDB, an error): nothing waits for it to go
            self.cache.unmark_evicting(p.key)
            if exc.status == 429:
                self.metrics.evictions.labels(action, "blocked").inc()
                self.events.emit(
                    pod_ref(p), WARNING, "EvictionBlocked", f"{action} for {e.preemptor or '?'} refused: {exc.message}"
                )
            else:
                self.metrics.evictions.labels(action, "error").inc()
                log.warning("evict %s failed: %s", p.key, exc)
            return
        self.metrics.evictions.labels(action, "ok").inc()
        who = f" by {e.preemptor}" if e.preemptor else ""
        self.events.emit(pod_ref(p), WARNING, e.reason.value, f"{e.reason.value}{who}: {e.message}".strip())

    def awaiting_victims(self) -> bool:
        """Pods evicted for a pipelined gang are still to go."""
        return self._awaited_victims.pending()

    def _queue_of(self, job: str) -> str:
        """A starting gang's queue (a binding does not carry it, an eviction does)."""
        pg = self.cache.pgs.get(job)
        if pg is None:
            return self.cache.upstream_queue(job) or ""
        return (pg.queue or c.DEFAULT_QUEUE) if pg.parsed else ""

    def _gang_starting(self, job: str, binds: int) -> None:
        """A gang with no pod running got its bindings: count it (KAI's scheduled-by-action) and, the first time
        for this PodGroup, time it from creation until every one of these bindings succeeded."""
        self.metrics.podgroups_scheduled.inc(self._made_room.pop(job, "allocate"))
        pg = self.cache.pgs.get(job)
        created = parse_time((pg.raw.get("metadata") or {}).get("creationTimestamp")) if pg is not None else None
        if pg is None or created is None:
            return
        queue = self._queue_of(job)
        with self._lock:
            if self._scheduled_once.get(job) != pg.uid:
                self._gangs_binding[job] = _GangTiming(binds, pg.uid, created, queue)

    def _gang_bound(self, job: str | None, ok: bool) -> None:
        if job is None:
            return
        with self._lock:
            entry = self._gangs_binding.get(job)
            if entry is None:
                return
            if not ok:
                del self._gangs_binding[job]  # the next cycle binds the gang again, and times it then
                return
            entry.binds_left -= 1
            if entry.binds_left > 0:
                return
            del self._gangs_binding[job]
            self._scheduled_once[job] = entry.uid
        self.metrics.time_to_schedule.labels(entry.queue).observe(max(0.0, time.time() - entry.created))

    def forget(self, verdicts: Mapping[str, JobStatus]) -> None:
        """Drop what is kept for jobs the last cycle no longer has, and for victims already gone."""
        with self._lock:
            for key in [k for k in self._scheduled_once if k not in verdicts]:
                del self._scheduled_once[key]
        for key in [k for k in list(self._reclaiming) if k not in self.cache.pods]:
            self._reclaiming.pop(key, None)  # a victim already gone
        for key in [k for k in self._max_pending_acted if k not in verdicts]:
            del self._max_pending_acted[key]
        for key in [k for k in self._made_room if k not in verdicts]:
            del self._made_room[key]

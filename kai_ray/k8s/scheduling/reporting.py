"""What the scheduler operator says about a cycle: PodGroup and Queue status, Events, and metrics.

Writes scale with what changed, not with the pods or the cycles:

- A cycle looks only at the verdicts that differ from the last ones it settled (or whose PodGroup changed): an
  unchanged gang costs a dictionary lookup, however many cycles run.
- Status is written on transitions: a verdict is remembered per PodGroup and written again only when its reason
  changes or its message does (at most every ``status_interval``); a pending verdict must last
  ``PENDING_REPORT_DELAY`` before it is written, so the pods of a gang still arriving do not make it flap.
- Changes to one PodGroup (its verdict, an ``Evicted`` condition, a max-pending action) accumulate until the writer
  pool gets to them and go out as one write, at most one per ``STATUS_COALESCE`` seconds per PodGroup. The body is
  built there, off the cycle loop, on the freshest status known (the watch's, or our own last write when the watch
  lags, since a merge patch replaces the whole list), and not sent when the stored status already says it.

Queue status is compared with what was last written and rate-limited the same way. All writes go through the
lower-priority writer pool, which waits while bindings are being sent; Events are aggregated and rate-limited per
object by :class:`~kai_ray.k8s.base.events.EventRecorder`.

The bodies themselves are pure functions in :mod:`kai_ray.k8s.scheduling.status`; this module decides when to send
them and keeps the per-object memory that makes writes rare.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from kai_ray import constants as c
from kai_ray.api.strict import LAST_APPLIED, object_unknown_fields
from kai_ray.durations import rfc3339
from kai_ray.k8s.base.events import NORMAL, WARNING, EventRecorder, object_ref
from kai_ray.k8s.base.isolate import Guard, Quarantine
from kai_ray.k8s.base.metrics import SchedulerMetrics
from kai_ray.k8s.base.pruning import PruneGuard
from kai_ray.k8s.base.rest import ApiError, Kube, podgroups_path, queues_path, resource_version
from kai_ray.k8s.base.workqueue import Dispatcher
from kai_ray.k8s.config import OperatorConfig
from kai_ray.k8s.scheduling import status as st
from kai_ray.k8s.scheduling.cache import SchedulerCache
from kai_ray.k8s.scheduling.entries import PodEntry, SnapshotView
from kai_ray.k8s.usagedb import LEDGER_FIELD, UsageSource
from kai_ray.scheduler.decisions import CycleResult, JobStatus, Reason
from kai_ray.scheduler.snapshot import PodPhase

log = logging.getLogger(__name__)

STATUS_PRIORITY = 10
PENDING_REPORT_DELAY = 1.0  # a pending verdict is written once it has lasted this long (transients are not)
STATUS_COALESCE = 1.0  # at most one status write per PodGroup in this many seconds; changes meanwhile are merged


@dataclass(slots=True)
class _Verdict:
    scheduled: bool
    reason: str
    message: str
    written_at: float
    first_seen: float


@dataclass(eq=False)
class Reporter:
    """Status, Events and metrics for one scheduler replica; called by the cycle loop after dispatch, and by
    :class:`~kai_ray.k8s.scheduling.dispatch.Dispatch` for the status and annotations of evicted and starting gangs
    and of max-pending actions."""

    config: OperatorConfig
    kube: Kube
    cache: SchedulerCache
    metrics: SchedulerMetrics
    events: EventRecorder
    writer: Dispatcher
    quarantine: Quarantine
    usage: UsageSource | None
    guard: Guard = field(default_factory=lambda: Guard("reporting", log))
    pruned: PruneGuard = field(default_factory=PruneGuard)  # status fields the installed CRDs do not store
    _verdicts: dict[str, _Verdict] = field(default_factory=dict, init=False)
    _upstream_told: dict[str, set[str]] = field(default_factory=dict, init=False)  # upstream gang -> pods told
    _status_lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _status_pending: dict[str, dict[str, Any]] = field(default_factory=dict, init=False)
    _status_written: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict, init=False)  # rv, status
    _verdict_pending: dict[str, tuple[JobStatus, str]] = field(default_factory=dict, init=False)  # verdict, time
    _status_sent_at: dict[str, float] = field(default_factory=dict, init=False)  # job -> monotonic, last write
    _settled: dict[str, tuple[JobStatus, Any]] = field(default_factory=dict, init=False)  # (verdict, PodGroup sig)
    _queue_written: dict[str, tuple[dict[str, Any], float]] = field(default_factory=dict, init=False)
    _reported_invalid: dict[str, str] = field(default_factory=dict, init=False)
    _queue_fields_checked: dict[str, tuple[Any, ...]] = field(default_factory=dict, init=False)  # Queue -> version
    next_due: float | None = field(default=None, init=False)  # monotonic: a verdict left for later can be said then

    def report(self, view: SnapshotView, result: CycleResult) -> dict[str, JobStatus]:
        """Every verdict of the cycle on its PodGroup (status, Events), then findings, Queue status and metrics.
        Returns the full set of verdicts (job -> status), so state kept per job elsewhere can be dropped once a job
        has none."""
        now = time.monotonic()
        iso = rfc3339()
        verdicts = dict(result.jobs)
        for key, errors in view.invalid_jobs.items():
            msg = "; ".join(errors)
            verdicts[key] = JobStatus(key, False, Reason.INVALID, f"invalid PodGroup: {msg}")
        for key, q in self.quarantine.jobs.items():
            why = f"the scheduler fails on this PodGroup ({q.reason}); it is left out until it or its pods change"
            verdicts[key] = JobStatus(key, False, Reason.INVALID, why)
        bad_queues = {name: list(errors) for name, errors in view.invalid_queues.items()}
        for f in result.findings:  # unknown parents and cycles are found across queues, by the core
            if f.kind == "Queue" and f.name in self.cache.queues:
                text = f"spec.{f.field}: {f.message}" if f.field else f.message
                if text not in bad_queues.setdefault(f.name, []):
                    bad_queues[f.name].append(text)
        for key, v in list(verdicts.items()):
            if not v.scheduled and v.reason is Reason.QUEUE_DOES_NOT_EXIST:
                pg = self.cache.pgs.get(key)
                qname = pg.queue if pg is not None and pg.parsed else None
                if qname in bad_queues:
                    verdicts[key] = JobStatus(
                        key, False, Reason.QUEUE_INVALID, f"queue {qname!r} is invalid: {'; '.join(bad_queues[qname])}"
                    )
        jobs = {j.key: j for j in view.snapshot.jobs}
        for key, v in list(verdicts.items()):
            if not v.scheduled and v.reason is Reason.NEVER_FITS:
                fields = self._oversized(view, jobs.get(key))
                if fields:
                    verdicts[key] = replace(v, message=f"{'; '.join(fields)}; {v.message}")

        def members(key: str) -> list[PodEntry]:
            job = jobs.get(key)
            return [view.pods_by_uid[p.uid] for p in job.pods if p.uid in view.pods_by_uid] if job else []

        settled = self._settled
        self.next_due = None
        for key, v in verdicts.items():
            pg = self.cache.pgs.get(key)
            seen = (v, pg.sig if pg is not None else None)
            if settled.get(key) == seen:
                continue  # said already, and neither the verdict nor its PodGroup changed
            settled.pop(key, None)
            if self.guard(key, self._report_job, key, v, members, now, iso, default=False):
                settled[key] = seen
        for key in [k for k in settled if k not in verdicts]:
            del settled[key]
        for key in [k for k in self._verdicts if k not in verdicts]:
            del self._verdicts[key]
            self._upstream_told.pop(key, None)
            with self._status_lock:
                self._status_written.pop(key, None)
                self._status_sent_at.pop(key, None)
        self._queue_metrics(view, result, verdicts)
        self._report_findings(result)
        self._report_queues(result, bad_queues, now, iso)
        return verdicts

    def _oversized(self, view: SnapshotView, job: Any) -> list[str]:
        """For a gang that can never fit: the request fields of its pods that no node can hold (at most 3)."""
        if job is None:
            return []
        largest = {
            r: max((getattr(n.allocatable, r) for n in view.snapshot.nodes), default=0.0)
            for r in ("gpu", "cpu", "memory")
        }
        out: list[str] = []
        for p in job.pods:
            entry = view.pods_by_uid.get(p.uid)
            if entry is not None and len(entry.raw) > 1 and isinstance(entry.raw[1], dict):
                out += st.oversized_fields(entry.name, entry.raw[1], largest)
            if len(out) >= 3:
                break
        return out[:3]

    def _report_job(
        self, key: str, v: JobStatus, members: Callable[[str], list[PodEntry]], now: float, iso: str
    ) -> bool:
        """Say what is new about one verdict. True when nothing is left to say about it until it or its PodGroup
        changes; False when time must pass first (a pending verdict's delay, a message's ``status_interval``)."""
        pg = self.cache.pgs.get(key)
        if pg is None:
            if key in self.cache.upstream:
                self._report_upstream(key, v, now)
                return v.scheduled  # a pending upstream gang is looked at again: pods may join it
            return True
        if "staleSince" in v.details or (pg.parsed and c.STALE_SINCE in pg.annotations):
            self._persist_stale_since(key, pg.annotations if pg.parsed else None, v)
        prev = self._verdicts.get(key)
        reason = v.reason.value
        if (
            prev is not None
            and prev.written_at > 0
            and prev.scheduled == v.scheduled
            and prev.reason == reason
            and (v.scheduled or prev.message == v.message)
        ):
            return True  # the common case: nothing new to say
        same_kind = prev is not None and prev.scheduled == v.scheduled and prev.reason == reason
        first_seen = prev.first_seen if same_kind and prev is not None else now
        if prev is None or not same_kind:
            self._verdicts[key] = prev = _Verdict(v.scheduled, v.reason.value, v.message, 0.0, first_seen)
        if not v.scheduled and v.reason is not Reason.INVALID and now - first_seen < PENDING_REPORT_DELAY:
            return self._later(first_seen + PENDING_REPORT_DELAY)  # transient (the pods of a new gang arriving)
        written = prev.written_at > 0
        if written and (v.scheduled or prev.message == v.message):
            return True
        if written and now - prev.written_at < self.config.status_interval:
            return self._later(prev.written_at + self.config.status_interval)  # a new message, once that passed
        prev.message = v.message
        prev.written_at = now
        current = self._current_pg_status(key, pg.raw)
        stored = _condition(current, st.SCHEDULED)
        if stored is not None and stored.get("reason") == v.reason.value and stored.get("message") == v.message:
            return True  # already says so (e.g. written by the previous leader)
        self.write_pg_verdict(key, v, iso)
        if written:
            return True  # a message refresh: Events are for transitions
        ref = kai_object_ref("PodGroup", pg.raw)
        if v.scheduled:
            if v.reason is not Reason.SCHEDULED or len(members(key)) > 1:
                self.events.emit(ref, NORMAL, v.reason.value, v.message)
        else:
            self.events.emit(ref, WARNING, "Unschedulable", f"{v.reason.value}: {v.message}")
            self._ray_owner_event(pg.raw, v)
            if v.reason is Reason.INVALID:
                self.metrics.findings.labels("PodGroup").inc()
            if pg.mark_unschedulable:
                for p in members(key):
                    if not p.node:
                        self.events.emit(pod_ref(p), WARNING, "Unschedulable", f"{v.reason.value}: {v.message}")
        return True

    def _later(self, due: float) -> bool:
        """A verdict to say at ``due`` (monotonic): a later cycle says it, and an idle loop wakes for it
        (:attr:`next_due`). False, as :meth:`_report_job` returns for a verdict not settled yet."""
        self.next_due = due if self.next_due is None else min(self.next_due, due)
        return False

    def _report_upstream(self, key: str, v: JobStatus, now: float) -> None:
        """An upstream Kubernetes PodGroup: kai-ray writes nothing on it (its conditions are kube-scheduler's gang
        plugin's), so a pending verdict is a Warning Event on each waiting pod, once per pod and change of reason
        (a pod that joins the gang later is told too)."""
        prev = self._verdicts.get(key)
        reason = v.reason.value
        if prev is None or prev.scheduled != v.scheduled or prev.reason != reason:
            self._verdicts[key] = prev = _Verdict(v.scheduled, reason, v.message, 0.0, now)
            self._upstream_told.pop(key, None)
        if v.scheduled:
            return
        if v.reason is not Reason.INVALID and now - prev.first_seen < PENDING_REPORT_DELAY:
            self._later(prev.first_seen + PENDING_REPORT_DELAY)  # transient, as for KAI PodGroups
            return
        prev.written_at = now
        told = self._upstream_told.setdefault(key, set())
        with self.cache.lock:  # the cache's members: an invalid gang is in no snapshot
            pods = [p for p in (self.cache.members.get(key) or {}).values() if not p.node and p.uid not in told]
        for p in pods:
            told.add(p.uid)
            self.events.emit(pod_ref(p), WARNING, "Unschedulable", f"{reason}: {v.message}")

    def _ray_owner_event(self, raw: dict[str, Any], v: JobStatus) -> None:
        """What the Ray object's owner must see on the object itself (a RayService whose upgrade surge cannot
        start, a gang past its kai-ray.io/max-pending-time), as a Warning Event on the PodGroup's Ray owner. A gang
        with a max-pending-action gets its Event when dispatch has taken the action."""
        reason = None
        if v.details.get("upgradeSurgeOf"):
            reason = "UpgradeSurgeBlocked"
        elif v.details.get("maxPendingExceeded") and not v.details.get("maxPendingAction"):
            reason = "MaxPendingTimeExceeded"
        ref = ray_owner_ref(raw)
        if reason is not None and ref is not None:
            self.events.emit(ref, WARNING, reason, v.message)

    def _persist_stale_since(self, key: str, annotations: Mapping[str, str] | None, v: JobStatus) -> None:
        """Keep ``kai.scheduler/stale-podgroup-timestamp`` in step with the core, which restarts the stale-gang
        clock every cycle unless the time it first saw the gang below its minimum is stored on the PodGroup."""
        if annotations is None:
            return
        since = v.details.get("staleSince")
        stored = annotations.get(c.STALE_SINCE)
        if isinstance(since, int | float) and stored is None:
            self.annotate_pg(key, {c.STALE_SINCE: rfc3339(float(since))})
        elif since is None and stored is not None and v.reason is not Reason.STALE_GANG:
            self.annotate_pg(key, {c.STALE_SINCE: None})

    def _report_findings(self, result: CycleResult) -> None:
        for f in result.findings:
            ref: dict[str, Any] | None = None
            if f.kind == "Queue" and f.name in self.cache.queues:
                continue  # in the Queue's Valid condition, with an Event when it changes (_report_queues)
            if f.kind == "PodGroup":
                pg = self.cache.pgs.get(f.name)
                ref = kai_object_ref("PodGroup", pg.raw) if pg is not None else None
            text = f"{f.field}: {f.message}" if f.field else f.message
            if ref is not None:
                self.events.emit(ref, WARNING, f"Invalid{f.kind}", text)
                self.metrics.findings.labels(f.kind).inc()
            elif self._reported_invalid.get(f"{f.kind}/{f.name}") != text:
                log.warning("%s %s: %s", f.kind, f.name, text)
            self._reported_invalid[f"{f.kind}/{f.name}"] = text

    def _report_queues(self, result: CycleResult, bad: dict[str, list[str]], now: float, iso: str) -> None:
        children: dict[str, list[str]] = defaultdict(list)
        with self.cache.lock:
            entries = dict(self.cache.queues)
        for name, q in entries.items():
            if q.queue is not None and q.queue.parent:
                children[q.queue.parent].append(name)
        for name in [n for n in self._queue_fields_checked if n not in entries]:
            del self._queue_fields_checked[name]
        for name, q in entries.items():
            self._check_queue_fields(name, q.raw)
            qs = result.queues.get(name)
            body: dict[str, Any] = st.queue_status(qs, children.get(name, [])) if qs is not None else {}
            body.update(st.queue_validity(q.raw.get("status"), bad.get(name, []), iso))
            if self.usage is not None:
                top_level = q.queue is not None and not q.queue.parent
                ledger = self.usage.ledger_status(name, top_level)
                if ledger is not None:
                    body[LEDGER_FIELD] = ledger
            body, compare = queue_status_to_send(self.pruned, body)
            last = self._queue_written.get(name)
            if last is not None and last[0] == compare:
                continue
            if last is None and _queue_status_matches(q.raw.get("status"), compare):
                self._queue_written[name] = (compare, now)
                continue
            invalid_now = name in bad and (last is None or last[0].get("valid") != compare["valid"])
            delay = 0.0 if last is None or invalid_now else max(0.0, self.config.status_interval - (now - last[1]))
            self._queue_written[name] = (compare, now + delay)
            self.writer.submit(f"qstatus/{name}", partial(self._write_queue_status, name, body), STATUS_PRIORITY, delay)
            if invalid_now:
                self.events.emit(kai_object_ref("Queue", q.raw), WARNING, "InvalidQueue", "; ".join(bad[name]))
                self.metrics.findings.labels("Queue").inc()

    def _check_queue_fields(self, name: str, raw: dict[str, Any]) -> None:
        """One Warning Event per version of a Queue naming its unknown fields (kept by the object, or pruned by the
        API server but remembered by kubectl's last-applied annotation)."""
        meta = raw.get("metadata") or {}
        version = (meta.get("uid"), meta.get("generation"), (meta.get("annotations") or {}).get(LAST_APPLIED))
        if self._queue_fields_checked.get(name) == version:
            return
        self._queue_fields_checked[name] = version
        unknown = object_unknown_fields(raw, "Queue")
        if unknown:
            self.metrics.findings.labels("Queue").inc()
            text = f"{'; '.join(map(str, unknown))}; ignored by kai-ray"
            self.events.emit(kai_object_ref("Queue", raw), WARNING, "UnknownField", text)

    def _write_queue_status(self, name: str, body: dict[str, Any]) -> None:
        self._patch_status("Queue", queues_path(name), name, {"status": body})

    def _patch_status(self, kind: str, path: str, name: str, sent: dict[str, Any]) -> dict[str, Any] | None:
        """Merge-patch a status subresource: the stored object, or None when the write failed (counted, and logged
        unless the object is gone). A field the installed CRD prunes is reported once, on the first object."""
        try:
            stored = self.kube.merge_patch(path + "/status", sent)
            self.metrics.status_writes.labels(kind.lower(), "ok").inc()
        except ApiError as exc:
            self.metrics.status_writes.labels(kind.lower(), "error").inc()
            if not exc.not_found:
                log.info("status of %s %s: %s", kind, name, exc)
            return None
        if self.pruned.check(kind, sent, stored, f"{kind} {name}"):
            self._report_pruned(kai_object_ref(kind, stored), kind)
        return stored

    def _report_pruned(self, ref: dict[str, Any], kind: str) -> None:
        """One Warning Event on the object where a field was first seen pruned (the log line is the guard's)."""
        fields = ", ".join(sorted(self.pruned.known(kind)))
        self.events.emit(
            ref,
            WARNING,
            "StatusFieldsNotStored",
            f"the installed {kind} CRD does not store {fields}; kai-ray no longer writes them "
            "(install kai-ray's CRDs from helm/kai-ray/crds to keep them)",
        )

    def _queue_metrics(self, view: SnapshotView, result: CycleResult, verdicts: dict[str, JobStatus]) -> None:
        """KAI's per-queue gauges and kai-ray's pending counts; a parent queue's counts include its children's."""
        m = self.metrics
        with self.cache.lock:
            entries = {name: q.model for name, q in self.cache.queues.items() if q.model is not None}
        parents = {name: q.spec.parent_queue for name, q in entries.items()}
        pending_groups: dict[str, int] = defaultdict(int)
        pending_pods: dict[str, int] = defaultdict(int)
        for job in view.snapshot.jobs:
            waiting = sum(1 for pod in job.pods if pod.phase is PodPhase.PENDING)
            verdict = verdicts.get(job.key)
            gang_waiting = verdict is not None and not verdict.scheduled
            seen: set[str] = set()
            q: str | None = job.queue
            while q and q in entries and q not in seen:
                seen.add(q)
                pending_pods[q] += waiting
                pending_groups[q] += int(gang_waiting)
                q = parents.get(q)
        series = m.queue_series
        for name, model in entries.items():
            display = model.spec.display_name or ""
            controller = (name, name, display)
            scheduler = (display or name, name, display)
            res = model.spec.resources
            series.set(m.queue_info, controller, 1)
            if res is not None:
                series.set(m.queue_deserved_gpus, controller, res.gpu.quota)
                series.set(
                    m.queue_quota_cpu, controller, res.cpu.quota if res.cpu.quota == -1 else res.cpu.quota / 1000
                )
                mem = res.memory.quota
                series.set(m.queue_quota_memory, controller, mem if mem == -1 else mem * 1e6)
            qs = result.queues.get(name)
            if qs is not None:
                series.set(m.queue_allocated_gpus, controller, round(qs.allocated.get("gpu", 0.0), 4))
                series.set(m.queue_allocated_cpu, controller, round(qs.allocated.get("cpu", 0.0) / 1000, 4))
                series.set(m.queue_allocated_memory, controller, round(qs.allocated.get("memory", 0.0), 4))
                series.set(m.fair_share_gpu, scheduler, qs.fair_share.get("gpu", 0.0))
                series.set(m.fair_share_cpu, scheduler, qs.fair_share.get("cpu", 0.0) / 1000)
                series.set(m.fair_share_memory, scheduler, qs.fair_share.get("memory", 0.0) / 1e9)
            series.set(m.queue_pending_podgroups, (name,), pending_groups.get(name, 0))
            series.set(m.queue_pending_pods, (name,), pending_pods.get(name, 0))
        series.commit()

    def annotate_pg(self, job: str, annotations: dict[str, str | None]) -> None:
        key, work = self.annotation_work(job, annotations)
        self.writer.submit(key, work, priority=STATUS_PRIORITY)

    def annotation_work(self, job: str, annotations: dict[str, str | None]) -> tuple[str, Callable[[], None]]:
        """A merge patch of PodGroup annotations (``None`` removes one)."""
        ns, _, name = job.partition("/")

        def work() -> None:
            try:
                self.kube.merge_patch(podgroups_path(ns, name), {"metadata": {"annotations": annotations}})
            except ApiError as exc:
                if not exc.not_found:
                    log.info("annotate PodGroup %s: %s", job, exc)

        return f"pgmeta/{job}/{','.join(annotations)}", work

    @property
    def status_copies(self) -> int:
        """Our own PodGroup status writes held because the watch has not brought them back yet."""
        with self._status_lock:
            return len(self._status_written)

    def watched_podgroup(self, job: str, obj: dict[str, Any]) -> None:
        """The PodGroup watch delivered ``obj``: once it has caught up with our last status write, that write's copy
        is no longer needed (at 40,000 PodGroups the copies were tens of MiB)."""
        with self._status_lock:
            mine = self._status_written.get(job)
            if mine is not None and mine[0] <= resource_version(obj):
                del self._status_written[job]

    def _current_pg_status(self, job: str, raw: dict[str, Any] | None) -> dict[str, Any]:
        """The freshest status we know: the watched object's, or our own last write if the watch lags behind it."""
        raw_status = dict((raw or {}).get("status") or {})
        with self._status_lock:
            mine = self._status_written.get(job)
        if mine is not None and mine[0] > resource_version(raw):
            return dict(mine[1])
        return raw_status

    def write_pg_verdict(self, job: str, verdict: JobStatus, iso: str) -> None:
        """Queue a verdict's status (``Scheduled``, ``phase``, ``schedulingConditions``); its body is built when
        it is written, on the freshest status then known. A newer verdict queued meanwhile replaces it."""
        with self._status_lock:
            self._verdict_pending[job] = (verdict, iso)
        self._submit_flush(job)

    def write_pg_status(self, job: str, status: dict[str, Any]) -> None:
        """Queue a status change. Changes to one PodGroup accumulate until written (conditions by type), and the
        write merges them onto the freshest known conditions, since a merge patch replaces the whole list."""
        with self._status_lock:
            pending = self._status_pending.setdefault(job, {})
            for k, v in status.items():
                if k == "conditions":
                    by_type = {cond["type"]: cond for cond in pending.get("conditions") or []}
                    by_type.update({cond["type"]: cond for cond in v})
                    pending["conditions"] = list(by_type.values())
                else:
                    pending[k] = v
        self._submit_flush(job)

    def _submit_flush(self, job: str) -> None:
        """One write per PodGroup at a time, and at most one per ``STATUS_COALESCE``: a change soon after a write
        waits for the rest of that time, and every change queued meanwhile goes out with it."""
        with self._status_lock:
            sent = self._status_sent_at.get(job)
        delay = 0.0 if sent is None else max(0.0, sent + STATUS_COALESCE - time.monotonic())
        self.writer.submit(f"pgstatus/{job}", partial(self._flush_pg_status, job), STATUS_PRIORITY, delay)

    def _flush_pg_status(self, job: str) -> None:
        with self._status_lock:
            pending = self._status_pending.pop(job, None) or {}
            verdict = self._verdict_pending.pop(job, None)
        if not pending and verdict is None:
            return
        pg = self.cache.pgs.get(job)
        current = self._current_pg_status(job, pg.raw if pg is not None else None)
        if verdict is not None:
            v, iso = verdict
            body = st.podgroup_status(current, v, iso, node_pool=self.config.node_pool or st.NODE_POOL)
            extra = pending.pop("conditions", [])
            pending = {**body, **pending}
            if extra:
                pending["conditions"] = [*body["conditions"], *extra]
        if "conditions" in pending:
            by_type = {cond.get("type"): cond for cond in current.get("conditions") or []}
            by_type.update({cond["type"]: cond for cond in pending["conditions"]})
            pending["conditions"] = sorted(by_type.values(), key=lambda cond: str(cond.get("type")))
        if st.status_says(current, pending):
            self.metrics.status_writes.labels("podgroup", "unchanged").inc()
            return  # the stored status says it already (our last write, the previous leader's)
        ns, _, name = job.partition("/")
        sent = self.pruned.strip("PodGroup", {"status": pending})
        with self._status_lock:
            self._status_sent_at[job] = time.monotonic()
        updated = self._patch_status("PodGroup", podgroups_path(ns, name), job, sent)
        if updated is None:
            return
        rv = resource_version(updated)
        with self._status_lock:
            self._status_written[job] = (rv, dict(updated.get("status") or {}))
        pg = self.cache.pgs.get(job)
        if pg is not None:  # the watch may have brought this write back before it was recorded here
            self.watched_podgroup(job, pg.raw)


def queue_status_to_send(pruned: PruneGuard, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Queue's status without what the installed CRD prunes, and the part compared with the last write.

    A CRD may prune any of it, ``conditions`` or the whole ``status`` included (a Queue CRD without a status schema):
    then there is less to write, never an error in the cycle."""
    sent = pruned.strip("Queue", {"status": body}).get("status", {})
    compare = {k: v for k, v in sent.items() if k != "conditions"}
    compare["valid"] = [
        (cond.get("status"), cond.get("message")) for cond in sent.get("conditions", []) if cond.get("type") == "Valid"
    ]
    return sent, compare


def _condition(status: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for cond in (status or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


def _queue_status_matches(current: dict[str, Any] | None, compare: dict[str, Any]) -> bool:
    if not current:
        return False
    for k, v in compare.items():
        if k == "valid":
            cond = _condition(current, "Valid")
            if cond is None or [(cond.get("status"), cond.get("message"))] != v:
                return False
        elif current.get(k) != v:
            return False
    return True


def ray_owner_ref(raw: dict[str, Any]) -> dict[str, Any] | None:
    """An Event's ``involvedObject`` for the Ray object that owns a PodGroup, or None."""
    meta = raw.get("metadata") or {}
    owner = next(iter(meta.get("ownerReferences") or []), None)
    if owner is None or owner.get("kind") not in ("RayCluster", "RayJob", "RayService"):
        return None
    return {
        "apiVersion": owner.get("apiVersion", "ray.io/v1"),
        "kind": owner["kind"],
        "name": owner.get("name", ""),
        "namespace": meta.get("namespace", ""),
        "uid": owner.get("uid", ""),
    }


def pod_ref(p: PodEntry) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "name": p.name, "namespace": p.namespace, "uid": p.uid}


API_VERSIONS = {"PodGroup": "scheduling.run.ai/v2alpha2", "Queue": "scheduling.run.ai/v2"}


def kai_object_ref(kind: str, raw: dict[str, Any]) -> dict[str, Any]:
    """An Event's ``involvedObject`` for a PodGroup or a Queue (the Queue is cluster-scoped: no namespace)."""
    return object_ref(raw, API_VERSIONS[kind], kind)

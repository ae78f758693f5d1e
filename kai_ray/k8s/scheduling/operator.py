"""The scheduler/binder operator: watches -> cache -> ``run_cycle`` -> bindings, evictions, status, Events.

Flow: informers keep :class:`~kai_ray.k8s.scheduling.cache.SchedulerCache` current and wake the cycle loop on relevant
changes;
the loop waits a short debounce (so a burst of pod creations is one cycle), assembles a snapshot and runs the core,
or runs anyway every ``schedule_period`` (KAI's periodic cycle, for fair share and stale gangs). Decisions are
dispatched, never awaited: bindings go to a pool of workers through ``pods/binding``, evictions through the Eviction
API; the cache *assumes* each binding before it is sent, so the next cycle can run while bindings are in flight and
still never binds a pod twice nor gives its room away. Status and Events are written by a separate, lower-priority
pool that waits while bindings are outstanding, and are written on transitions, not every cycle.

Ray-aware by default: evictions first go through :class:`~kai_ray.k8s.ray.elastic.ElasticReclaimer` (elastic KubeRay
workers: shrink the worker group; whole gangs of ``suspend_kinds``, RayJob by default: suspend the owner), a gang that
kai-ray suspended stays in the snapshot as virtual pending pods and is resumed when the core admits it
(:mod:`kai_ray.k8s.scheduling.resume`), and the headroom the Ray autoscaler hook reads is published after cycles,
rate-limited.

Only the Lease holder runs cycles; informers run on every replica so a new leader starts warm, but it lists again
before its first cycle so it sees every binding of the previous leader.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

from kai_ray import constants as c
from kai_ray.api.podgroup import PodGroup
from kai_ray.api.strict import LAST_APPLIED, object_unknown_fields
from kai_ray.bridge import parse_time
from kai_ray.k8s.base.events import NORMAL, WARNING, EventRecorder
from kai_ray.k8s.base.informer import Informer, wait_all_synced
from kai_ray.k8s.base.isolate import Guard, Quarantine
from kai_ray.k8s.base.leader import LeaderElector, LeaseConfig
from kai_ray.k8s.base.metrics import SchedulerMetrics
from kai_ray.k8s.base.pruning import PruneGuard
from kai_ray.k8s.base.rest import ApiError, Kube, podgroups_path, pods_path, queues_path
from kai_ray.k8s.base.workqueue import Dispatcher
from kai_ray.k8s.config import OperatorConfig
from kai_ray.k8s.ray.elastic import FALLBACK_CODES, ElasticReclaimer, HeadroomPublisher, ReclaimRecord, ray_owner
from kai_ray.k8s.scheduling import status as st
from kai_ray.k8s.scheduling.cache import PodEntry, SchedulerCache, SnapshotView, slim_pod
from kai_ray.k8s.scheduling.resume import SuspendedGangs, is_virtual
from kai_ray.k8s.scheduling.usage import LEDGER_FIELD, capacity_of, make_source
from kai_ray.podgrouper import PodgrouperConfig
from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.decisions import CycleResult, Evict, JobStatus, Reason
from kai_ray.scheduler.snapshot import PodPhase, SchedulerConfig

log = logging.getLogger(__name__)

COMPONENT = "kai-scheduler"
BIND_PRIORITY = 0
EVICT_PRIORITY = 1
STATUS_PRIORITY = 10
PENDING_REPORT_DELAY = 1.0  # a pending verdict is written once it has lasted this long (transients are not)
REPORT_INTERVAL = 1.0  # seconds between two status reports while bindings are being dispatched
IDLE_RESYNC = 30.0  # seconds between cycles when every gang is scheduled and nothing changes
WRITE_HOLDOFF = 0.5  # seconds after the last binding was dispatched before status/Event writes resume

# (victims) -> victims not handled. Lets Ray-aware strategies (shrink a worker group, suspend an owner) take over
# some evictions before the remaining pods are evicted one by one.
EvictionInterceptor = Callable[[list[tuple[PodEntry, Evict]]], list[tuple[PodEntry, Evict]]]


def _iso(ts: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if ts is None else ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Verdict:
    scheduled: bool
    reason: str
    message: str
    written_at: float
    first_seen: float


class SchedulerOperator:
    """One scheduler replica. ``start()`` returns at once; ``stop()`` ends every thread it started."""

    def __init__(self, config: OperatorConfig, kube: Kube | None = None) -> None:
        self.config = config.validate()
        self._owns_kube = kube is None
        self.kube = kube or Kube.connect(
            config.kubeconfig, config.context, pool_size=config.bind_workers + config.write_workers + 12
        )
        self.metrics = SchedulerMetrics()
        self.cache = SchedulerCache(config, on_change=self.wake)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._leading = threading.Event()
        self._loop_thread: threading.Thread | None = None
        self.binder = Dispatcher("binder", config.bind_workers)
        self.writer = Dispatcher("writer", config.write_workers, gate=self._writes_may_go, gate_max_wait=1.0)
        self._last_bind_dispatch = 0.0
        self.events = EventRecorder(self.kube, COMPONENT, config.identity, self.writer)
        self.eviction_interceptors: list[EvictionInterceptor] = []
        self.reclaimer: ElasticReclaimer | None = None
        if config.elastic_reclaim or config.suspend_kinds:
            self.reclaimer = ElasticReclaimer(
                self.kube,
                shrink=config.elastic_reclaim,
                suspend_kinds=config.suspend_kinds,
                gcs_address="auto" if config.drain_deadline > 0 else None,
                drain_deadline_s=config.drain_deadline,
                fallback=self._evict,
                labels_of=self._cached_labels,
                owner_of=self._cached_owner,
                release=lambda p: self.cache.unmark_evicting(p.key),
                on_record=self._count_reclaim,
            )
            self.eviction_interceptors.append(self.reclaimer)
        self.gangs: SuspendedGangs | None = None
        if config.suspend_kinds or config.headroom_interval > 0:
            self.gangs = SuspendedGangs(
                self.kube,
                self.cache,
                kinds=config.suspend_kinds,
                namespaces=config.namespaces,
                grouper_config=PodgrouperConfig(
                    scheduler_name=config.scheduler_name,
                    queue_label_key=config.queue_label_key,
                    max_gang_pods=config.max_gang_pods,
                ),
                submit=lambda key, work: self.binder.submit(key, work, priority=EVICT_PRIORITY),
                wake=self.wake,
                is_leader=self.is_leader,
            )
        self.headroom: HeadroomPublisher | None = None
        if config.headroom_interval > 0:
            self.headroom = HeadroomPublisher(
                self.kube,
                config.headroom_interval,
                lambda key, work: self.writer.submit(key, work, priority=STATUS_PRIORITY),
                templates=self.gangs.probe_templates if self.gangs is not None else None,
            )
        self.informers = self._informers()
        # time-based fair share: the usage source (None: off, KAI's default)
        self.usage = make_source(config.usage_db, config.usage_params(), config.usage_db_url, config.usage_extra_params)
        self.elector: LeaderElector | None = None
        if config.leader_elect:
            name, ns = config.lease("scheduler")
            self.elector = LeaderElector(
                self.kube,
                LeaseConfig(
                    name, ns, config.identity, config.lease_duration, config.renew_deadline, config.retry_period
                ),
                on_start=self._on_elected,
                on_stop=self._on_deposed,
            )
        self._verdicts: dict[str, _Verdict] = {}
        self._status_lock = threading.Lock()
        self._status_pending: dict[str, dict[str, Any]] = {}
        self._status_written: dict[str, tuple[int, dict[str, Any]]] = {}  # PodGroup -> (resourceVersion, status)
        self.pruned = PruneGuard()  # status fields the installed CRDs do not store (KAI's: Queue status.fairShare)
        self._queue_written: dict[str, tuple[dict[str, Any], float]] = {}
        self._reported_invalid: dict[str, str] = {}
        self._queue_fields_checked: dict[str, tuple[Any, ...]] = {}  # Queue -> the version whose fields were checked
        self._gangs_binding: dict[str, list[Any]] = {}  # job -> [binds left, PodGroup uid, created, queue]
        self._scheduled_once: dict[str, str] = {}  # job -> uid of the PodGroup whose time-to-schedule was observed
        self._made_room: dict[str, str] = {}  # job -> the action that evicted for it (until it starts)
        self._victim_queues: dict[str, str] = {}  # pod key -> queue, while a Ray-aware reclaim handles it
        self.last_cycle: float = 0.0
        self._last_cycle_seconds = 0.0
        self._last_report = 0.0
        self.last_result: CycleResult | None = None
        self.quarantine = Quarantine(run_cycle, log, version=self._job_version)
        self.guard = Guard("reporting", log)
        self._awaited_victims: set[str] = set()  # pods evicted for pipelined gangs, until they are gone
        self.cycles = 0
        self.started_at = time.monotonic()

    # --- wiring -----------------------------------------------------------------------------------------------

    def _informers(self) -> list[Informer]:
        cfg = self.config
        node_sel = ",".join(f"{k}={v}" for k, v in sorted(cfg.node_selector.items())) or None
        infs = [
            Informer(self.kube, "/api/v1/nodes", name="nodes", handler=self.cache.on_node, label_selector=node_sel),
            Informer(
                self.kube,
                "/apis/scheduling.k8s.io/v1/priorityclasses",
                name="priorityclasses",
                handler=self.cache.on_priority_class,
            ),
            Informer(self.kube, queues_path(), name="queues", handler=self.cache.on_queue, missing_ok=True),
            Informer(self.kube, pods_path(), name="pods", handler=self.cache.on_pod, transform=slim_pod),
        ]
        for ns in cfg.namespaces or (None,):
            infs.append(
                Informer(
                    self.kube,
                    podgroups_path(ns),
                    name=f"podgroups-{ns or 'all'}",
                    handler=self.cache.on_podgroup,
                    missing_ok=True,
                )
            )
        if self.gangs is not None:
            infs.extend(self.gangs.informers)
        return infs

    def start(self) -> SchedulerOperator:
        self.metrics.serve(self.config.metrics_port, self.config.bind_address)
        for inf in self.informers:
            inf.start()
        self.binder.start()
        self.writer.start()
        if self.usage is not None:
            self.usage.start()
        self._loop_thread = threading.Thread(target=self._loop, name="scheduler-loop", daemon=True)
        self._loop_thread.start()
        if self.elector is not None:
            self.elector.start()
        else:
            threading.Thread(target=self._on_elected, name="scheduler-start", daemon=True).start()
        return self

    def stop(self, release: bool = True) -> None:
        """Stop everything. ``release=False`` keeps the Lease (what a crash looks like to the other replicas)."""
        self._stop.set()
        self._leading.clear()
        self._wake.set()
        if self.elector is not None:
            self.elector.stop(release=release)
        if self._loop_thread is not None:
            self._loop_thread.join(10)
        self.binder.stop()
        self.writer.stop()
        if self.usage is not None:
            self.usage.stop()
        if self.reclaimer is not None:
            self.reclaimer.close(wait=False)
        for inf in self.informers:
            inf.stop()
        if self._owns_kube:
            self.kube.reachability.close()  # its prober, if the server was unreachable
        self.metrics.close()

    def _writes_may_go(self) -> bool:
        """Status and Events wait while bindings are being sent (a burst of arrivals is scheduled first)."""
        return not self.binder.busy() and time.monotonic() - self._last_bind_dispatch > WRITE_HOLDOFF

    def wake(self) -> None:
        self._wake.set()

    def is_leader(self) -> bool:
        return self._leading.is_set()

    def synced(self) -> bool:
        return all(inf.synced.is_set() for inf in self.informers)

    def health(self) -> dict[str, Any]:
        """For the liveness probe: raises when the loop is stuck while leading."""
        age = time.monotonic() - self.last_cycle if self.last_cycle else None
        info = {"leader": self.is_leader(), "synced": self.synced(), "cycles": self.cycles, "last_cycle_age": age}
        limit = 30.0 + 10 * self.config.schedule_period
        if self.is_leader() and age is not None and age > limit:
            raise RuntimeError(f"no scheduling cycle for {age:.0f}s")
        return info

    def _on_elected(self) -> None:
        def begin() -> None:
            if not wait_all_synced(self.informers, self._stop):
                return
            if self.elector is not None:
                # See every write of the previous leader before acting (its watch events may still be in flight).
                for inf in self.informers:
                    if inf.name == "pods" or inf.name.startswith("podgroups"):
                        while not inf.relist(30.0):
                            if self._stop.is_set() or not self.elector.is_leader():
                                return
                            log.warning("%s: fresh list after election is taking long; still waiting", inf.name)
            if self._stop.is_set() or (self.elector is not None and not self.elector.is_leader()):
                return
            self._leading.set()
            self.metrics.leader.labels("scheduler").set(1)
            self.metrics.leader_transitions.labels("scheduler").inc()
            log.info("scheduling as %s", self.config.identity)
            self.wake()

        threading.Thread(target=begin, name="scheduler-elected", daemon=True).start()

    def _on_deposed(self) -> None:
        self._leading.clear()
        self.metrics.leader.labels("scheduler").set(0)
        self.cache.clear_overlays()
        if self.gangs is not None:
            self.gangs.clear()
        if self.headroom is not None:
            self.headroom.forget()
        if self.usage is not None:
            self.usage.forget()
        log.warning("no longer leader: scheduling stopped")

    # --- the loop -----------------------------------------------------------------------------------------------

    def core_config(self) -> SchedulerConfig:
        cfg = self.config
        return SchedulerConfig(
            placement_gpu=cfg.placement_strategy,
            placement_cpu=cfg.placement_strategy,
            queue_priority_in_quota_reclaim=cfg.queue_priority_reclaim,
            default_preemption_delay=cfg.preemption_delay,
            k_value=cfg.k_value,
        )

    def _loop(self) -> None:
        while not self._stop.is_set():
            woke = self._wake.wait(self._period())
            if self._stop.is_set():
                break
            if woke:
                self._settle()
            self._wake.clear()
            if not self._leading.is_set():
                continue
            try:
                self.run_once()
            except Exception:
                log.exception("scheduling cycle failed; next cycle continues")

    def _job_version(self, key: str) -> Any:
        """What a quarantined job must change to be tried again: its PodGroup or its set of pods."""
        with self.cache.lock:
            pg = self.cache.pgs.get(key)
            members = self.cache.members.get(key) or {}
            return (pg.sig if pg is not None else None, tuple(sorted((p.key, p.sig) for p in members.values())))

    def _settle(self) -> None:
        """Coalesce a burst of changes before a cycle, without delaying a lone change.

        The cycle starts once changes have paused for ``debounce`` and at least one cycle's length has passed since
        the last cycle ended (so cycles take at most half of the time while changes trickle in), and at the latest
        ``max(debounce, 3 x cycle)`` after the wake-up (a steady stream of arrivals: cycles take a quarter of the
        time). A gang that arrives alone, or the last victim of a preemption going, is thus acted on within about
        ``debounce`` instead of after three cycle lengths.
        """
        now = time.monotonic()
        deadline = now + max(self.config.debounce, 3 * self._last_cycle_seconds)
        earliest = self.last_cycle + self._last_cycle_seconds
        while not self._stop.is_set():
            self._wake.clear()
            now = time.monotonic()
            if now >= deadline or self._victims_gone():
                return
            quiet = not self._wake.wait(min(self.config.debounce, deadline - now))
            if quiet and time.monotonic() >= earliest:
                return

    def _victims_gone(self) -> bool:
        """True once every pod evicted for a pipelined gang has left the cache: that gang can be bound now."""
        if not self._awaited_victims:
            return False
        with self.cache.lock:
            if any(key in self.cache.pods for key in self._awaited_victims):
                return False
        self._awaited_victims = set()
        return True

    def _period(self) -> float:
        """Seconds until the next periodic cycle when nothing changes.

        KAI's periodic cycle re-evaluates pending gangs (preemption delays and minimum runtimes expire with time);
        when every gang is scheduled and the last cycle decided nothing, only a change can alter the outcome, so
        the loop then only wakes for changes (and a slow safety resync). A cycle never takes more than ~20% of the
        time when nothing changes.
        """
        r = self.last_result
        busy = r is None or r.binds or r.evictions or any(not j.scheduled for j in r.jobs.values())
        if not busy:
            return IDLE_RESYNC
        return max(self.config.schedule_period, 4 * self._last_cycle_seconds)

    def run_once(self) -> CycleResult:
        t0 = time.perf_counter()
        leading = self._leading.is_set()
        virtual = self.gangs.virtual_pods() if self.gangs is not None and leading else {}
        view = self.cache.build(self.core_config(), extra=virtual)
        if self.usage is not None and leading:
            with self.cache.lock:
                statuses = {name: q.raw.get("status") or {} for name, q in self.cache.queues.items()}
            view.snapshot.usage = self.usage.before_cycle(time.time(), statuses)
        t1 = time.perf_counter()
        result = self.quarantine.run(view.snapshot)
        t2 = time.perf_counter()
        t3 = t2
        if self._leading.is_set():
            if self.usage is not None:
                with self.cache.lock:
                    capacity = capacity_of(self.cache.nodes)
                self.usage.after_cycle(time.time(), capacity, result)
            self._dispatch_binds(view, result)
            self._dispatch_evictions(view, result)
            if virtual and self.gangs is not None:
                self.gangs.after_cycle(result, virtual)
            t3 = time.perf_counter()
            # During a burst of bindings, status and Events (which wait for the burst anyway) are worked out at
            # most once a second; every other cycle reports at once.
            if not result.binds or time.monotonic() - self._last_report >= REPORT_INTERVAL:
                self._report(view, result)
                self._last_report = time.monotonic()
            if self.headroom is not None and self.headroom.due():
                try:
                    self.headroom.maybe_publish(view.snapshot)
                except Exception:
                    log.exception("computing the headroom failed; the next publication retries")
        t4 = time.perf_counter()
        self.cycles += 1
        self.last_cycle = time.monotonic()
        self._last_cycle_seconds = t4 - t0
        self.last_result = result
        m = self.metrics
        m.cycles.inc()
        m.core_seconds.observe(t2 - t1)
        m.cycle_seconds.observe(t4 - t0)
        for phase, dt in (("snapshot", t1 - t0), ("core", t2 - t1), ("dispatch", t3 - t2), ("report", t4 - t3)):
            m.phase_seconds.labels(phase).inc(dt)
        m.pending_pods.set(max(0, view.pending - len(result.binds)))
        m.inflight_binds.set(self.cache.inflight())
        m.e2e_latency.set(1000 * (t4 - t0))
        m.open_session_latency.set(1000 * result.stats.get("open_seconds", 0.0))
        for action in view.snapshot.config.actions:
            took = result.stats.get(f"{action}_seconds")
            if took is not None:
                m.action_latency.labels(action).set(1000 * took)
        return result

    # --- bindings -----------------------------------------------------------------------------------------------

    def _dispatch_binds(self, view: SnapshotView, result: CycleResult) -> None:
        wanted: list[tuple[PodEntry, str, str]] = []
        for b in result.binds:
            if b.pipelined or is_virtual(b.pod):
                continue  # waits for its victims to go, or does not exist yet (a suspended gang's)
            p = view.pods_by_uid.get(b.pod)
            if p is None:
                self.metrics.binds.labels("skipped").inc()
                continue
            wanted.append((p, b.node, b.job))
        if not wanted:
            return
        ok = self.cache.assume_many([(p.key, p.uid, node) for p, node, _ in wanted])
        work: list[tuple[str, Callable[[], None]]] = []
        started: dict[str, int] = defaultdict(int)
        for (p, node, job), assumed in zip(wanted, ok, strict=True):
            if not assumed:
                self.metrics.binds.labels("skipped").inc()  # already bound or in flight: never bind twice
                continue
            if view.active_before.get(job, 0) == 0:
                started[job] += 1
            work.append((f"bind/{p.key}", partial(self._bind, p, node)))
        for job, n in started.items():
            self._gang_starting(job, n)
        self._last_bind_dispatch = time.monotonic()
        self.binder.submit_many(work, priority=BIND_PRIORITY)
        stamp: dict[str, str | None] = {c.LAST_START: _iso()}
        self.writer.submit_many([self._annotation_work(job, stamp) for job in started], priority=STATUS_PRIORITY)

    def _bind(self, p: PodEntry, node: str) -> None:
        if not self._leading.is_set():
            self.cache.forget(p.key, p.uid)
            self.metrics.binds.labels("not_leader").inc()
            return
        t0 = time.time()
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
        self.events.emit(_pod_ref(p), NORMAL, "Scheduled", f"Successfully assigned {p.key} to {node}")

    # --- per-queue metrics -------------------------------------------------------------------------------------

    def _queue_of(self, job: str) -> str:
        pg = self.cache.pgs.get(job)
        return (pg.model.spec.queue or c.DEFAULT_QUEUE) if pg is not None and pg.model is not None else ""

    def _gang_starting(self, job: str, binds: int) -> None:
        """A gang with no pod running got its bindings: count it (KAI's scheduled-by-action) and, the first time
        for this PodGroup, time it from creation until every one of these bindings succeeded."""
        self.metrics.podgroups_scheduled.inc(self._made_room.pop(job, "allocate"))
        pg = self.cache.pgs.get(job)
        created = parse_time((pg.raw.get("metadata") or {}).get("creationTimestamp")) if pg is not None else None
        if pg is None or created is None:
            return
        queue = self._queue_of(job)
        with self._status_lock:
            if self._scheduled_once.get(job) != pg.uid:
                self._gangs_binding[job] = [binds, pg.uid, created, queue]

    def _gang_bound(self, job: str | None, ok: bool) -> None:
        if job is None:
            return
        with self._status_lock:
            entry = self._gangs_binding.get(job)
            if entry is None:
                return
            if not ok:
                del self._gangs_binding[job]  # the next cycle binds the gang again, and times it then
                return
            entry[0] -= 1
            if entry[0] > 0:
                return
            del self._gangs_binding[job]
            self._scheduled_once[job] = entry[1]
        self.metrics.time_to_schedule.labels(entry[3]).observe(max(0.0, time.time() - entry[2]))

    def _count_reclaim(self, rec: ReclaimRecord) -> None:
        ns = rec.target.partition("/")[0]
        queues = [self._victim_queues.pop(f"{ns}/{pod}", "") for pod in rec.pods]
        queue = next((q for q in queues if q), "")
        if rec.kind == "shrink":
            fell_back = rec.code in FALLBACK_CODES or rec.code == "Error"
            result = "ok" if rec.ok else ("fallback" if fell_back else "deferred")
            self.metrics.elastic_shrinks.labels(queue, result).inc()
        else:
            self.metrics.suspends.labels(queue, "ok" if rec.ok else ("deferred" if rec.deferred else "fallback")).inc()

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

    # --- evictions ----------------------------------------------------------------------------------------------

    def _dispatch_evictions(self, view: SnapshotView, result: CycleResult) -> None:
        victims: list[tuple[PodEntry, Evict]] = []
        for e in result.evictions:
            p = view.pods_by_uid.get(e.pod)
            if p is not None and self.cache.mark_evicting(p.key, p.uid):
                victims.append((p, e))
        if not victims:
            return
        if any(b.pipelined for b in result.binds):
            self._awaited_victims.update(p.key for p, _ in victims)
        by_job: dict[str, list[Evict]] = defaultdict(list)
        by_preemptor: dict[str, int] = defaultdict(int)
        for _, e in victims:
            by_job[e.job].append(e)
            queue = self._queue_of(e.job)
            self.metrics.queue_evictions.labels(queue, e.action.value).inc()
            pg = self.cache.pgs.get(e.job)
            if pg is not None:
                self.metrics.evicted_pods.labels(pg.name, pg.namespace, pg.uid, st.NODE_POOL, e.action.value).inc()
            if e.preemptor:
                self._made_room[e.preemptor] = e.action.value
            by_preemptor[e.preemptor or "?"] += 1
        for preemptor, n in by_preemptor.items():  # the decision's timestamp (bench vs-kai reads it)
            log.info("evicting %d pods for %s", n, preemptor)
        remaining = victims
        if self.eviction_interceptors:
            for p, e in victims:
                self._victim_queues[p.key] = self._queue_of(e.job)
        for intercept in self.eviction_interceptors:
            remaining = intercept(remaining)
        for p, _ in remaining:
            self._victim_queues.pop(p.key, None)
        for p, e in remaining:
            self.binder.submit(f"evict/{p.key}", partial(self._evict, p, e), priority=EVICT_PRIORITY)
        now = _iso()
        for job, evs in by_job.items():
            pg = self.cache.pgs.get(job)
            ref = _pg_ref(pg.raw) if pg is not None else None
            if pg is not None and ref is not None:
                self._write_pg_status(job, st.evicted_status(evs, now))
                self.events.emit(ref, WARNING, evs[0].reason.value, st.eviction_message(evs))
            self._annotate_pg(job, {c.LAST_EVICTION: now})

    def _cached_labels(self, p: PodEntry) -> dict[str, str]:
        meta = p.raw[0] if p.raw else None
        return dict(meta.get("labels") or {}) if isinstance(meta, dict) else {}

    def _cached_owner(self, namespace: str, podgroup: str) -> tuple[str, str] | None:
        pg = self.cache.pgs.get(f"{namespace}/{podgroup}")
        return ray_owner(pg.raw) if pg is not None else None

    def _evict(self, p: PodEntry, e: Evict) -> None:
        if not self._leading.is_set():
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
            self.cache.unmark_evicting(p.key)
            if exc.status == 429:
                self.metrics.evictions.labels(action, "blocked").inc()
                self.events.emit(
                    _pod_ref(p), WARNING, "EvictionBlocked", f"{action} for {e.preemptor or '?'} refused: {exc.message}"
                )
            else:
                self.metrics.evictions.labels(action, "error").inc()
                log.warning("evict %s failed: %s", p.key, exc)
            return
        self.metrics.evictions.labels(action, "ok").inc()
        who = f" by {e.preemptor}" if e.preemptor else ""
        self.events.emit(_pod_ref(p), WARNING, e.reason.value, f"{e.reason.value}{who}: {e.message}".strip())

    # --- status and Events --------------------------------------------------------------------------------------

    def _annotate_pg(self, job: str, annotations: dict[str, str | None]) -> None:
        key, work = self._annotation_work(job, annotations)
        self.writer.submit(key, work, priority=STATUS_PRIORITY)

    def _annotation_work(self, job: str, annotations: dict[str, str | None]) -> tuple[str, Callable[[], None]]:
        """A merge patch of PodGroup annotations (``None`` removes one)."""
        ns, _, name = job.partition("/")

        def work() -> None:
            try:
                self.kube.merge_patch(podgroups_path(ns, name), {"metadata": {"annotations": annotations}})
            except ApiError as exc:
                if not exc.not_found:
                    log.info("annotate PodGroup %s: %s", job, exc)

        return f"pgmeta/{job}/{','.join(annotations)}", work

    def _current_pg_status(self, job: str, raw: dict[str, Any] | None) -> dict[str, Any]:
        """The freshest status we know: the watched object's, or our own last write if the watch lags behind it."""
        raw_status = dict((raw or {}).get("status") or {})
        with self._status_lock:
            mine = self._status_written.get(job)
        if mine is not None and mine[0] > _rv(raw):
            return dict(mine[1])
        return raw_status

    def _write_pg_status(self, job: str, status: dict[str, Any]) -> None:
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
        self.writer.submit(f"pgstatus/{job}", partial(self._flush_pg_status, job), priority=STATUS_PRIORITY)

    def _flush_pg_status(self, job: str) -> None:
        with self._status_lock:
            pending = self._status_pending.pop(job, None)
        if not pending:
            return
        pg = self.cache.pgs.get(job)
        if "conditions" in pending:
            current = self._current_pg_status(job, pg.raw if pg is not None else None)
            by_type = {cond.get("type"): cond for cond in current.get("conditions") or []}
            by_type.update({cond["type"]: cond for cond in pending["conditions"]})
            pending["conditions"] = sorted(by_type.values(), key=lambda cond: str(cond.get("type")))
        ns, _, name = job.partition("/")
        sent = self.pruned.strip("PodGroup", {"status": pending})
        try:
            updated = self.kube.merge_patch(podgroups_path(ns, name) + "/status", sent)
            self.metrics.status_writes.labels("podgroup", "ok").inc()
        except ApiError as exc:
            self.metrics.status_writes.labels("podgroup", "error").inc()
            if not exc.not_found:
                log.info("status of PodGroup %s: %s", job, exc)
            return
        if self.pruned.check("PodGroup", sent, updated, f"PodGroup {job}"):
            self._report_pruned(_pg_ref(updated), "PodGroup")
        with self._status_lock:
            self._status_written[job] = (_rv(updated), dict(updated.get("status") or {}))

    def _report(self, view: SnapshotView, result: CycleResult) -> None:
        now = time.monotonic()
        iso = _iso()
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
                qname = pg.model.spec.queue if pg is not None and pg.model is not None else None
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

        for key, v in verdicts.items():
            self.guard(key, self._report_job, key, v, members, now, iso, default=None)
        for key in [k for k in self._verdicts if k not in verdicts]:
            del self._verdicts[key]
            with self._status_lock:
                self._status_written.pop(key, None)
        with self._status_lock:
            for key in [k for k in self._scheduled_once if k not in verdicts]:
                del self._scheduled_once[key]
        for key in [k for k in list(self._victim_queues) if k not in self.cache.pods]:
            self._victim_queues.pop(key, None)  # a victim the reclaimer found already gone
        for key in [k for k in self._made_room if k not in verdicts]:
            del self._made_room[key]
        self._queue_metrics(view, result, verdicts)
        self._report_findings(result)
        self._report_queues(result, bad_queues, now, iso)

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
    ) -> None:
        pg = self.cache.pgs.get(key)
        if pg is None:
            return
        if "staleSince" in v.details or (pg.model is not None and c.STALE_SINCE in pg.model.metadata.annotations):
            self._persist_stale_since(key, pg.model, v)
        prev = self._verdicts.get(key)
        reason = v.reason.value
        if (
            prev is not None
            and prev.written_at > 0
            and prev.scheduled == v.scheduled
            and prev.reason == reason
            and (v.scheduled or prev.message == v.message)
        ):
            return  # the common case: nothing new to say
        same_kind = prev is not None and prev.scheduled == v.scheduled and prev.reason == reason
        first_seen = prev.first_seen if same_kind and prev is not None else now
        if prev is None or not same_kind:
            self._verdicts[key] = prev = _Verdict(v.scheduled, v.reason.value, v.message, 0.0, first_seen)
        if not v.scheduled and v.reason is not Reason.INVALID and now - first_seen < PENDING_REPORT_DELAY:
            return  # transient pending state (e.g. the pods of a new gang are still arriving)
        written = prev.written_at > 0
        if written and (
            v.scheduled or prev.message == v.message or now - prev.written_at < self.config.status_interval
        ):
            return
        prev.message = v.message
        prev.written_at = now
        current = self._current_pg_status(key, pg.raw)
        stored = _condition(current, st.SCHEDULED)
        if stored is not None and stored.get("reason") == v.reason.value and stored.get("message") == v.message:
            return  # already says so (e.g. written by the previous leader)
        self._write_pg_status(key, st.podgroup_status(current, v, iso))
        if written:
            return  # a message refresh: Events are for transitions
        ref = _pg_ref(pg.raw)
        if v.scheduled:
            if v.reason is not Reason.SCHEDULED or len(members(key)) > 1:
                self.events.emit(ref, NORMAL, v.reason.value, v.message)
        else:
            self.events.emit(ref, WARNING, "Unschedulable", f"{v.reason.value}: {v.message}")
            if v.reason is Reason.INVALID:
                self.metrics.findings.labels("PodGroup").inc()
            if pg.model is not None and pg.model.spec.mark_unschedulable:
                for p in members(key):
                    if not p.node:
                        self.events.emit(_pod_ref(p), WARNING, "Unschedulable", f"{v.reason.value}: {v.message}")

    def _persist_stale_since(self, key: str, model: PodGroup | None, v: JobStatus) -> None:
        """Keep ``kai.scheduler/stale-podgroup-timestamp`` in step with the core, which restarts the stale-gang
        clock every cycle unless the time it first saw the gang below its minimum is stored on the PodGroup."""
        if model is None:
            return
        since = v.details.get("staleSince")
        stored = model.metadata.annotations.get(c.STALE_SINCE)
        if isinstance(since, int | float) and stored is None:
            self._annotate_pg(key, {c.STALE_SINCE: _iso(float(since))})
        elif since is None and stored is not None and v.reason is not Reason.STALE_GANG:
            self._annotate_pg(key, {c.STALE_SINCE: None})

    def _report_findings(self, result: CycleResult) -> None:
        for f in result.findings:
            ref: dict[str, Any] | None = None
            if f.kind == "Queue" and f.name in self.cache.queues:
                continue  # in the Queue's Valid condition, with an Event when it changes (_report_queues)
            if f.kind == "PodGroup":
                pg = self.cache.pgs.get(f.name)
                ref = _pg_ref(pg.raw) if pg is not None else None
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
            body = self.pruned.strip("Queue", {"status": body})["status"]
            compare = {k: v for k, v in body.items() if k != "conditions"}
            compare["valid"] = [
                (cond["status"], cond["message"]) for cond in body["conditions"] if cond["type"] == "Valid"
            ]
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
                self.events.emit(_queue_ref(q.raw), WARNING, "InvalidQueue", "; ".join(bad[name]))
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
            self.events.emit(_queue_ref(raw), WARNING, "UnknownField", text)

    def _write_queue_status(self, name: str, body: dict[str, Any]) -> None:
        sent = {"status": body}
        try:
            stored = self.kube.merge_patch(queues_path(name) + "/status", sent)
            self.metrics.status_writes.labels("queue", "ok").inc()
        except ApiError as exc:
            self.metrics.status_writes.labels("queue", "error").inc()
            if not exc.not_found:
                log.info("status of Queue %s: %s", name, exc)
            return
        if self.pruned.check("Queue", sent, stored, f"Queue {name}"):
            self._report_pruned(_queue_ref(stored), "Queue")

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


def _condition(status: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for cond in (status or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


def _rv(obj: dict[str, Any] | None) -> int:
    try:
        return int(((obj or {}).get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


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


def _pod_ref(p: PodEntry) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "name": p.name, "namespace": p.namespace, "uid": p.uid}


def _pg_ref(raw: dict[str, Any]) -> dict[str, Any]:
    meta = raw.get("metadata") or {}
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "name": meta.get("name", ""),
        "namespace": meta.get("namespace", ""),
        "uid": meta.get("uid", ""),
    }


def _queue_ref(raw: dict[str, Any]) -> dict[str, Any]:
    meta = raw.get("metadata") or {}
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
    }

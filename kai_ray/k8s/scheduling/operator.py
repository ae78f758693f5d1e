"""The scheduler/binder operator: watches -> cache -> ``run_cycle`` -> bindings, evictions, status, Events.

:mod:`~kai_ray.k8s.scheduling.assembly` builds the parts of one replica; this module runs them (informers, leader
election, the cycle loop). The work after a cycle has two parts of its own:
:mod:`~kai_ray.k8s.scheduling.dispatch` sends the decisions (bindings, evictions) and
:mod:`~kai_ray.k8s.scheduling.reporting` says what they mean (PodGroup and Queue status, Events, metrics).

Flow: informers keep :class:`~kai_ray.k8s.scheduling.cache.SchedulerCache` current and wake the cycle loop on relevant
changes; the loop waits a short debounce (so a burst of pod creations is one cycle), assembles a snapshot and runs
the core, or runs anyway every ``schedule_period`` (KAI's periodic cycle, for fair share and stale gangs). Decisions
are dispatched, never awaited: bindings go to a pool of workers through ``pods/binding``, evictions through the
Eviction API; the cache *assumes* each binding before it is sent, so the next cycle can run while bindings are in
flight. Status and Events are written by a separate, lower-priority pool that waits while bindings are outstanding,
and are written on transitions, not every cycle.

Ray-aware by default: evictions first go the Ray path, :class:`~kai_ray.k8s.ray.ray_reclaim.RayReclaim` (elastic KubeRay
workers: shrink the worker group; whole gangs of ``suspend_kinds``, RayJob by default: suspend the owner), a gang that
kai-ray suspended stays in the snapshot as virtual pending pods and is resumed when the core admits it
(:mod:`kai_ray.k8s.scheduling.resume`), and the headroom the Ray autoscaler hook reads is published after cycles,
rate-limited.

Only the Lease holder runs cycles; informers run on every replica, so a follower's cache is as current as the
leader's and a new leader schedules at once (warm standby). It must still have seen every binding of the previous
leader before it binds: a leader stopped gracefully stops its loop, waits for its bindings to be answered and to come
back through its own watch, and releases the Lease with the pods resourceVersion it has seen; the new leader waits
until its own pods watch has reached that version (milliseconds; both watch the same stream). A leader that crashed
is replaced only after its Lease expired, long after its last binding reached every watch. Only an informer whose
watch is not open, or a release without that note, makes the new leader list again before its first cycle.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Sequence
from functools import partial
from typing import Any

from kai_ray.k8s.base.collector import CycleFreeze, collector_paused
from kai_ray.k8s.base.informer import DELETE, Informer, wait_all_synced
from kai_ray.k8s.base.leader import HANDOVER_PREFIX, LeaderElector, LeaseConfig
from kai_ray.k8s.base.rest import Kube, podgroups_path, pods_path, queues_path
from kai_ray.k8s.config import OperatorConfig
from kai_ray.k8s.scheduling import dra_claims, upstream_gangs
from kai_ray.k8s.scheduling.assembly import SchedulerParts, assemble
from kai_ray.k8s.scheduling.cyclemetrics import record_cycle
from kai_ray.k8s.scheduling.dispatch import EVICT_PRIORITY
from kai_ray.k8s.scheduling.entries import SnapshotView
from kai_ray.k8s.scheduling.podcondition import UnschedulableMarker
from kai_ray.k8s.scheduling.reporting import STATUS_PRIORITY
from kai_ray.k8s.scheduling.ungate import Ungater
from kai_ray.k8s.scheduling.watched import kept_node, kept_pod, kept_podgroup
from kai_ray.k8s.usagedb import capacity_of
from kai_ray.scheduler.decisions import CycleResult, Reason
from kai_ray.scheduler.snapshot import SchedulerConfig, Snapshot

log = logging.getLogger(__name__)

REPORT_INTERVAL = 1.0  # seconds between two status reports while bindings are being dispatched
IDLE_RESYNC = 30.0  # seconds between cycles when every gang is scheduled and nothing changes
HANDOVER_PODS_RV = HANDOVER_PREFIX + "pods-resource-version"
FOLLOWER_BUILD_PERIOD = 1.0  # seconds between two snapshot builds of a follower (keeps the incremental build warm)
HANDOVER_DRAIN = 5.0  # seconds a leader stopping gracefully waits for its bindings before it releases the Lease


def since_process_start() -> float | None:
    """Seconds since this process started (from /proc; None elsewhere): the cold-start figures are measured from
    the moment the process exists, so they include the interpreter and every import."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return round(uptime - start_ticks / os.sysconf("SC_CLK_TCK"), 3)


def timed_waits(snap: Snapshot) -> bool:
    """Whether a clock of the Ray-native bounded waits runs for some gang: a bound pod not Ready under a ready-timeout,
    a max-runtime on a running gang, a requeue backoff, a max-pending-time not yet acted on. Without one, an idle
    loop may sleep until a change."""
    for job in snap.jobs:
        facts = job.raynative
        if facts is not None and (facts.max_runtime is not None or facts.backoff_until is not None):
            return True
        if facts is not None and facts.max_pending_time is not None and facts.max_pending_acted is None:
            return True  # its clock runs while it waits, even for pods (NotReady)
        timeout = facts.ready_timeout if facts is not None and facts.ready_timeout is not None else None
        if (timeout or snap.config.default_ready_timeout) and any(p.ready is False for p in job.pods):
            return True
    return False


class SchedulerOperator:
    """One scheduler replica. ``start()`` returns at once; ``stop()`` ends every thread it started.

    ``startup`` records, in seconds since the process started, when the replica was built (interpreter, imports,
    the runtime's start-up), its informers had listed, it began to lead and its first cycle as leader ended; the
    liveness probe reports it, ``kai-ray bench failover`` reads it."""

    def __init__(self, parts: SchedulerParts) -> None:
        self.config = parts.config
        self.kube = parts.kube
        self._owns_kube = parts.owns_kube
        self._wake = parts.wake
        self._leading = parts.leading
        self.metrics = parts.metrics
        self.cache = parts.cache
        self.dra = parts.dra
        self.binder = parts.binder
        self.writer = parts.writer
        self.events = parts.events
        self.usage = parts.usage
        self.quarantine = parts.quarantine
        self.reporter = parts.reporter
        self.pruned = self.reporter.pruned  # status fields the installed CRDs do not store
        self.reclaimer = parts.reclaim
        self.dispatch = parts.dispatch
        self.gangs = parts.gangs
        self.headroom = parts.headroom
        self.ray_activity = parts.ray_activity
        self._deciding = parts.deciding
        self.release_watch = parts.release_watch
        self._stop = threading.Event()
        self.collector = CycleFreeze()
        self._loop_thread: threading.Thread | None = None
        config = self.config
        self.unschedulable = UnschedulableMarker(self.kube, partial(self.writer.submit, priority=STATUS_PRIORITY))
        self.ungater = Ungater(self.kube, partial(self.binder.submit, priority=EVICT_PRIORITY))
        self.informers = self._informers()
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
        self._follower_built = 0.0
        self._recent_cycles: deque[tuple[float, float]] = deque(maxlen=32)  # (start, end), monotonic, newest last
        self._last_report = 0.0
        self.last_result: CycleResult | None = None
        self.cycles = 0
        self.startup: dict[str, float | None] = {"built": since_process_start()}

    # --- wiring -----------------------------------------------------------------------------------------------

    def _informers(self) -> list[Informer]:
        cfg = self.config
        pool = cfg.pool_selector()
        node_sel = ",".join([*(f"{k}={v}" for k, v in sorted(cfg.node_selector.items())), *([pool] if pool else [])])
        infs = [
            Informer(
                self.kube,
                "/api/v1/nodes",
                name="nodes",
                handler=self.cache.on_node,
                transform=kept_node,
                label_selector=node_sel or None,
            ),
            Informer(
                self.kube,
                "/apis/scheduling.k8s.io/v1/priorityclasses",
                name="priorityclasses",
                handler=self.cache.on_priority_class,
            ),
            Informer(
                self.kube,
                queues_path(),
                name="queues",
                handler=self.cache.on_queue,
                missing_ok=True,
                label_selector=pool,
            ),
            Informer(self.kube, pods_path(), name="pods", handler=self._on_pod, transform=kept_pod),
            *self.dra.informers(self.kube),
        ]
        for ns in cfg.namespaces or (None,):
            infs.append(
                Informer(
                    self.kube,
                    podgroups_path(ns),
                    name=f"podgroups-{ns or 'all'}",
                    handler=self._on_podgroup,
                    transform=kept_podgroup,
                    missing_ok=True,
                    label_selector=pool,
                )
            )
        infs.extend(
            upstream_gangs.informers(
                self.kube, cfg.namespaces, self.cache.on_upstream_podgroup, self.cache.on_workload, pool or None
            )
        )
        if self.gangs is not None:
            infs.extend(self.gangs.informers)
        return infs

    def _on_pod(self, event: str, key: str, obj: dict[str, Any]) -> None:
        gone = self.dra.on_pod(event, key, obj)
        if gone is not None and self.is_leader():  # a deleted pod's claims are released
            work = f"release-claims/{gone.metadata.namespace}/{gone.metadata.name}"
            self.writer.submit(work, partial(dra_claims.release, self.kube, self.dra, gone), priority=STATUS_PRIORITY)
        self.cache.on_pod(event, key, obj)

    def _on_podgroup(self, event: str, key: str, obj: dict[str, Any]) -> None:
        self.cache.on_podgroup(event, key, obj)
        if event != DELETE:
            self.reporter.watched_podgroup(key, obj)

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
        self.release_watch.start()
        if self.ray_activity is not None:
            self.ray_activity.start()
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
        if self._loop_thread is not None:
            self._loop_thread.join(10)
        self.release_watch.stop()
        if self.elector is not None:
            handover = self._drain() if release and self.elector.is_leader() else None
            self.elector.stop(release=release, handover=handover)
        if self.ray_activity is not None:
            self.ray_activity.stop()
        self.binder.stop()
        self.writer.stop()
        if self.usage is not None:
            self.usage.stop()
        self.reclaimer.close(wait=False)
        for inf in self.informers:
            inf.stop()
        if self._owns_kube:
            self.kube.reachability.close()  # its prober, if the server was unreachable
        self.metrics.close()
        self.collector.release()

    @property
    def last_cycle(self) -> float:
        """When the last cycle ended (monotonic; 0.0: none yet)."""
        return self._recent_cycles[-1][1] if self._recent_cycles else 0.0

    @property
    def _last_cycle_seconds(self) -> float:
        start, end = self._recent_cycles[-1] if self._recent_cycles else (0.0, 0.0)
        return end - start

    def _drain(self) -> dict[str, str] | None:
        """Before a graceful release: let the bindings already sent be answered and come back through the pods
        watch, then name the pods resourceVersion seen, so the next leader knows how far it must have read."""
        deadline = time.monotonic() + HANDOVER_DRAIN
        self.binder.wait_idle(HANDOVER_DRAIN)
        while self.cache.inflight() and time.monotonic() < deadline:
            time.sleep(0.01)
        pods = self._informer("pods")
        if self.cache.inflight() or pods is None or not pods.resource_version:
            return None  # the next leader lists again
        return {HANDOVER_PODS_RV: pods.resource_version}

    def _record_synced(self) -> None:
        if "synced" not in self.startup:
            self.startup["synced"] = since_process_start()
            self.startup.update({f"list_{inf.name}_seconds": inf.list_seconds for inf in self.informers})

    def _informer(self, name: str) -> Informer | None:
        return next((inf for inf in self.informers if inf.name == name), None)

    def _catch_up(self, elector: LeaderElector) -> bool:
        """Before the first cycle as leader: make sure the cache holds every binding of the previous leader (see the
        module docstring). False when this replica stopped or lost the Lease meanwhile."""
        pods = self._informer("pods")
        rv = elector.handover.get(HANDOVER_PODS_RV)
        stale = []
        for inf in self.informers:
            if inf.missing or not (inf is pods or inf.name.startswith("podgroups")):
                continue
            if inf is pods and rv is not None and inf.wait_for_version(rv, 2.0):
                continue  # seen everything the previous leader had seen after its last binding
            if (inf is pods and elector.took_released) or not inf.watching.wait(2.0):
                stale.append(inf)  # a release without a note, or a watch that is not open (just listed: opening)
        for inf in stale:
            while not inf.relist(30.0):
                if self._stop.is_set() or not elector.is_leader():
                    return False
                log.warning("%s: fresh list after election is taking long; still waiting", inf.name)
        return True

    def wake(self) -> None:
        self._wake.set()

    def is_leader(self) -> bool:
        return self._leading.is_set()

    def synced(self) -> bool:
        return all(inf.synced.is_set() for inf in self.informers)

    def health(self) -> dict[str, Any]:
        """For the liveness probe: raises when the loop is stuck while leading."""
        age = time.monotonic() - self.last_cycle if self.last_cycle else None
        info = {
            "leader": self.is_leader(),
            "synced": self.synced(),
            "cycles": self.cycles,
            "last_cycle_age": age,
            "startup": self.startup,
        }
        limit = 30.0 + 10 * self.config.schedule_period
        if self.is_leader() and age is not None and age > limit:
            raise RuntimeError(f"no scheduling cycle for {age:.0f}s")
        return info

    def _on_elected(self) -> None:
        def begin() -> None:
            if not wait_all_synced(self.informers, self._stop):
                return
            self._record_synced()
            if self.elector is not None and not self._catch_up(self.elector):
                return
            if self._stop.is_set() or (self.elector is not None and not self.elector.is_leader()):
                return
            self.cache.recorder.new_term()
            # the first cycle's status report (every PodGroup's verdict) waits a report interval when it binds, so
            # it does not compete with the first bindings for the interpreter
            self._last_report = time.monotonic()
            self._leading.set()
            self.startup["leading"] = since_process_start()
            self.startup.pop("first_cycle", None)
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
            idle_aware_victims=cfg.idle_aware_victims,
            checkpoint_aware_victims=cfg.checkpoint_aware_victims,
            default_ready_timeout=cfg.ready_timeout or None,
            ready_timeout_backoff=cfg.ready_timeout_backoff,
            upgrade_surge=cfg.upgrade_surge,
            reservation_ttl=cfg.reservation_ttl,
            queue_admission_gating=cfg.queue_admission_gating,
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
                self._follow()
                continue
            try:
                # paused for the whole cycle, not only the core's part: the young collection of what the core
                # returned would otherwise run before the evictions and bindings go out (a quarter of a second at
                # 5,000 nodes); after_cycle collects it once everything is sent
                with collector_paused():
                    self.run_once()
            except Exception:
                log.exception("scheduling cycle failed; next cycle continues")
            else:
                # the full collection of a thaw stops every thread for seconds at 5,000 nodes: only after a cycle
                # that nothing woke (the slow resync of a quiet cluster) and that left nothing to do
                self.collector.after_cycle(idle=not self._busy and not woke)

    def _follow(self) -> None:
        """A follower builds the snapshot now and then and throws it away: the build is incremental (job templates
        and jobs are rebuilt only when they change), so the first cycle after a takeover starts from a warm cache
        instead of building every job at once."""
        if time.monotonic() - self._follower_built < FOLLOWER_BUILD_PERIOD or not self.synced():
            return
        self._record_synced()
        if self.elector is not None and self.elector.is_leader():
            return  # about to lead: the first cycle builds; a build now would hold the cache against the catch-up
        try:
            self.cache.build(self.core_config())
        except Exception:
            log.exception("building the snapshot as a follower failed; the next try repeats it")
        self._follower_built = time.monotonic()

    def _settle(self) -> None:
        """Coalesce a burst of changes before a cycle, without delaying a lone change.

        The cycle starts once changes have paused for ``debounce`` and, unless the loop has been mostly idle, at
        least one cycle's length has passed since the last cycle ended (so cycles take at most half of the time
        while changes trickle in; :func:`cycle_earliest`), and at the latest ``max(debounce, 3 x cycle)`` after the
        wake-up (a steady stream of arrivals: cycles take a quarter of the time). A gang that arrives alone, or the
        last victim of a preemption going, is thus acted on within about ``debounce`` instead of after three cycle
        lengths, even right after a cycle. While victims of a pipelined gang are still going, a
        pause is no reason to start: the first victims leaving would otherwise start a cycle that the last one
        then waits behind. Once the last one has left, the release watcher binds the pipelined pods and the cycle
        follows the next pause.
        """
        now = time.monotonic()
        deadline = now + max(self.config.debounce, 3 * self._last_cycle_seconds)
        earliest = cycle_earliest(self._recent_cycles, now)
        while not self._stop.is_set():
            self._wake.clear()
            now = time.monotonic()
            if now >= deadline:
                return
            quiet = not self._wake.wait(min(self.config.debounce, deadline - now))
            if quiet and time.monotonic() >= earliest and not self.dispatch.awaiting_victims():
                return

    _timed_waits = False  # a running gang waits on a ready-timeout or max-runtime clock: keep the periodic cycle
    _busy = True  # the last cycle decided something or left a gang waiting (none yet: busy)

    def _period(self) -> float:
        """Seconds until the next periodic cycle when nothing changes.

        KAI's periodic cycle re-evaluates pending gangs (preemption delays and minimum runtimes expire with time);
        when every gang is scheduled and the last cycle decided nothing, only a change can alter the outcome, so
        the loop then only wakes for changes (and a slow safety resync), or when the last report left a verdict to
        say later (a gang pending for less than the report delay). A cycle never takes more than ~20% of the time
        when nothing changes.
        """
        if not self._busy and not self._timed_waits:
            return idle_period(self.reporter.next_due, time.monotonic(), self._last_cycle_seconds)
        return max(self.config.schedule_period, 4 * self._last_cycle_seconds)

    def _decide(self) -> tuple[SnapshotView, CycleResult, bool, float, float, float]:
        """A cycle's deciding section: the snapshot, the core, and its decisions sent (as leader)."""
        leading = self._leading.is_set()
        if leading:  # a cycle that starts before the release watcher saw the victims go binds the plan first
            self.dispatch.bind_if_released()
        virtual = self.gangs.virtual_pods() if self.gangs is not None and leading else {}
        self.cache.recorder.take()  # before the build: a change landing meanwhile is told again next cycle
        view = self.cache.build(self.core_config(), extra=virtual)
        if self.usage is not None and leading:
            with self.cache.lock:
                statuses = {name: q.raw.get("status") or {} for name, q in self.cache.queues.items()}
            view.snapshot.usage = self.usage.before_cycle(time.time(), statuses)
        self._timed_waits = timed_waits(view.snapshot)
        t1 = time.perf_counter()
        result = self.quarantine.run(view.snapshot)
        t2 = time.perf_counter()
        t3 = t2
        if self._leading.is_set():
            if self.usage is not None:
                with self.cache.lock:
                    capacity = capacity_of(self.cache.nodes)
                self.usage.after_cycle(time.time(), capacity, result)
            self.dispatch.binds(view, result)
            self.dispatch.evictions(view, result)
            self.dispatch.stop_pending(result)
            self.ungater.after_cycle(view, result)
            if virtual and self.gangs is not None:
                self.gangs.after_cycle(result, virtual)
            t3 = time.perf_counter()
        return view, result, leading, t1, t2, t3

    def run_once(self) -> CycleResult:
        started = time.monotonic()
        t0 = time.perf_counter()
        with self._deciding:  # no release plan is bound while a cycle decides (release_watch.py)
            view, result, leading, t1, t2, t3 = self._decide()
        if self._leading.is_set():
            # During a burst of bindings, status and Events (which wait for the burst anyway) are worked out at
            # most once a second; every other cycle reports at once.
            if not result.binds or time.monotonic() - self._last_report >= REPORT_INTERVAL:
                self.dispatch.forget(self.reporter.report(view, result))
                self._last_report = time.monotonic()
            self.unschedulable.after_cycle(view, result)
            if self.headroom is not None and self.headroom.due():
                try:
                    self.headroom.maybe_publish(view.snapshot)
                except Exception:
                    log.exception("computing the headroom failed; the next publication retries")
        t4 = time.perf_counter()
        self.cycles += 1
        self._recent_cycles.append((started, time.monotonic()))
        self.last_result = result
        self._busy = _busy(result)
        record_cycle(self.metrics, view, result, (t0, t1, t2, t3, t4), self.cache.inflight())
        if leading and "first_cycle" not in self.startup:
            self.startup["first_cycle"] = since_process_start()
            self.startup["first_cycle_seconds"] = round(t4 - t0, 3)
            log.info("first cycle as leader: %s", self.startup)
        return result


QUIET_DUTY = 0.25  # below this share of the recent time spent in cycles, a change starts a cycle at once
DUTY_WINDOW = 10.0  # seconds that share is measured over (at least four cycle lengths)


def cycle_earliest(recent: Sequence[tuple[float, float]], now: float) -> float:
    """When a cycle that a change woke may start, from the recent cycles' (start, end) times, newest last.

    A loop that spent little of the recent past in cycles starts at once: a lone arrival (a preemptor on a quiet
    cluster) is not held back by the length of the cycle that just ended, about 1.5 s at 5,000 nodes, nor by one
    the report delay brought. A busier loop waits one cycle's length after the last one ended, so that a stream of
    changes (the kubelets' updates after a fill) gets cycles for at most about half of the time, not back to back.
    """
    if not recent:
        return now
    start, end = recent[-1]
    window = max(DUTY_WINDOW, 4 * (end - start))
    since = now - window
    busy = sum(e - max(s, since) for s, e in recent if e > since)
    return end if busy < QUIET_DUTY * window else end + (end - start)


def idle_period(report_due: float | None, now: float, last_seconds: float) -> float:
    """An idle loop's wait: the slow resync, or until the verdict the last report left for later can be said (at
    least one cycle's length, so an idle loop never runs more than half of the time)."""
    if report_due is None:
        return IDLE_RESYNC
    return min(IDLE_RESYNC, max(report_due - now, last_seconds, 0.05))


def _busy(r: CycleResult) -> bool:
    """The cycle decided something or left a gang waiting: the next one may decide more. A gang that is only short
    of pods (``NotReady``) waits for them, and their arrival wakes the loop: no periodic cycle for it (at 5,000
    nodes one cycle costs about a second, and a preemption that arrived meanwhile waited behind it)."""
    if r.binds or r.evictions:
        return True
    return any(not j.scheduled and j.reason is not Reason.NOT_READY for j in r.jobs.values())


def build_scheduler(config: OperatorConfig, kube: Kube | None = None) -> SchedulerOperator:
    """One scheduler replica from its settings (and an API client to share, else its own)."""
    return SchedulerOperator(assemble(config, kube))

"""The podgrouper operator: pods of our scheduler and Ray CRs in, PodGroups and stamped pods out.

This module wires the parts (the package's map, :mod:`kai_ray.k8s.podgrouping`, says what each does) and leads.

Everything is level-triggered from informer caches through a keyed work queue, so restarts and duplicate events are
harmless: an up-to-date PodGroup and stamp cost no write. Only the leader acts; on becoming leader it reconciles
everything it knows (events seen while not leading were not acted on).

In KAI-coexistence mode (``kai_coexistence``: KAI's scheduler schedules, kai-ray only groups) the Ray top owner and
every pod it stamps also get ``kai.scheduler/skip-podgrouper: "true"`` (with ``kai-ray.io/skip-podgrouper-by``, so
kai-ray does not mistake its own mark for a user's request), and KAI's podgrouper leaves them to us.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from functools import partial
from typing import Any

from kai_ray import constants as c
from kai_ray.k8s.base.events import EventRecorder
from kai_ray.k8s.base.informer import DELETE, Handler, wait_all_synced
from kai_ray.k8s.base.isolate import Guard
from kai_ray.k8s.base.leader import LeaderElector, LeaseConfig
from kai_ray.k8s.base.metrics import PodgrouperMetrics
from kai_ray.k8s.base.rest import ApiError, Kube
from kai_ray.k8s.base.workqueue import Dispatcher
from kai_ray.k8s.config import OperatorConfig
from kai_ray.k8s.podgrouping import admission
from kai_ray.k8s.podgrouping.orphans import Orphans
from kai_ray.k8s.podgrouping.owners import OwnerError, Owners
from kai_ray.k8s.podgrouping.pod_reconcile import PodReconciler
from kai_ray.k8s.podgrouping.pod_stamps import STAMP_MAX_DELAY, STAMP_WORKERS, DeferredStamp, PodStamps
from kai_ray.k8s.podgrouping.podgroup_writer import PodGroupWriter
from kai_ray.k8s.podgrouping.problems import Problems
from kai_ray.k8s.podgrouping.quotagate import quota_gate
from kai_ray.k8s.podgrouping.ray_gangs import RayGangs
from kai_ray.k8s.podgrouping.ray_reconcile import RayReconciler
from kai_ray.k8s.podgrouping.upstream_writer import UpstreamGangs
from kai_ray.k8s.podgrouping.watches import Watches
from kai_ray.k8s.podgrouping.webhook import PodAdmission, serve_admission
from kai_ray.k8s.podgrouping.work import POD, parse_work, pod_work, ray_work
from kai_ray.podgrouper import PodgrouperConfig
from kai_ray.podgrouper.defaultgrouper import own_group_name

log = logging.getLogger(__name__)

COMPONENT = "kai-podgrouper"


def grouper_config(config: OperatorConfig) -> PodgrouperConfig:
    """The pure grouper's settings, from the operator's."""
    base = PodgrouperConfig.kai_compatible() if config.kai_compatible_priorities else PodgrouperConfig()
    return base.model_copy(
        update={
            "scheduler_name": config.scheduler_name,
            "queue_label_key": config.queue_label_key,
            "default_priority": {**base.default_priority, **config.default_priority},
            "max_gang_pods": config.max_gang_pods,
        }
    )


@dataclass(frozen=True)
class PodgrouperParts:
    """The podgrouper's parts, each with one job (the package's map says which)."""

    podgroups: PodGroupWriter
    problems: Problems
    stamps: PodStamps
    orphans: Orphans
    pods: PodReconciler
    ray_objects: RayReconciler
    admission: PodAdmission


def build_parts(
    config: OperatorConfig,
    settings: PodgrouperConfig,
    kube: Kube,
    watches: Watches,
    events: EventRecorder,
    metrics: PodgrouperMetrics,
) -> PodgrouperParts:
    """The parts, wired to each other: each gets the few others it hands work to, never the operator."""
    coexist = config.kai_coexistence
    upstream = UpstreamGangs(kube) if config.upstream_gangs else None
    podgroups = PodGroupWriter(kube, watches, settings, metrics, upstream)
    problems = Problems(events, metrics)
    owners = Owners(kube, watches)
    gangs = RayGangs(
        settings, watches, podgroups, problems, events, kai_coexistence=coexist, upgrade_surge=config.upgrade_surge
    )
    stamps = PodStamps(kube, watches, metrics, kai_coexistence=coexist)
    orphans = Orphans(settings, watches, gangs, podgroups, stamps, problems, kai_coexistence=coexist)
    pods = PodReconciler(
        kube,
        metrics,
        settings,
        watches,
        owners,
        gangs,
        podgroups,
        stamps,
        orphans,
        kai_coexistence=coexist,
        upstream_gangs=config.upstream_gangs,
    )
    ray_objects = RayReconciler(
        kube, metrics, events, watches, owners, gangs, podgroups, orphans, kai_coexistence=coexist
    )
    admission = PodAdmission(kube, config.scheduler_name, owners, gangs)
    return PodgrouperParts(podgroups, problems, stamps, orphans, pods, ray_objects, admission)


class PodgrouperOperator:
    def __init__(self, config: OperatorConfig, kube: Kube | None = None) -> None:
        self.config = config.validate()
        self._owns_kube = kube is None
        self.kube = kube or Kube.connect(config.kubeconfig, config.context, pool_size=config.bind_workers + 24)
        self.grouper_config = grouper_config(config)
        self.metrics = PodgrouperMetrics()
        self.queue = Dispatcher("podgrouper", config.bind_workers)
        self.writer = Dispatcher("podgrouper-events", 2)
        self.stamper = Dispatcher(
            "podgrouper-stamps", STAMP_WORKERS, gate=self._stamps_may_go, gate_max_wait=STAMP_MAX_DELAY
        )
        self.events = EventRecorder(
            self.kube, COMPONENT, config.identity, self.writer, counter=self.metrics.status_writes
        )
        self._leading = threading.Event()
        self._stop = threading.Event()
        self.guard = Guard("reconcile", log)
        self.watches = Watches.build(
            self.kube, config.scheduler_name, config.namespaces, self._on_pod, self._on_pg, self._ray_handler
        )
        self.informers = self.watches.all
        self.ray = self.watches.ray
        self.parts = build_parts(config, self.grouper_config, self.kube, self.watches, self.events, self.metrics)
        self.pruned = self.parts.podgroups.pruned
        self.admission: admission.AdmissionServer | None = None
        self.quota_gate = quota_gate(self.kube, config, self.grouper_config.default_queue, self.parts.pods.owners.chain)
        self.elector: LeaderElector | None = None
        if config.leader_elect:
            name, lns = config.lease("podgrouper")
            self.elector = LeaderElector(
                self.kube,
                LeaseConfig(
                    name, lns, config.identity, config.lease_duration, config.renew_deadline, config.retry_period
                ),
                on_start=self._on_elected,
                on_stop=self._on_deposed,
            )

    # --- lifecycle ----------------------------------------------------------------------------------------------

    def start(self) -> PodgrouperOperator:
        self.metrics.serve(self.config.metrics_port, self.config.bind_address)
        for inf in self.informers:
            inf.start()
        if self.config.upstream_gangs or self.quota_gate is not None:
            upstream = self.parts.admission if self.config.upstream_gangs else None
            self.admission = serve_admission(self.config, self.kube, upstream, self.quota_gate)
        self.queue.start()
        self.writer.start()
        self.stamper.start()
        if self.elector is not None:
            self.elector.start()
        else:
            threading.Thread(target=self._on_elected, name="podgrouper-start", daemon=True).start()
        return self

    def stop(self, release: bool = True) -> None:
        self._stop.set()
        self._leading.clear()
        if self.elector is not None:
            self.elector.stop(release=release)
        if self.admission is not None:
            self.admission.stop()
        self.queue.stop()
        self.stamper.stop()
        self.writer.stop()
        for inf in self.informers:
            inf.stop()
        if self._owns_kube:
            self.kube.reachability.close()
        self.metrics.close()

    def is_leader(self) -> bool:
        return self._leading.is_set()

    def synced(self) -> bool:
        return all(inf.synced.is_set() for inf in self.informers)

    def health(self) -> dict[str, Any]:
        return {"leader": self.is_leader(), "synced": self.synced(), "queued": self.queue.pending()}

    def _on_elected(self) -> None:
        def begin() -> None:
            if not wait_all_synced(self.informers, self._stop):
                return
            if self._stop.is_set() or (self.elector is not None and not self.elector.is_leader()):
                return
            self._leading.set()
            self.metrics.leader.labels("podgrouper").set(1)
            self.resync()

        threading.Thread(target=begin, name="podgrouper-elected", daemon=True).start()

    def _on_deposed(self) -> None:
        self._leading.clear()
        self.metrics.leader.labels("podgrouper").set(0)

    def resync(self) -> None:
        """Reconcile everything we know (on becoming leader: events seen while not leading were not acted on)."""
        for kind, key in self.watches.ray_keys():
            self._enqueue(ray_work(kind, key))
        for key, _ in self.watches.all_pods():
            self._enqueue(pod_work(key))

    # --- events -------------------------------------------------------------------------------------------------

    def _enqueue(self, work: str, delay: float = 0.0) -> None:
        if self._leading.is_set():
            self.queue.submit(work, lambda: self._reconcile(work), delay=delay)

    def _on_pod(self, event: str, key: str, obj: dict[str, Any]) -> None:
        if event == DELETE:
            self.parts.stamps.forget(key)
            self.parts.problems.cleared(f"Pod/{key}")
            self.parts.orphans.forget(key)
            return
        if not self.parts.stamps.up_to_date(key, obj):
            self._enqueue(pod_work(key))

    def _on_pg(self, event: str, key: str, obj: dict[str, Any]) -> None:
        self.parts.podgroups.seen(event, key, obj)
        if event != DELETE:
            return
        ns, _, name = key.partition("/")
        for pkey, pod in self.watches.all_pods():
            pmeta = pod.get("metadata") or {}
            if pmeta.get("namespace") == ns and (
                (pmeta.get("annotations") or {}).get(c.PODGROUP_ANNOTATION) == name or own_group_name(pmeta) == name
            ):
                self.parts.stamps.redo(pkey)
                self._enqueue(pod_work(pkey))

    def _ray_handler(self, kind: str) -> Handler:
        def handle(event: str, key: str, obj: dict[str, Any]) -> None:
            if event == DELETE:
                self.parts.ray_objects.forget(kind, key)
                return
            self._enqueue(ray_work(kind, key))

        return handle

    # --- reconcile ----------------------------------------------------------------------------------------------

    def reconcile_pod(self, key: str) -> None:
        """Group and stamp one pod now (a deferred stamp goes to the stamp pool)."""
        later = self.parts.pods.reconcile(key)
        if later is not None:
            self.stamper.submit(f"stamp/{later.key}", partial(self._stamp_later, later))

    def _reconcile(self, work: str) -> None:
        if not self._leading.is_set():
            return
        try:
            if work.startswith(POD):
                self.reconcile_pod(parse_work(work)[1])
            else:
                for follow in self.parts.ray_objects.reconcile(*parse_work(work)):
                    self._enqueue(follow)
            self.queue.forget(work)
        except (ApiError, OwnerError) as exc:
            self.metrics.reconcile_errors.labels(work.split("/", 1)[0]).inc()
            if isinstance(exc, OwnerError):
                self.parts.orphans.orphaned(parse_work(work)[1] if work.startswith(POD) else work, exc)
            if isinstance(exc, ApiError) and exc.status in (400, 422):
                self._rejected(work, exc)  # the API server refuses what this object asks for: retrying cannot help
                self.queue.forget(work)
                return
            if not self._leading.is_set():
                return
            delay = self.queue.retry(work, lambda: self._reconcile(work))
            level = logging.INFO if isinstance(exc, OwnerError) or getattr(exc, "conflict", False) else logging.WARNING
            log.log(level, "%s: %s; retrying in %.1fs", work, exc, delay)
        except Exception as exc:  # a bug: its traceback once per key and error; retried with backoff
            self.guard.failed(work, exc)
            if self._leading.is_set():
                self.queue.retry(work, lambda: self._reconcile(work))

    def _rejected(self, work: str, exc: ApiError) -> None:
        """A write for this object was refused as invalid: say so on the object, once per distinct message (its
        next change is reconciled again)."""
        kind, key = parse_work(work)
        message = f"the API server refused the PodGroup written for it: {exc.message or exc}"
        if kind == "Pod":
            pod = self.watches.pod(key)
            if pod is not None:
                self.parts.problems.refused_for_pod(f"Pod/{key}", pod, message)
            return
        obj = self.watches.ray_object(kind, key)
        if obj is not None:
            self.parts.problems.bad_ray_object(f"{kind}/{key}", obj, kind, message)

    def _stamps_may_go(self) -> bool:
        return self.parts.stamps.may_go(self.queue.busy(), self.parts.podgroups.last_write)

    def _stamp_later(self, later: DeferredStamp) -> None:
        if not self._leading.is_set():
            self.parts.stamps.drop(later.key)
            return
        work = f"stamp/{later.key}"
        try:
            written = self.parts.stamps.write_deferred(later)
        except ApiError as exc:
            delay = self.stamper.retry(work, partial(self._stamp_later, later))
            log.info("stamp %s: %s; retrying in %.1fs", later.key, exc, delay)
            return
        if written:
            self.stamper.forget(work)

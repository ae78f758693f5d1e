"""Builds the parts of one scheduler replica, each from its settings and the parts below it, once and in order.

Why a separate builder: every part gets what it talks to as a constructor argument, so reading one constructor says
whom it reaches, and nothing is patched in after construction. The few things several parts share are made first:
the wake-up and leadership events of the cycle loop, and the pace of bindings that holds status writes back.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from functools import partial
from typing import Any

from kai_ray.k8s.base.events import EventRecorder
from kai_ray.k8s.base.isolate import Quarantine
from kai_ray.k8s.base.metrics import SchedulerMetrics
from kai_ray.k8s.base.rest import Kube
from kai_ray.k8s.base.workqueue import Dispatcher
from kai_ray.k8s.config import OperatorConfig
from kai_ray.k8s.ray.headroom_publisher import HeadroomPublisher
from kai_ray.k8s.ray.ray_reclaim import RayReclaim
from kai_ray.k8s.scheduling import dra_claims
from kai_ray.k8s.scheduling.cache import SchedulerCache
from kai_ray.k8s.scheduling.changes import ChangeRecorder
from kai_ray.k8s.scheduling.dispatch import EVICT_PRIORITY, BindPace, Dispatch
from kai_ray.k8s.scheduling.dra_claims import DraStore
from kai_ray.k8s.scheduling.rayactivity import RayActivityPoller
from kai_ray.k8s.scheduling.release_watch import ReleaseWatcher
from kai_ray.k8s.scheduling.reporting import STATUS_PRIORITY, Reporter
from kai_ray.k8s.scheduling.resume import SuspendedGangs
from kai_ray.k8s.usagedb import UsageSource, make_source
from kai_ray.podgrouper import PodgrouperConfig

log = logging.getLogger("kai_ray.k8s.scheduling.operator")  # the quarantine's lines read as the operator's

COMPONENT = "kai-scheduler"


@dataclass(eq=False)
class SchedulerParts:
    """Everything one replica is made of; :class:`~kai_ray.k8s.scheduling.operator.SchedulerOperator` runs them."""

    config: OperatorConfig
    kube: Kube
    owns_kube: bool
    wake: threading.Event  # set by anything that may change a cycle's outcome
    leading: threading.Event  # set while this replica holds the Lease and has caught up
    metrics: SchedulerMetrics
    cache: SchedulerCache
    dra: DraStore
    binder: Dispatcher
    writer: Dispatcher
    events: EventRecorder
    usage: UsageSource | None
    quarantine: Quarantine
    reporter: Reporter
    reclaim: RayReclaim
    dispatch: Dispatch
    gangs: SuspendedGangs | None
    headroom: HeadroomPublisher | None
    ray_activity: RayActivityPoller | None
    deciding: threading.Lock  # held by the loop from snapshot to dispatch; release binds happen outside it
    release_watch: ReleaseWatcher


def job_version(cache: SchedulerCache, key: str) -> Any:
    """What a quarantined job must change to be tried again: its PodGroup or its set of pods."""
    with cache.lock:
        pg = cache.pgs.get(key)
        members = cache.members.get(key) or {}
        return (pg.sig if pg is not None else None, tuple(sorted((p.key, p.sig) for p in members.values())))


def assemble(config: OperatorConfig, kube: Kube | None = None) -> SchedulerParts:
    config = config.validate()
    owns_kube = kube is None
    kube = kube or Kube.connect(
        config.kubeconfig, config.context, pool_size=config.bind_workers + config.write_workers + 12
    )
    wake = threading.Event()
    leading = threading.Event()
    deciding = threading.Lock()
    metrics = SchedulerMetrics()
    if config.node_pool:  # one process per pool: every series of this target belongs to it
        metrics.registry.set_target_info({"node_pool": config.node_pool})
    # the cycle runs on the leader's incremental session, told what the cache's handlers saw change
    recorder = ChangeRecorder()

    def dra_changed() -> None:
        recorder.everything()  # devices and claims: their reach into the kept session is not tracked
        wake.set()

    # Dynamic Resource Allocation: devices and claims join the snapshot
    dra_store = DraStore(dra_changed)
    cache = SchedulerCache(config, on_change=wake.set, dra=dra_store)
    cache.recorder = recorder
    binder = Dispatcher("binder", config.bind_workers)
    pace = BindPace(binder)
    writer = Dispatcher("writer", config.write_workers, gate=pace.writes_may_go, gate_max_wait=1.0)
    events = EventRecorder(kube, COMPONENT, config.identity, writer, counter=metrics.status_writes)
    # time-based fair share: the usage source (None: off, KAI's default)
    usage = make_source(config.usage_db, config.usage_params(), config.usage_db_url, config.usage_extra_params)
    quarantine = Quarantine(recorder.run, log, version=partial(job_version, cache))
    reporter = Reporter(config, kube, cache, metrics, events, writer, quarantine=quarantine, usage=usage)
    reclaim = RayReclaim(
        kube,
        shrink=config.elastic_reclaim,
        suspend_kinds=config.suspend_kinds,
        gcs_address="auto" if config.drain_deadline > 0 else None,
    )
    dispatch = Dispatch(
        config,
        kube,
        cache,
        metrics,
        events,
        binder,
        writer,
        reporter=reporter,
        reclaim=reclaim,
        is_leader=leading.is_set,
        pace=pace,
        dra_reserve=partial(dra_claims.reserve, kube, dra_store),
    )
    gangs: SuspendedGangs | None = None
    if config.suspend_kinds or config.headroom_interval > 0:
        gangs = SuspendedGangs(
            kube,
            cache,
            kinds=config.suspend_kinds,
            namespaces=config.namespaces,
            grouper_config=PodgrouperConfig(
                scheduler_name=config.scheduler_name,
                queue_label_key=config.queue_label_key,
                max_gang_pods=config.max_gang_pods,
            ),
            submit=lambda key, work: binder.submit(key, work, priority=EVICT_PRIORITY),
            wake=wake.set,
            is_leader=leading.is_set,
        )
    headroom: HeadroomPublisher | None = None
    if config.headroom_interval > 0:
        headroom = HeadroomPublisher(
            kube,
            config.headroom_interval,
            lambda key, work: writer.submit(key, work, priority=STATUS_PRIORITY),
            templates=gangs.probe_templates if gangs is not None else None,
        )
    ray_activity: RayActivityPoller | None = None
    if config.ray_activity_interval > 0 and config.idle_aware_victims:
        ray_activity = RayActivityPoller(kube, cache, config.ray_activity_interval, leading.is_set)
    return SchedulerParts(
        config=config,
        kube=kube,
        owns_kube=owns_kube,
        wake=wake,
        leading=leading,
        metrics=metrics,
        cache=cache,
        dra=dra_store,
        binder=binder,
        writer=writer,
        events=events,
        usage=usage,
        quarantine=quarantine,
        reporter=reporter,
        reclaim=reclaim,
        dispatch=dispatch,
        gangs=gangs,
        headroom=headroom,
        ray_activity=ray_activity,
        deciding=deciding,
        release_watch=ReleaseWatcher(dispatch, deciding, leading),
    )

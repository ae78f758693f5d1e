"""Scenario -> engine -> result: the wiring the CLI and the tests share."""

from __future__ import annotations

import dataclasses

from kai_ray.bridge import node_from_api, queue_from_api
from kai_ray.bridge_dra import catalog_from_documents, node_gpu_devices
from kai_ray.scheduler.snapshot import Resources
from kai_ray.sim.engine import Engine, EngineOptions, SimResult
from kai_ray.sim.policy import KAI_RAY, Policy
from kai_ray.sim.ray_workload import RayWorkload
from kai_ray.sim.scenario import Scenario, SimulationOptions, Workload


def engine_options(sim: SimulationOptions, policy: Policy = KAI_RAY) -> EngineOptions:
    return EngineOptions(
        ray_aware=policy.ray_aware,
        track_idle=True,
        schedule_period=sim.schedule_period,
        restart_cost=sim.restart_cost,
        checkpoint_interval=sim.checkpoint_interval,
        autoscaler_period=sim.autoscaler_period,
        termination_grace=sim.termination_grace,
        elastic_speedup=sim.elastic_speedup,
        until=sim.until,
        ray_facts=sim.ray_facts,
    )


def build_engine(scn: Scenario, policy: Policy = KAI_RAY) -> Engine:
    """The scenario's nodes and queues through the same bridge the operators use, and its Ray CRs as workloads."""
    problems: list[str] = []
    nodes = [node_from_api(n, problems) for n in scn.nodes]
    dra = catalog_from_documents(scn.dra, problems) if scn.dra else None
    if dra is not None:
        gpus_of = node_gpu_devices(dra)
        nodes = [
            dataclasses.replace(n, allocatable=n.allocatable + Resources(gpu=gpus_of[n.name]))
            if n.name in gpus_of
            else n
            for n in nodes
        ]
    queues = [queue_from_api(q) for q in scn.queues]
    opts = engine_options(scn.simulation, policy)
    pg_config = policy.podgrouper(scn.podgrouper)
    engine = Engine(nodes, queues, scn.config, opts)
    engine.dra = dra
    for text in problems:
        engine.findings[text] = None
    for w in scn.workloads:
        rw = RayWorkload(
            key=w.key,
            kind=w.obj.kind,
            arrive_at=w.at,
            duration=w.duration,
            restart_cost=w.restart_cost if w.restart_cost is not None else opts.restart_cost,
            obj=w.obj.model_copy(deep=True),
            pg_config=pg_config,
            priority_classes=scn.priority_classes,
            gang_scheduling=policy.gang_scheduling,
            dra=dra,
        )
        _ray_native_world(rw, w)
        engine.add(rw)
        for step in w.scale:
            engine.add_scale(rw, step.at, step.group, step.replicas)
        if w.spec is not None and w.spec.upgrade_at is not None:
            engine.add(_upgrade_surge(rw, w.spec.upgrade_at))
    return engine


def _ray_native_world(rw: RayWorkload, w: Workload) -> None:
    spec = w.spec
    if spec is None:
        return
    rw.checkpoint_interval = spec.checkpoint_interval
    rw.activity = (spec.activity.busy, spec.activity.idle) if spec.activity is not None else None
    rw.startup_failures = spec.startup_failures


def _upgrade_surge(active: RayWorkload, at: float) -> RayWorkload:
    """A RayService's zero-downtime upgrade: KubeRay's pending cluster, the same service with the new spec, which
    takes over (and the old cluster goes) once its gang runs."""
    assert active.obj is not None
    obj = active.obj.model_copy(deep=True)
    obj.metadata.name = f"{obj.metadata.name}-upgrade"
    if obj.metadata.uid:
        obj.metadata.uid = f"{obj.metadata.uid}-upgrade"
    return RayWorkload(
        key=f"{obj.metadata.namespace}/{obj.metadata.name}",
        kind=active.kind,
        arrive_at=at,
        duration=None,
        restart_cost=active.restart_cost,
        obj=obj,
        pg_config=active.pg_config,
        priority_classes=active.priority_classes,
        gang_scheduling=active.gang_scheduling,
        upgrade_of=active.key,
    )


def simulate(scn: Scenario, policy: Policy = KAI_RAY) -> SimResult:
    return build_engine(scn, policy).run()

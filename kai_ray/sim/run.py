"""Scenario -> engine -> result: the wiring the CLI and the tests share."""

from __future__ import annotations

import dataclasses

from kai_ray.bridge import node_from_api, queue_from_api
from kai_ray.bridge_dra import catalog_from_documents, node_gpu_devices
from kai_ray.scheduler.snapshot import Resources
from kai_ray.sim.engine import Engine, EngineOptions, SimResult
from kai_ray.sim.policy import KAI_RAY, Policy
from kai_ray.sim.scenario import Scenario, SimulationOptions
from kai_ray.sim.workloads import RayWorkload


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
        engine.add(rw)
        for step in w.scale:
            engine.add_scale(rw, step.at, step.group, step.replicas)
    return engine


def simulate(scn: Scenario, policy: Policy = KAI_RAY) -> SimResult:
    return build_engine(scn, policy).run()

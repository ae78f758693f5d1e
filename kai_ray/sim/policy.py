"""Scheduling policies the simulator can compare on one workload: kai-ray, KAI's semantics, and no gangs at all.

Why simulator-level policies and not scheduler switches: the three differ in what happens *around* the scheduler
core, not in its decisions. The same core (KAI's actions, queues and gang rules) runs in all three; a policy says
which priority defaults the podgrouper applies, whether the world carries out an eviction Ray-aware (shrink the
worker group, suspend a lost gang) or as plain pod deletions, and whether the core is shown gangs at all.

- ``kai-ray``: kai-ray's podgrouper defaults (a RayService is ``inference``), Ray-aware evictions.
- ``kai``: KAI's podgrouper defaults (every Ray kind is ``train``), evictions delete pods: KubeRay recreates them
  (the group's replicas are unchanged) and a running Ray job that loses a pod restarts from its last checkpoint,
  whole-gang in effect — there is no shrink and no suspend.
- ``no-gang``: a pod-by-pod scheduler like the default kube-scheduler: the core is shown each pod as its own gang
  of one (the head first), so a partial gang can hold GPUs while it waits for the rest; evictions as in ``kai``.
  Priorities and queues stay kai-ray's, so only the gang rule and Ray-awareness differ from ``kai-ray``.
"""

from __future__ import annotations

from dataclasses import dataclass

from kai_ray.podgrouper import PodgrouperConfig


@dataclass(frozen=True)
class Policy:
    name: str
    title: str
    summary: str
    ray_aware: bool = True
    gang_scheduling: bool = True
    kai_priorities: bool = False

    def podgrouper(self, base: PodgrouperConfig) -> PodgrouperConfig:
        if not self.kai_priorities:
            return base
        return base.model_copy(update={"default_priority": dict(PodgrouperConfig.kai_compatible().default_priority)})


KAI_RAY = Policy(
    "kai-ray",
    "kai-ray",
    "gangs; RayService defaults to inference; Ray-aware shrink and suspend",
)
KAI = Policy(
    "kai",
    "KAI semantics",
    "gangs; every Ray kind defaults to train; an eviction restarts the Ray job (no shrink, no suspend)",
    ray_aware=False,
    kai_priorities=True,
)
NO_GANG = Policy(
    "no-gang",
    "no gang scheduling",
    "pod by pod, like the default kube-scheduler: partial gangs hold GPUs; an eviction restarts the Ray job",
    ray_aware=False,
    gang_scheduling=False,
)
POLICIES: dict[str, Policy] = {p.name: p for p in (KAI_RAY, KAI, NO_GANG)}

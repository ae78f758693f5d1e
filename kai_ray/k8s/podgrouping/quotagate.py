"""The admission half of KAI's queue-admission gate: new pods of gating queues are created gated.

Why at creation: scheduling gates can only be set when a pod is created (the API allows removing them, never adding),
and a pod is visible to node autoscalers from that moment. So the podgrouper's webhook adds
``kai.scheduler/queue-admission`` to every new pod that kai-ray schedules (``schedulerName``) whose queue gates
(``--queue-admission-gating=all``, or ``queues`` and the Queue labelled ``kai.scheduler/queue-admission-gating:
"true"``, KAI's opt-in). It decides nothing about quota, as KAI's design says: queue usage is not knowable at
admission (the PodGroup may not exist yet); the scheduler removes the gate when the quota admits the whole gang
(:mod:`kai_ray.k8s.scheduling.ungate`). A pod's queue is its top owner's queue label, then its own, then the default
queue, as the podgrouper groups it. Under ``all`` a queue that does not exist is gated too (KAI's design proposes
it: the pod would otherwise make an autoscaler buy a node for a queue nobody can admit); the scheduler keeps it gated,
saying ``gated: queue ... does not exist``, until the queue is created. Under ``queues`` a missing queue cannot have
opted in, so its pods are not gated (and read ``queue ... does not exist`` when pending). The webhook fails open like
the other one: an error admits the pod ungated, which is today's behaviour (quota is still enforced at allocation).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kai_ray import constants as c
from kai_ray.k8s.base.rest import ApiError, Kube, queues_path
from kai_ray.k8s.config import OperatorConfig

QUEUE_TTL = 10.0  # seconds a Queue's opt-in label is remembered (one GET per queue, not per pod)


def quota_gate(
    kube: Kube,
    config: OperatorConfig,
    default_queue: str,
    owner_chain: Callable[[dict[str, Any]], list[dict[str, Any]]],
) -> QuotaGate | None:
    """The podgrouper's gate decision, or None when ``--queue-admission-gating=off``."""
    if config.queue_admission_gating == "off":
        return None
    return QuotaGate(
        kube, config.queue_admission_gating, config.scheduler_name, config.queue_label_key, default_queue, owner_chain
    )


def gate_patch(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch adding the gate (nothing when the pod already carries it)."""
    gates = spec.get("schedulingGates")
    gate = {"name": c.QUEUE_ADMISSION_GATE}
    if not gates:
        return [{"op": "add", "path": "/spec/schedulingGates", "value": [gate]}]
    if any(g.get("name") == c.QUEUE_ADMISSION_GATE for g in gates):
        return []
    return [{"op": "add", "path": "/spec/schedulingGates/-", "value": gate}]


@dataclass(eq=False)
class QuotaGate:
    """``decide(pod, namespace)`` for the webhook; ``owner_chain`` is the podgrouper's (``[pod, owner, ...]``)."""

    kube: Kube
    mode: str  # queues | all
    scheduler_name: str
    queue_label_key: str
    default_queue: str
    owner_chain: Callable[[dict[str, Any]], list[dict[str, Any]]]
    _opted: dict[str, tuple[float, bool]] = field(default_factory=dict)  # queue -> (read at, opted in?)

    def decide(self, raw: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
        spec = raw.get("spec") or {}
        if spec.get("schedulerName") != self.scheduler_name:
            return []
        queue = self.queue_of(raw)
        if not queue or not self.gates(queue):
            return []
        return gate_patch(spec)

    def queue_of(self, raw: dict[str, Any]) -> str:
        for obj in reversed(self.owner_chain(raw)):
            value = ((obj.get("metadata") or {}).get("labels") or {}).get(self.queue_label_key)
            if value:
                return str(value)
        return self.default_queue

    def gates(self, queue: str) -> bool:
        """Whether ``queue``'s pods are gated: always under ``all`` (no read needed), else when the Queue exists and
        opted in."""
        if self.mode == "all":
            return True
        now = time.monotonic()
        cached = self._opted.get(queue)
        if cached is None or now - cached[0] > QUEUE_TTL:
            try:
                labels = (self.kube.get(queues_path(queue)).get("metadata") or {}).get("labels") or {}
                opted = labels.get(c.QUEUE_ADMISSION_GATING_LABEL) == "true"
            except ApiError as exc:
                if not exc.not_found:
                    raise
                opted = False  # no such queue: it cannot have opted in
            self._opted[queue] = cached = (now, opted)
        return cached[1]

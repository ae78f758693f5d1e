"""KAI's Queue, ``scheduling.run.ai/v2`` (cluster-scoped), with KAI's field names and the webhook's checks.

Units as KAI: cpu in millicores, memory in MB (10^6 bytes), gpu in GPUs. ``-1`` means unlimited for quota and limit;
``limit: 0`` is literal (nothing may run). ``resources`` is required, as KAI's admission webhook requires it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from kai_ray import constants as c
from kai_ray.api.errors import FieldError
from kai_ray.api.meta import Condition, KubeModel, ObjectMeta


class QueueResource(KubeModel):
    quota: float = 0.0
    limit: float = -1.0
    over_quota_weight: float = 1.0


class QueueResources(KubeModel):
    gpu: QueueResource = Field(default_factory=QueueResource)
    cpu: QueueResource = Field(default_factory=QueueResource)
    memory: QueueResource = Field(default_factory=QueueResource)


class QueueSpec(KubeModel):
    display_name: str | None = None
    parent_queue: str | None = None
    priority: int | None = None
    resources: QueueResources | None = None
    preempt_min_runtime: str | None = None
    reclaim_min_runtime: str | None = None


class QueueStatus(KubeModel):
    conditions: list[Condition] | None = None
    child_queues: list[str] | None = None
    allocated: dict[str, Any] | None = None
    allocated_non_preemptible: dict[str, Any] | None = None
    requested: dict[str, Any] | None = None
    fair_share: dict[str, Any] | None = None  # kai-ray addition, written by the scheduler
    usage: dict[str, float] | None = None  # kai-ray addition: normalised historical usage (time-based fair share)
    usage_ledger: dict[str, Any] | None = None  # kai-ray addition: the scheduler's usage accounting (internal)


class Queue(KubeModel):
    api_version: Literal["scheduling.run.ai/v2"] = "scheduling.run.ai/v2"
    kind: Literal["Queue"] = "Queue"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: QueueSpec = Field(default_factory=QueueSpec)
    status: QueueStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    def validate_spec(self) -> list[FieldError]:
        """KAI's queue webhook, plus range checks: never raises, returns every problem found."""
        errors: list[FieldError] = []
        if not self.metadata.name:
            errors.append(FieldError("metadata.name", "required"))
        if self.spec.resources is None:
            errors.append(FieldError("spec.resources", "required (KAI rejects queues without resources)"))
            return errors
        for res in ("gpu", "cpu", "memory"):
            r: QueueResource = getattr(self.spec.resources, res)
            if r.quota < 0 and r.quota != -1:
                errors.append(
                    FieldError(f"spec.resources.{res}.quota", f"{r.quota} is negative (use -1 for unlimited)")
                )
            if r.limit < 0 and r.limit != -1:
                errors.append(FieldError(f"spec.resources.{res}.limit", f"{r.limit} is negative (use -1 for no limit)"))
            if r.over_quota_weight < 0:
                errors.append(FieldError(f"spec.resources.{res}.overQuotaWeight", f"{r.over_quota_weight} is negative"))
            if r.limit >= 0 and r.quota > r.limit:
                errors.append(FieldError(f"spec.resources.{res}.quota", f"quota {r.quota} exceeds limit {r.limit}"))
        default = self.metadata.annotations.get(c.DEFAULT_PREEMPTIBILITY)
        if default is not None and default not in c.PREEMPTIBILITY_VALUES:
            allowed = ", ".join(repr(v) for v in c.PREEMPTIBILITY_VALUES)
            errors.append(
                FieldError(f"metadata.annotations[{c.DEFAULT_PREEMPTIBILITY}]", f"{default!r} is not one of {allowed}")
            )
        if self.spec.parent_queue is not None and self.spec.parent_queue == self.metadata.name:
            errors.append(FieldError("spec.parentQueue", "a queue cannot be its own parent"))
        return errors


def queue_cycles(queues: list[Queue]) -> list[FieldError]:
    """Find parent cycles and missing parents across a set of queues (KAI leaves these to runtime skips)."""
    by_name = {q.name: q for q in queues}
    errors: list[FieldError] = []
    for q in queues:
        seen = {q.name}
        parent = q.spec.parent_queue
        while parent:
            if parent not in by_name:
                if parent == q.spec.parent_queue:
                    errors.append(FieldError(f"Queue {q.name} spec.parentQueue", f"parent queue {parent!r} not found"))
                break
            if parent in seen:
                errors.append(FieldError(f"Queue {q.name} spec.parentQueue", f"cycle through {parent!r}"))
                break
            seen.add(parent)
            parent = by_name[parent].spec.parent_queue
    return errors

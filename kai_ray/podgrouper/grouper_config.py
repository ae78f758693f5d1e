"""Podgrouper settings. Defaults are kai-ray's; every one can be set to KAI's behaviour."""

from __future__ import annotations

from pydantic import BaseModel, Field

from kai_ray import constants as c


class PodgrouperConfig(BaseModel):
    scheduler_name: str = c.SCHEDULER_NAME
    queue_label_key: str = c.QUEUE_LABEL
    default_queue: str = c.DEFAULT_QUEUE
    # kai-ray defaults RayService to `inference`; KAI defaults every Ray kind to `train`.
    default_priority: dict[str, str] = Field(
        default_factory=lambda: {"RayService": "inference", "RayJob": "train", "RayCluster": "train"}
    )
    priority_classes: dict[str, int] = Field(default_factory=lambda: dict(c.PRIORITY_CLASSES))
    # Autoscaler sidecar that KubeRay adds to the head when enableInTreeAutoscaling is on (KubeRay's default).
    autoscaler_sidecar_cpu: str = "500m"
    autoscaler_sidecar_memory: str = "512Mi"
    # A Ray object whose gang would have more pods is refused (kai-ray.io/invalid); elastic ceilings are capped to it.
    max_gang_pods: int = Field(default=c.DEFAULT_MAX_GANG_PODS, ge=1)

    @classmethod
    def kai_compatible(cls) -> PodgrouperConfig:
        """Exactly KAI's defaults: every Ray kind defaults to `train`."""
        return cls(default_priority={"RayService": "train", "RayJob": "train", "RayCluster": "train"})

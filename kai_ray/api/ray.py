"""Read-only views of KubeRay ``ray.io/v1`` RayCluster, RayJob and RayService.

Only the fields scheduling needs are modelled; everything else is kept as-is (``extra="allow"``), so a view of a
real object round-trips. Defaults are KubeRay's (replicas 0, minReplicas 0, maxReplicas MaxInt32, numOfHosts 1).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from kai_ray.api.meta import KubeModel, ObjectMeta, PodTemplateSpec

RAY_API_VERSIONS = ("ray.io/v1", "ray.io/v1alpha1")
MAX_INT32 = 2**31 - 1


def _non_negative(value: int | None) -> int | None:
    """The message is the "what is wrong" of an error line that already names the field (by its wire name)."""
    if value is not None and value < 0:
        raise ValueError(f"{value} is negative; it must be >= 0")
    return value


class ScaleStrategy(KubeModel):
    workers_to_delete: list[str] | None = None


class HeadGroupSpec(KubeModel):
    template: PodTemplateSpec = Field(default_factory=PodTemplateSpec)
    ray_start_params: dict[str, Any] | None = None
    resources: dict[str, Any] | None = None  # Ray resources of the group's pods; replaces rayStartParams.resources


class WorkerGroupSpec(KubeModel):
    group_name: str = ""
    replicas: int | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    num_of_hosts: int | None = None
    suspend: bool | None = None
    scale_strategy: ScaleStrategy | None = None
    template: PodTemplateSpec = Field(default_factory=PodTemplateSpec)
    ray_start_params: dict[str, Any] | None = None
    resources: dict[str, Any] | None = None  # Ray resources of the group's pods; replaces rayStartParams.resources
    idle_timeout_seconds: int | None = None

    _check = field_validator("replicas", "min_replicas", "max_replicas", "num_of_hosts")(_non_negative)

    @property
    def hosts(self) -> int:
        return self.num_of_hosts if self.num_of_hosts else 1

    @property
    def min(self) -> int:
        return self.min_replicas or 0

    @property
    def max(self) -> int:
        return MAX_INT32 if self.max_replicas is None else self.max_replicas

    def desired_replicas(self) -> int:
        """KubeRay's clamping: replicas into [minReplicas, maxReplicas]; 0 when suspended."""
        if self.suspend:
            return 0
        replicas = self.replicas or 0
        lo, hi = self.min, self.max
        if lo > hi:
            return hi
        return max(lo, min(replicas, hi))


class AutoscalerOptions(KubeModel):
    upscaling_mode: str | None = None
    idle_timeout_seconds: int | None = None
    version: str | None = None
    resources: dict[str, Any] | None = None
    image: str | None = None
    command: list[str] | None = None
    args: list[str] | None = None


class RayClusterSpec(KubeModel):
    head_group_spec: HeadGroupSpec | None = None
    worker_group_specs: list[WorkerGroupSpec] = Field(default_factory=list)
    enable_in_tree_autoscaling: bool | None = None
    autoscaler_options: AutoscalerOptions | None = None
    suspend: bool | None = None
    ray_version: str | None = None


class RayClusterStatus(KubeModel):
    desired_worker_replicas: int | None = None
    ready_worker_replicas: int | None = None
    state: str | None = None


class RayCluster(KubeModel):
    api_version: str = "ray.io/v1"
    kind: Literal["RayCluster"] = "RayCluster"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: RayClusterSpec = Field(default_factory=RayClusterSpec)
    status: RayClusterStatus | None = None


class RayJobSpec(KubeModel):
    entrypoint: str | None = None
    submission_mode: str | None = None
    ray_cluster_spec: RayClusterSpec | None = None
    cluster_selector: dict[str, str] | None = None
    suspend: bool | None = None
    shutdown_after_job_finishes: bool | None = None
    submitter_pod_template: PodTemplateSpec | None = None


class RayJobStatus(KubeModel):
    ray_cluster_name: str | None = None
    job_status: str | None = None
    job_deployment_status: str | None = None


class RayJob(KubeModel):
    api_version: str = "ray.io/v1"
    kind: Literal["RayJob"] = "RayJob"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: RayJobSpec = Field(default_factory=RayJobSpec)
    status: RayJobStatus | None = None

    @property
    def submission_mode(self) -> str:
        return self.spec.submission_mode or "K8sJobMode"


class RayServiceClusterStatus(KubeModel):
    ray_cluster_name: str | None = None


class RayServiceSpec(KubeModel):
    ray_cluster_config: RayClusterSpec | None = None
    serve_config_v2: str | None = Field(default=None, alias="serveConfigV2")
    suspend: bool | None = None


class RayServiceStatus(KubeModel):
    active_service_status: RayServiceClusterStatus | None = None
    pending_service_status: RayServiceClusterStatus | None = None


class RayService(KubeModel):
    api_version: str = "ray.io/v1"
    kind: Literal["RayService"] = "RayService"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: RayServiceSpec = Field(default_factory=RayServiceSpec)
    status: RayServiceStatus | None = None


RayObject = RayCluster | RayJob | RayService

"""Shared Kubernetes object pieces, modelled loosely: we keep every field we do not know.

Why ``extra="allow"`` everywhere: kai-ray reads objects written by other tools (KubeRay, users, KAI) and writes some
back; dropping an unknown field on a round trip would silently lose someone's data.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer
from pydantic.alias_generators import to_camel


class KubeModel(BaseModel):
    """Base for wire models: camelCase on the wire, unknown fields kept, ``None`` fields omitted on output."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, alias_generator=to_camel)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class OwnerReference(KubeModel):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(KubeModel):
    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    owner_references: list[OwnerReference] | None = None
    creation_timestamp: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    deletion_timestamp: str | None = None

    @model_serializer(mode="wrap")
    def _drop_empty_maps(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Empty labels/annotations are defaults for convenience, not data: keep them off the wire."""
        out: dict[str, Any] = handler(self)
        for key in ("labels", "annotations"):
            if out.get(key) == {}:
                del out[key]
        return out


class ResourceRequirements(KubeModel):
    requests: dict[str, str | int | float] | None = None
    limits: dict[str, str | int | float] | None = None


class Container(KubeModel):
    name: str = ""
    image: str | None = None
    resources: ResourceRequirements | None = None
    restart_policy: str | None = None  # "Always" on an init container: a sidecar


class Toleration(KubeModel):
    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None


class PodSpec(KubeModel):
    containers: list[Container] = Field(default_factory=list)
    init_containers: list[Container] | None = None
    priority_class_name: str | None = None
    scheduler_name: str | None = None
    node_selector: dict[str, str] | None = None
    node_name: str | None = None
    tolerations: list[Toleration] | None = None
    affinity: dict[str, Any] | None = None
    scheduling_gates: list[dict[str, Any]] | None = None
    overhead: dict[str, str | int | float] | None = None  # the RuntimeClass's pod overhead
    resources: ResourceRequirements | None = None  # pod-level resources


class PodTemplateSpec(KubeModel):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodSpec = Field(default_factory=PodSpec)


class PodStatus(KubeModel):
    phase: str | None = None
    start_time: str | None = None


class Pod(KubeModel):
    api_version: str = "v1"
    kind: str = "Pod"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodSpec = Field(default_factory=PodSpec)
    status: PodStatus | None = None


class Condition(KubeModel):
    type: str
    status: str
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None
    transition_id: str | None = Field(default=None, alias="transitionID")

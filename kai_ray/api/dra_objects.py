"""Dynamic Resource Allocation objects (``resource.k8s.io`` v1beta1 / v1beta2 / v1), modelled loosely.

Why one model for three API versions: v1beta1 puts a request's class, selectors, count and allocation mode directly
on the request, v1beta2 and v1 nest them under ``exactly``, and v1beta1 wraps a device's attributes and capacity in
``basic``. kai-ray reads whichever the API server serves, so the models accept both shapes and the accessors
(:meth:`DeviceRequest.exact`, :meth:`Device.body`) answer the same way for each. Unknown fields are kept, as in the
other wire models. The fields kai-ray does not allocate (``firstAvailable``, device-taint tolerations, consumable
capacity requests, admin access) are modelled so :mod:`kai_ray.bridge_dra` can refuse them by name.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from kai_ray.api.meta import KubeModel, ObjectMeta, PodSpec

GROUP = "resource.k8s.io"


class CELSelector(KubeModel):
    expression: str = ""


class DeviceSelector(KubeModel):
    cel: CELSelector | None = None


class DeviceClassSpec(KubeModel):
    selectors: list[DeviceSelector] = Field(default_factory=list)
    extended_resource_name: str | None = None  # v1.34+: pods asking for this resource get a claim of this class


class DeviceClass(KubeModel):
    api_version: str = f"{GROUP}/v1"
    kind: str = "DeviceClass"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: DeviceClassSpec = Field(default_factory=DeviceClassSpec)


class DeviceAttribute(KubeModel):
    """Exactly one of the four is set (``int`` is the wire name of the integer attribute)."""

    int_: int | None = Field(default=None, alias="int")
    bool_: bool | None = Field(default=None, alias="bool")
    string: str | None = None
    version: str | None = None

    def value(self) -> Any:
        for v in (self.int_, self.bool_, self.string, self.version):
            if v is not None:
                return v
        return None


class DeviceCapacity(KubeModel):
    value: str | int | float = 0


class DeviceBody(KubeModel):
    attributes: dict[str, DeviceAttribute] = Field(default_factory=dict)
    capacity: dict[str, DeviceCapacity | str | int | float] = Field(default_factory=dict)
    taints: list[dict[str, Any]] | None = None


class Device(KubeModel):
    name: str
    basic: DeviceBody | None = None  # v1beta1
    attributes: dict[str, DeviceAttribute] = Field(default_factory=dict)  # v1beta2 / v1
    capacity: dict[str, DeviceCapacity | str | int | float] = Field(default_factory=dict)
    taints: list[dict[str, Any]] | None = None  # v1 (and v1beta1 inside basic): NoSchedule / NoExecute keep claims off

    def body(self) -> DeviceBody:
        if self.basic is not None:
            return self.basic
        return DeviceBody(attributes=self.attributes, capacity=self.capacity, taints=self.taints)


class ResourcePool(KubeModel):
    name: str = ""
    generation: int = 0
    resource_slice_count: int = 1


class ResourceSliceSpec(KubeModel):
    driver: str = ""
    pool: ResourcePool = Field(default_factory=ResourcePool)
    node_name: str | None = None
    all_nodes: bool | None = None
    devices: list[Device] = Field(default_factory=list)


class ResourceSlice(KubeModel):
    api_version: str = f"{GROUP}/v1"
    kind: str = "ResourceSlice"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ResourceSliceSpec = Field(default_factory=ResourceSliceSpec)


class ExactDeviceRequest(KubeModel):
    device_class_name: str = ""
    selectors: list[DeviceSelector] = Field(default_factory=list)
    allocation_mode: str | None = None  # ExactCount (default) | All
    count: int | None = None
    admin_access: bool | None = None
    tolerations: list[dict[str, Any]] | None = None
    capacity: dict[str, Any] | None = None  # consumable capacity: what the request takes of a shared device

    def unsupported(self) -> str | None:
        """What of this request kai-ray does not allocate, in words (None: it is fully understood)."""
        if self.admin_access:
            return "asks for admin access"
        if self.tolerations:
            return "tolerates device taints"
        if self.capacity:
            return "asks for consumable capacity"
        return None


class DeviceRequest(KubeModel):
    name: str = ""
    exactly: ExactDeviceRequest | None = None  # v1beta2 / v1
    first_available: list[dict[str, Any]] | None = None  # v1beta2 / v1 prioritized list: not scheduled by kai-ray
    device_class_name: str | None = None  # v1beta1
    selectors: list[DeviceSelector] | None = None
    allocation_mode: str | None = None
    count: int | None = None
    admin_access: bool | None = None
    tolerations: list[dict[str, Any]] | None = None
    capacity: dict[str, Any] | None = None

    def exact(self) -> ExactDeviceRequest:
        if self.exactly is not None:
            return self.exactly
        return ExactDeviceRequest(
            device_class_name=self.device_class_name or "",
            selectors=self.selectors or [],
            allocation_mode=self.allocation_mode,
            count=self.count,
            admin_access=self.admin_access,
            tolerations=self.tolerations,
            capacity=self.capacity,
        )

    def unsupported(self) -> str | None:
        """Why kai-ray refuses this request (None: it allocates it): a prioritized list of alternatives, or a part
        of an exact request it does not evaluate. A refused claim's pods stay pending with that reason in their
        Unschedulable Event and condition, never scheduled as if the field were absent."""
        if self.first_available:
            return "lists firstAvailable alternatives"
        return self.exact().unsupported()


class DeviceClaim(KubeModel):
    requests: list[DeviceRequest] = Field(default_factory=list)


class ResourceClaimSpec(KubeModel):
    devices: DeviceClaim = Field(default_factory=DeviceClaim)


class DeviceRequestAllocationResult(KubeModel):
    request: str
    driver: str
    pool: str
    device: str


class DeviceAllocationResult(KubeModel):
    results: list[DeviceRequestAllocationResult] = Field(default_factory=list)


class AllocationResult(KubeModel):
    devices: DeviceAllocationResult = Field(default_factory=DeviceAllocationResult)
    node_selector: dict[str, Any] | None = None


class ResourceClaimConsumerReference(KubeModel):
    api_group: str = ""
    resource: str = "pods"
    name: str
    uid: str


class ResourceClaimStatus(KubeModel):
    allocation: AllocationResult | None = None
    reserved_for: list[ResourceClaimConsumerReference] = Field(default_factory=list)


class ResourceClaim(KubeModel):
    api_version: str = f"{GROUP}/v1"
    kind: str = "ResourceClaim"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ResourceClaimSpec = Field(default_factory=ResourceClaimSpec)
    status: ResourceClaimStatus | None = None


class ResourceClaimTemplateSpec(KubeModel):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ResourceClaimSpec = Field(default_factory=ResourceClaimSpec)


class ResourceClaimTemplate(KubeModel):
    api_version: str = f"{GROUP}/v1"
    kind: str = "ResourceClaimTemplate"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ResourceClaimTemplateSpec = Field(default_factory=ResourceClaimTemplateSpec)


class PodResourceClaim(KubeModel):
    """An entry of a pod's ``spec.resourceClaims``: a claim by name (shared) or one made per pod from a template."""

    name: str
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


def pod_resource_claims(spec: PodSpec) -> list[PodResourceClaim]:
    """``spec.resourceClaims`` of a pod (kept by :class:`PodSpec` as an unknown field, so nothing is lost)."""
    raw = (spec.model_extra or {}).get("resourceClaims") or []
    return [PodResourceClaim.model_validate(item) for item in raw if isinstance(item, dict)]


def is_gpu_class(device_class: str) -> bool:
    """KAI's rule for which DRA devices are GPUs (charged to queues as GPUs): the class name mentions "gpu"
    (``gpu.nvidia.com``, ``gpu.example.com``), case-insensitively."""
    return "gpu" in device_class.lower()

"""KAI's PodGroup, ``scheduling.run.ai/v2alpha2``, with KAI's field names and the webhook's checks.

KAI has no ``maxMember``; kai-ray records elastic ceilings in annotations (see ``kai_ray.constants``) so the wire
object stays KAI-compatible.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field

from kai_ray.api.errors import FieldError
from kai_ray.api.meta import Condition, KubeModel, ObjectMeta

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class TopologyConstraint(KubeModel):
    topology: str | None = None
    required_topology_level: str | None = None
    preferred_topology_level: str | None = None


class SubGroup(KubeModel):
    name: str
    min_member: int | None = None
    min_sub_group: int | None = None
    parent: str | None = None
    topology_constraint: TopologyConstraint | None = None


class PodGroupSpec(KubeModel):
    min_member: int | None = None
    min_sub_group: int | None = None
    sub_groups: list[SubGroup] | None = None
    queue: str | None = None
    priority_class_name: str | None = None
    preemptibility: Literal["preemptible", "non-preemptible", "semi-preemptible", ""] | None = None
    topology_constraint: TopologyConstraint | None = None
    mark_unschedulable: bool | None = None
    scheduling_backoff: int | None = None
    preemption_delay: str | None = None
    staleness_grace_period: str | None = None


class SchedulingReason(KubeModel):
    reason: str
    message: str | None = None
    details: dict[str, Any] | None = None


class SchedulingCondition(KubeModel):
    type: str = "UnschedulableOnNodePool"
    node_pool: str | None = None
    status: str | None = None
    last_transition_time: str | None = None
    transition_id: str | None = Field(default=None, alias="transitionID")
    reasons: list[SchedulingReason] | None = None


class PodGroupStatus(KubeModel):
    conditions: list[Condition] | None = None
    scheduling_conditions: list[SchedulingCondition] | None = None
    resources_status: dict[str, Any] | None = None
    phase: str | None = None


class PodGroup(KubeModel):
    api_version: Literal["scheduling.run.ai/v2alpha2"] = "scheduling.run.ai/v2alpha2"
    kind: Literal["PodGroup"] = "PodGroup"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodGroupSpec = Field(default_factory=PodGroupSpec)
    status: PodGroupStatus | None = None

    def validate_spec(self) -> list[FieldError]:
        """KAI's PodGroup webhook: exclusivity, DNS subgroup names, parents exist, no cycles.

        A leaf subgroup without ``minMember`` is not an error here: it reads as 0 (:func:`leaf_min_member`), which is
        how KAI v0.12's CRD stores a zero (minimum 1, Go ``omitempty``) and how kai-ray writes one there."""
        errors: list[FieldError] = []
        spec = self.spec
        if spec.min_member is not None and spec.min_sub_group is not None:
            errors.append(FieldError("spec.minSubGroup", "minMember and minSubGroup are mutually exclusive"))
        if spec.min_member is not None and spec.min_member < 0:
            errors.append(FieldError("spec.minMember", f"{spec.min_member} is negative"))
        if spec.min_sub_group is not None and spec.min_sub_group < 0:
            errors.append(FieldError("spec.minSubGroup", f"{spec.min_sub_group} is negative"))
        if spec.scheduling_backoff is not None and spec.scheduling_backoff not in (1, -1):
            errors.append(FieldError("spec.schedulingBackoff", "must be 1 or -1"))
        groups = spec.sub_groups or []
        names: dict[str, int] = {}
        for i, sg in enumerate(groups):
            path = f"spec.subGroups[{i}]"
            if not DNS_LABEL.match(sg.name) or len(sg.name) > 63:
                errors.append(FieldError(f"{path}.name", f"{sg.name!r} is not a DNS label (RFC 1123)"))
            if sg.name in names:
                errors.append(FieldError(f"{path}.name", f"duplicate subgroup {sg.name!r}"))
            names[sg.name] = i
            if sg.min_member is not None and sg.min_sub_group is not None:
                errors.append(FieldError(f"{path}.minSubGroup", "minMember and minSubGroup are mutually exclusive"))
            if sg.min_member is not None and sg.min_member < 0:
                errors.append(FieldError(f"{path}.minMember", f"{sg.min_member} is negative"))
        children: dict[str, list[str]] = {}
        for i, sg in enumerate(groups):
            if sg.parent is not None:
                if sg.parent not in names:
                    errors.append(FieldError(f"spec.subGroups[{i}].parent", f"parent {sg.parent!r} not found"))
                children.setdefault(sg.parent, []).append(sg.name)
        parent_of = {sg.name: sg.parent for sg in groups}
        for i, sg in enumerate(groups):
            seen = {sg.name}
            p = sg.parent
            while p is not None and p in parent_of:
                if p in seen:
                    errors.append(FieldError(f"spec.subGroups[{i}].parent", f"cycle through {p!r}"))
                    break
                seen.add(p)
                p = parent_of[p]
        return errors


def leaf_min_member(sg: SubGroup, has_children: bool) -> int | None:
    """A subgroup's ``minMember`` as the scheduler reads it: a leaf without one counts 0 (KAI v0.12 stores a zero by
    omitting it: its CRD says minimum 1 and its Go field is ``omitempty``); a parent's stays unset."""
    if sg.min_member is None and not has_children and sg.min_sub_group is None:
        return 0
    return sg.min_member

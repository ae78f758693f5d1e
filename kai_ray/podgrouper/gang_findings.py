"""What the gang of an accepted Ray object became, when that is not what its author likely expects.

Every object here is legal: KubeRay runs it and kai-ray groups it. But a cluster with no worker pods is a gang of one,
a group named ``GPU_Workers`` is the subgroup ``gpu-workers-<hash>``, a suspended object waits for its author, an
empty ``staleness-grace-period`` is the default, and a ``gpu-fraction`` of ``1e-9`` shares a GPU without getting
any of it. Without a word on the object each of these reads as the generic "not ready for scheduling". The operator
writes each finding as an Event on the Ray object (``Normal`` for a shape, ``Warning`` for a value that does nothing).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from kai_ray import constants as c
from kai_ray.api.podgroup import PodGroup
from kai_ray.api.ray import RayObject, RayService
from kai_ray.durations import parse_duration
from kai_ray.podgrouper.grouper import cluster_spec_path, effective_cluster_spec

MANY_GROUPS = 16  # more worker groups than this: say what the gang became
LARGEST_GPU_MIB = 141 * 1024  # an H200: a gpu-fraction under one MiB of it gets nothing on any GPU


@dataclass(frozen=True)
class Finding:
    type: str  # "Normal" or "Warning", as Kubernetes Events
    reason: str
    message: str


def _suspended(obj: RayObject, by_kai: bool) -> list[Finding]:
    if by_kai or isinstance(obj, RayService) or obj.spec.suspend is not True:
        return []
    return [
        Finding(
            "Normal",
            "Suspended",
            "spec.suspend is true: KubeRay creates no pods until it is resumed; its PodGroup waits with nothing to "
            "schedule",
        )
    ]


def _shape(obj: RayObject, pg: PodGroup) -> list[Finding]:
    spec = effective_cluster_spec(obj)
    path = cluster_spec_path(obj)
    groups = spec.worker_group_specs
    subgroups = pg.spec.sub_groups or []
    workers = [sg for sg in subgroups if sg.name not in (c.RAY_HEAD_GROUP, c.SUBMITTER_SUBGROUP)]
    if not groups:
        return [Finding("Normal", "HeadOnlyGang", f"{path}.workerGroupSpecs: none; the gang is the head pod alone")]
    if not workers:
        idle = ", ".join(wg.group_name or f"worker-group-{i}" for i, wg in enumerate(groups))
        return [
            Finding(
                "Normal",
                "HeadOnlyGang",
                f"{path}.workerGroupSpecs: no group has replicas ({idle}); the gang is the head pod alone",
            )
        ]
    if len(groups) > MANY_GROUPS:
        return [
            Finding(
                "Normal",
                "GangShape",
                f"{path}.workerGroupSpecs: {len(groups)} worker groups; the gang is {len(subgroups)} "
                f"subgroups with {pg.spec.min_member} pods at least",
            )
        ]
    return []


def _renamed(obj: RayObject, pg: PodGroup) -> list[Finding]:
    raw = pg.metadata.annotations.get(c.SUBGROUP_NAMES)
    if not raw:
        return []
    path = cluster_spec_path(obj)
    index = {wg.group_name: i for i, wg in enumerate(effective_cluster_spec(obj).worker_group_specs)}
    parts = [
        f"{path}.workerGroupSpecs[{index.get(name, '?')}].groupName: {name!r} is not a DNS label; its subgroup is "
        f"{subgroup!r}"
        for name, subgroup in sorted(json.loads(raw).items())
    ]
    # one Event for all renamed groups: Events of one reason on one object fold into one (the latest message wins)
    return [Finding("Normal", "SubGroupRenamed", "; ".join(parts))] if parts else []


def _staleness(annotations: Mapping[str, str]) -> list[Finding]:
    raw = annotations.get(c.STALENESS_GRACE)
    if raw is None or parse_duration(raw, go=True) is not None:
        return []
    what = "is empty" if not raw.strip() else f"{raw!r} is not a duration (e.g. 90s, 5m)"
    return [
        Finding(
            "Warning",
            "BadAnnotation",
            f"metadata.annotations[{c.STALENESS_GRACE}]: {what}; the scheduler's default grace period applies",
        )
    ]


def _tiny_fractions(obj: RayObject) -> list[Finding]:
    spec = effective_cluster_spec(obj)
    path = cluster_spec_path(obj)
    templates = [(f"{path}.headGroupSpec.template", spec.head_group_spec.template)] if spec.head_group_spec else []
    templates += [
        (f"{path}.workerGroupSpecs[{i}].template", wg.template) for i, wg in enumerate(spec.worker_group_specs)
    ]
    out = []
    for where, template in templates:
        raw = template.metadata.annotations.get(c.GPU_FRACTION)
        try:
            value = float(raw) if raw is not None else None
        except ValueError:
            continue  # refused when grouped
        if value is not None and 0.0 < value * LARGEST_GPU_MIB < 1.0:
            out.append(
                Finding(
                    "Warning",
                    "GPUFractionTooSmall",
                    f"{where}.metadata.annotations[{c.GPU_FRACTION}]: {raw!r} is less than 1 MiB of even a 141 GiB "
                    "GPU; the pod shares a GPU but gets none of it",
                )
            )
    return out


def explain(obj: RayObject, pg: PodGroup, *, suspended_by_kai: bool = False) -> list[Finding]:
    """The findings for one Ray object and the PodGroup built for it (see the module docstring)."""
    return [
        *_suspended(obj, suspended_by_kai),
        *_shape(obj, pg),
        *_renamed(obj, pg),
        *_staleness(obj.metadata.annotations),
        *_tiny_fractions(obj),
    ]

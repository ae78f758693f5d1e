"""What to write on a pod so the scheduler finds its PodGroup and subgroup.

Members get the ``pod-group-name`` annotation and the ``kai.scheduler/subgroup-name`` label from their
``ray.io/group`` (through the DNS-name mapping). The RayJob submitter pod (K8sJobMode) is not part of the gang: it
would otherwise sit unschedulable forever under KAI. kai-ray puts it in a ``submitter`` subgroup with minMember 0,
so it is scheduled as an elastic extra of the same PodGroup once the gang runs, charged to the same queue, and
evicted with the gang.

KubeRay does not label the submitter pod: it is the pod of a batch Job that the RayJob controls (the Job named after
the RayJob, labelled ``ray.io/originated-from-crd: RayJob``). The k8s adapter looks the owners up and hands their
``(apiVersion, kind)`` here (:func:`is_submitter`); a ``ray.io/group: submittergroup`` label, which manifests used to
add by hand, still counts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from kai_ray import constants as c
from kai_ray.api.meta import Pod
from kai_ray.api.podgroup import PodGroup


@dataclass(frozen=True)
class PodStamp:
    annotations: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    def missing_on(self, pod: Pod) -> PodStamp:
        """Only the keys whose values differ on the pod (empty when nothing needs writing)."""
        return PodStamp(
            {k: v for k, v in self.annotations.items() if pod.metadata.annotations.get(k) != v},
            {k: v for k, v in self.labels.items() if pod.metadata.labels.get(k) != v},
        )

    def __bool__(self) -> bool:
        return bool(self.annotations or self.labels)

    def as_patch(self) -> dict[str, dict[str, dict[str, str]]]:
        meta: dict[str, dict[str, str]] = {}
        if self.annotations:
            meta["annotations"] = self.annotations
        if self.labels:
            meta["labels"] = self.labels
        return {"metadata": meta}


OwnerKind = tuple[str, str]  # (apiVersion, kind) of an owner reference
SUBMITTER_JOB: OwnerKind = ("batch/v1", "Job")


def is_submitter(owners: Sequence[OwnerKind]) -> bool:
    """Whether a pod's controlling owners, nearest first, are the chain KubeRay makes for a K8sJobMode submitter:
    a ``batch/v1`` Job controlled by a ``ray.io`` RayJob."""
    if len(owners) < 2 or tuple(owners[0]) != SUBMITTER_JOB:
        return False
    api, kind = owners[1]
    return kind == "RayJob" and api.startswith("ray.io/")


def subgroup_for_pod(pod: Pod, podgroup: PodGroup, submitter: bool = False) -> str | None:
    """The subgroup a pod belongs to, or None when it matches none (KAI would never schedule it). ``submitter``: the
    pod is a RayJob's submitter by its owners (:func:`is_submitter`), whatever its labels say."""
    group = c.RAY_SUBMITTER_GROUP if submitter else pod.metadata.labels.get(c.RAY_GROUP)
    if group is None:
        return None
    names = {sg.name for sg in podgroup.spec.sub_groups or []}
    if group == c.RAY_SUBMITTER_GROUP:
        return c.SUBMITTER_SUBGROUP if c.SUBMITTER_SUBGROUP in names else None
    try:
        mapping = json.loads(podgroup.metadata.annotations.get(c.SUBGROUP_NAMES, "{}"))
    except ValueError:
        mapping = {}
    name = mapping.get(group, group) if isinstance(mapping, dict) else group
    return name if name in names else None


def stamp(pod: Pod, podgroup: PodGroup, submitter: bool = False) -> PodStamp:
    annotations = {c.PODGROUP_ANNOTATION: podgroup.metadata.name or ""}
    sg = subgroup_for_pod(pod, podgroup, submitter)
    return PodStamp(annotations, {c.SUBGROUP_LABEL: sg} if sg else {})

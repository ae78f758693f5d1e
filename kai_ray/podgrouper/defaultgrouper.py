"""Grouping decisions the podgrouper operator makes around the pure Ray grouper.

- :func:`single_pod_group`: KAI's default grouper for a pod whose top owner is not a Ray object: a PodGroup of one
  (minMember 1), queue and priority from the pod, owned by the pod.
- :func:`merge_existing`: what an update may change on an existing PodGroup. As KAI's pod controller, it keeps the
  queue (never moved after creation), ``markUnschedulable``, ``schedulingBackoff``, the queue and node-pool labels, an
  existing topology constraint when the new one is empty, and never adds subgroups to a group created without them.
- :func:`skip_requested`: ``kai.scheduler/skip-podgrouper: "true"`` as a label or annotation, unless kai-ray's own
  podgrouper wrote it (KAI-coexistence mode marks what it groups so that KAI's podgrouper leaves it alone; those marks
  carry :data:`SKIP_MARKED_BY` and are not a request to skip kai-ray).
- :func:`without_zero_min_member`: the PodGroup as KAI v0.12's CRD can store it (its ``minMember`` minimum is 1; a
  zero is stored by leaving the field out, which KAI's ``omitempty`` Go field and our reader both read as 0).
- :func:`own_group_name`: the PodGroup a pod belongs to when it is its own top owner (a pod without an owner the
  podgrouper follows): ``pg-<name>-<uid>``, a name fixed by the pod alone, so the scheduler can admit such a pod as
  soon as that PodGroup exists instead of waiting for the ``pod-group-name`` stamp (which still follows, for KAI).
"""

from __future__ import annotations

import json
from typing import Any

from kai_ray import constants as c
from kai_ray.api.meta import ObjectMeta, OwnerReference, Pod
from kai_ray.api.podgroup import PodGroup, PodGroupSpec
from kai_ray.podgrouper.grouper_config import PodgrouperConfig
from kai_ray.podgrouper.queue_rule import POOL_LABEL, resolve_queue

SKIP_MARKED_BY = "kai-ray.io/skip-podgrouper-by"  # annotation: who wrote kai.scheduler/skip-podgrouper
SKIP_MARKER = "kai-ray-podgrouper"
DEFAULT_POD_PRIORITY = "train"
# Owners that are not Ray objects but may sit between a pod and a Ray top owner (the RayJob submitter's Job).
GENERIC_OWNERS = {
    ("batch/v1", "Job"): "/apis/batch/v1/namespaces/{ns}/jobs/{name}",
    ("apps/v1", "ReplicaSet"): "/apis/apps/v1/namespaces/{ns}/replicasets/{name}",
    ("apps/v1", "Deployment"): "/apis/apps/v1/namespaces/{ns}/deployments/{name}",
    ("apps/v1", "StatefulSet"): "/apis/apps/v1/namespaces/{ns}/statefulsets/{name}",
}


def controller_ref(meta: dict[str, Any]) -> dict[str, Any] | None:
    refs = meta.get("ownerReferences") or []
    for ref in refs:
        if ref.get("controller"):
            return dict(ref)
    return dict(refs[0]) if refs else None


def followed_owner(ref: dict[str, Any]) -> bool:
    """Whether the podgrouper looks an owner reference up (a Ray object, or a built-in kind one may sit under)."""
    api, kind = ref.get("apiVersion", ""), ref.get("kind", "")
    return (kind in c.RAY_KINDS and api.startswith("ray.io/")) or (api, kind) in GENERIC_OWNERS


def group_name_for_pod(name: str | None, uid: str | None) -> str:
    return f"pg-{name}-{uid}" if uid else f"pg-{name}"


def own_group_name(meta: dict[str, Any]) -> str | None:
    """``pg-<name>-<uid>`` for a pod that is its own top owner (no owner the podgrouper follows), else None.

    Such a pod always gets :func:`single_pod_group`, whatever its labels say, so its PodGroup's name is known from
    the pod alone; a pod under any followed owner may belong to a Ray gang and needs the podgrouper's stamp."""
    uid = meta.get("uid")
    if not uid or not meta.get("name"):
        return None
    ref = controller_ref(meta)
    if ref is not None and followed_owner(ref):
        return None
    return group_name_for_pod(meta["name"], uid)


def skip_requested(meta: dict[str, Any]) -> bool:
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    if str(labels.get(c.SKIP_PODGROUPER, "")).lower() == "true":
        return True
    ours = annotations.get(SKIP_MARKED_BY) == SKIP_MARKER
    return not ours and str(annotations.get(c.SKIP_PODGROUPER, "")).lower() == "true"


def skip_marks() -> dict[str, str]:
    """What kai-ray writes in KAI-coexistence mode on Ray owners and the pods it stamps (annotations)."""
    return {c.SKIP_PODGROUPER: "true", SKIP_MARKED_BY: SKIP_MARKER}


def has_skip_marks(meta: dict[str, Any]) -> bool:
    annotations = meta.get("annotations") or {}
    return all(annotations.get(k) == v for k, v in skip_marks().items())


def pod_priority(pod: Pod) -> str:
    return pod.metadata.labels.get(c.PRIORITY_LABEL) or pod.spec.priority_class_name or DEFAULT_POD_PRIORITY


def single_pod_group(pod: Pod, config: PodgrouperConfig) -> PodGroup:
    meta = pod.metadata
    name = group_name_for_pod(meta.name, meta.uid)
    annotations = {
        k: v for k, v in meta.annotations.items() if k not in ("kubectl.kubernetes.io/last-applied-configuration",)
    }
    annotations.pop(c.PODGROUP_ANNOTATION, None)
    # JSON is YAML (what KAI reads here), and much cheaper to write than a YAML dump for every pod.
    annotations[c.TOP_OWNER_METADATA] = json.dumps(
        {"name": meta.name, "uid": meta.uid or "", "group": "", "version": "v1", "kind": "Pod"}, sort_keys=True
    )
    preemptibility = meta.labels.get(c.PREEMPTIBILITY_LABEL)
    owner = (
        [OwnerReference(api_version="v1", kind="Pod", name=meta.name or "", uid=meta.uid, block_owner_deletion=False)]
        if meta.uid
        else None
    )
    return PodGroup(
        metadata=ObjectMeta(
            name=name,
            namespace=meta.namespace,
            labels={k: v for k, v in meta.labels.items() if k != c.SUBGROUP_LABEL},
            annotations=annotations,
            owner_references=owner,
        ),
        spec=PodGroupSpec(
            min_member=1,
            queue=resolve_queue(pod.metadata, pod, config),
            priority_class_name=pod_priority(pod),
            preemptibility=preemptibility if preemptibility in c.PREEMPTIBILITY_VALUES else None,
            preemption_delay=meta.annotations.get(c.PREEMPTION_DELAY),
            staleness_grace_period=meta.annotations.get(c.STALENESS_GRACE),
        ),
    )


# Annotations the podgrouper removes when the desired PodGroup has none (others are kept, like KAI's podgrouper).
DROPPED_WHEN_ABSENT = (c.INVALID,)


def merge_existing(existing: PodGroup, desired: PodGroup, config: PodgrouperConfig) -> PodGroup:
    """``desired`` with the fields KAI preserves taken from ``existing``."""
    out = desired.model_copy(deep=True)
    spec, old = out.spec, existing.spec
    if old.queue:
        spec.queue = old.queue
    spec.mark_unschedulable = old.mark_unschedulable
    spec.scheduling_backoff = old.scheduling_backoff
    if old.topology_constraint is not None and old.topology_constraint.topology and spec.topology_constraint is None:
        spec.topology_constraint = old.topology_constraint
    if not old.sub_groups and spec.sub_groups:
        spec.sub_groups = None  # back-compat: a group created without subgroups never gets any
    for key in (config.queue_label_key, POOL_LABEL, c.NODE_POOL_LABEL):
        if key in existing.metadata.labels:
            out.metadata.labels[key] = existing.metadata.labels[key]
    return out


def differs(existing: PodGroup, desired: PodGroup) -> bool:
    a, b = existing.metadata, desired.metadata
    if existing.spec.to_dict() != desired.spec.to_dict():
        return True
    if any(a.labels.get(k) != v for k, v in b.labels.items()):
        return True
    if any(a.annotations.get(k) != v for k, v in b.annotations.items()):
        return True
    if any(k in a.annotations and k not in b.annotations for k in DROPPED_WHEN_ABSENT):
        return True
    owners_a = [(o.kind, o.uid) for o in a.owner_references or []]
    owners_b = [(o.kind, o.uid) for o in b.owner_references or []]
    return owners_a != owners_b


def update_body(existing_raw: dict[str, Any], desired: PodGroup) -> dict[str, Any]:
    """A full object for PUT: the existing one (status, resourceVersion, other metadata) with our parts replaced."""
    body = dict(existing_raw)
    meta = dict(body.get("metadata") or {})
    want = desired.to_dict()
    meta["labels"] = {**(meta.get("labels") or {}), **(want["metadata"].get("labels") or {})}
    meta["annotations"] = {**(meta.get("annotations") or {}), **(want["metadata"].get("annotations") or {})}
    for key in DROPPED_WHEN_ABSENT:
        if key not in (want["metadata"].get("annotations") or {}):
            meta["annotations"].pop(key, None)
    if want["metadata"].get("ownerReferences"):
        meta["ownerReferences"] = want["metadata"]["ownerReferences"]
    body["metadata"] = meta
    body["spec"] = want["spec"]
    body["apiVersion"] = "scheduling.run.ai/v2alpha2"
    body["kind"] = "PodGroup"
    return body


def without_zero_min_member(pg: PodGroup) -> PodGroup:
    """``pg`` with every ``minMember: 0`` (the PodGroup's and its subgroups') left out; ``pg`` itself is unchanged."""
    spec = pg.spec
    if spec.min_member != 0 and not any(sg.min_member == 0 for sg in spec.sub_groups or []):
        return pg
    out = pg.model_copy(deep=True)
    if out.spec.min_member == 0:
        out.spec.min_member = None
    for sg in out.spec.sub_groups or []:
        if sg.min_member == 0:
            sg.min_member = None
    return out


def refuses_zero_min_member(exc: Exception) -> bool:
    """Whether an API error is a CRD schema refusing ``minMember: 0`` (KAI v0.12: "should be greater than or equal
    to 1")."""
    status = getattr(exc, "status", None)
    message = str(getattr(exc, "message", "") or exc)
    return status == 422 and "minMember" in message and "greater than or equal to 1" in message

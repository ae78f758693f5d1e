"""Ray-aware reclaim, the decisions: JSON patches that shrink a KubeRay worker group or suspend/resume a Ray owner.

Pure: dicts in (the RayCluster, the owner, the pods as listed), a plan out (a JSON patch guarded by a ``test`` on
``metadata.resourceVersion``, or a refusal code with a reason naming the field). No API calls, no Ray. The API work
is :mod:`kai_ray.k8s.ray.elastic`; talking to the Ray GCS is :mod:`kai_ray.k8s.ray.raygcs` (Ray autoscaler v2's split:
decide, reconcile, provider).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kai_ray import constants as c
from kai_ray.podgrouper import suspend_blocker

# KubeRay (RayMultiHostIndexing) and the GKE TPU webhook label the pods of one multi-host replica.
REPLICA_NAME_LABEL = "ray.io/worker-group-replica-name"
GKE_REPLICA_INDEX_LABEL = "replicaIndex"
SUSPENDABLE_KINDS = ("RayJob", "RayCluster", "RayService")

# Refusal codes of plan_shrink / plan_suspend (stable: callers branch on them).
PENDING_DELETES = "PendingDeletes"
ALREADY_REQUESTED = "AlreadyRequested"
BELOW_MIN_REPLICAS = "BelowMinReplicas"
NOT_A_WORKER = "NotAWorker"
UNKNOWN_GROUP = "UnknownGroup"
SUSPENDED = "Suspended"
NO_REPLICA_LABEL = "MultiHostWithoutReplicaLabel"
NO_RESOURCE_VERSION = "NoResourceVersion"
NOT_SUSPENDABLE = "NotSuspendable"
NOTHING_TO_DO = "NothingToDo"


def meta_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return meta_of(obj).get("labels") or {}


def name_of(obj: Mapping[str, Any]) -> str:
    return str(meta_of(obj).get("name") or "")


def is_terminating(pod: Mapping[str, Any]) -> bool:
    return bool(meta_of(pod).get("deletionTimestamp"))


# --- shrink -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupShrink:
    """One worker group's part of a shrink: ``replicas`` before/after and the pods KubeRay must delete."""

    group: str
    index: int
    replicas_before: int
    replicas_after: int
    workers_to_delete: tuple[str, ...]


@dataclass(frozen=True)
class ShrinkPlan:
    """A JSON patch for the RayCluster, or ``patch=None`` and a refusal ``code`` with a ``reason`` naming the field."""

    patch: list[dict[str, Any]] | None
    code: str = ""
    reason: str = ""
    groups: tuple[GroupShrink, ...] = ()

    @property
    def ok(self) -> bool:
        return self.patch is not None

    def summary(self) -> str:
        if not self.ok:
            return f"{self.code}: {self.reason}"
        parts = [
            f"{g.group} {g.replicas_before}->{g.replicas_after} (delete {', '.join(g.workers_to_delete)})"
            for g in self.groups
        ]
        return "; ".join(parts)


def _refuse(code: str, reason: str) -> ShrinkPlan:
    return ShrinkPlan(None, code, reason)


def _int(value: Any, default: int) -> int:
    return default if value is None else int(value)


def _replica_key(pod: Mapping[str, Any]) -> str | None:
    labels = labels_of(pod)
    return labels.get(REPLICA_NAME_LABEL) or labels.get(GKE_REPLICA_INDEX_LABEL)


def pending_deletes(raycluster: Mapping[str, Any], existing: Iterable[str]) -> dict[str, list[str]]:
    """Per group, the pods named in ``workersToDelete`` that still exist (the Ray autoscaler's ``safe_to_scale``)."""
    live = set(existing)
    out: dict[str, list[str]] = {}
    for wg in (raycluster.get("spec") or {}).get("workerGroupSpecs") or []:
        names = ((wg.get("scaleStrategy") or {}).get("workersToDelete")) or []
        still = [n for n in names if n in live]
        if still:
            out[str(wg.get("groupName", ""))] = still
    return out


def plan_shrink(
    raycluster: Mapping[str, Any],
    victim_pods: Sequence[Mapping[str, Any]],
    existing_pods: Sequence[Mapping[str, Any]] | None = None,
) -> ShrinkPlan:
    """Lower each victim's worker group by the replicas the victims make up and list exactly them for deletion.

    ``victim_pods`` and ``existing_pods`` are pod dicts (name and labels are read; the cluster's pods as listed by
    ``ray.io/cluster=<name>``). A victim in a multi-host group takes its whole replica (every existing pod with the same
    replica label) with it. Refuses, with a code, when: the cluster is suspended; a victim is the head, belongs to
    another cluster or an unknown/suspended group; a previous ``workersToDelete`` still names live pods; or the shrink
    would go below ``minReplicas`` (then suspend the owner instead: KubeRay would clamp ``replicas`` back up and
    recreate the pods).
    """
    cluster = name_of(raycluster)
    spec = raycluster.get("spec") or {}
    rv = meta_of(raycluster).get("resourceVersion")
    if not rv:
        return _refuse(NO_RESOURCE_VERSION, f"RayCluster {cluster}: metadata.resourceVersion: missing (read it first)")
    if spec.get("suspend"):
        return _refuse(SUSPENDED, f"RayCluster {cluster}: spec.suspend is true")
    if not victim_pods:
        return _refuse(NOTHING_TO_DO, "no victim pods")
    pods = list(existing_pods) if existing_pods is not None else list(victim_pods)
    live = [p for p in pods if not is_terminating(p)]
    groups = list(spec.get("workerGroupSpecs") or [])
    index = {str(wg.get("groupName", "")): i for i, wg in enumerate(groups)}

    pending = pending_deletes(raycluster, (name_of(p) for p in live))
    victim_names = {name_of(v) for v in victim_pods}
    listed = {
        n
        for wg in groups
        for n in (((wg.get("scaleStrategy") or {}).get("workersToDelete")) or [])
        if n in victim_names
    }
    if listed == victim_names:
        return _refuse(ALREADY_REQUESTED, f"RayCluster {cluster}: workersToDelete already lists {sorted(listed)}")
    if pending:
        what = "; ".join(f"{g}: {', '.join(sorted(n))}" for g, n in sorted(pending.items()))
        return _refuse(
            PENDING_DELETES,
            f"RayCluster {cluster}: spec.workerGroupSpecs[].scaleStrategy.workersToDelete still names live pods "
            f"({what})",
        )

    by_group: dict[str, set[str]] = {}  # group -> replica keys
    deletes: dict[str, set[str]] = {}
    for v in victim_pods:
        name = name_of(v)
        labels = labels_of(v)
        if labels.get(c.RAY_CLUSTER) and labels.get(c.RAY_CLUSTER) != cluster:
            return _refuse(
                NOT_A_WORKER, f"pod {name}: labels[{c.RAY_CLUSTER}]={labels.get(c.RAY_CLUSTER)!r}, not {cluster}"
            )
        if labels.get(c.RAY_NODE_TYPE) != "worker":
            kind = labels.get(c.RAY_NODE_TYPE)
            return _refuse(NOT_A_WORKER, f"pod {name}: labels[{c.RAY_NODE_TYPE}]={kind!r}: only workers can be shrunk")
        group = labels.get(c.RAY_GROUP) or ""
        if group not in index:
            return _refuse(
                UNKNOWN_GROUP, f"pod {name}: labels[{c.RAY_GROUP}]={group!r} is not a worker group of {cluster}"
            )
        wg = groups[index[group]]
        if wg.get("suspend"):
            return _refuse(SUSPENDED, f"RayCluster {cluster}: spec.workerGroupSpecs[{index[group]}].suspend is true")
        hosts = max(1, _int(wg.get("numOfHosts"), 1))
        if hosts == 1:
            by_group.setdefault(group, set()).add(name)
            deletes.setdefault(group, set()).add(name)
            continue
        key = _replica_key(v)
        if key is None:
            return _refuse(
                NO_REPLICA_LABEL,
                f"pod {name}: group {group} has numOfHosts={hosts} but the pod has no {REPLICA_NAME_LABEL} label, "
                "so its replica cannot be deleted whole",
            )
        by_group.setdefault(group, set()).add(key)
        mates = {name_of(p) for p in live if labels_of(p).get(c.RAY_GROUP) == group and _replica_key(p) == key}
        deletes.setdefault(group, set()).update(mates | {name})

    ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/resourceVersion", "value": rv}]
    shrinks: list[GroupShrink] = []
    for group in sorted(by_group, key=lambda g: index[g]):
        i = index[group]
        wg = groups[i]
        lo = _int(wg.get("minReplicas"), 0)
        hi = _int(wg.get("maxReplicas"), 2**31 - 1)
        before = max(lo, min(_int(wg.get("replicas"), 0), hi)) if lo <= hi else hi
        after = before - len(by_group[group])
        if after < lo:
            return _refuse(
                BELOW_MIN_REPLICAS,
                f"RayCluster {cluster}: spec.workerGroupSpecs[{i}] ({group}): removing {len(by_group[group])} "
                f"replica(s) from {before} goes below minReplicas={lo}; suspend the owner instead",
            )
        names = tuple(sorted(deletes[group]))
        ops.append({"op": "add", "path": f"/spec/workerGroupSpecs/{i}/replicas", "value": after})
        ops.append(
            {
                "op": "add",
                "path": f"/spec/workerGroupSpecs/{i}/scaleStrategy",
                "value": {"workersToDelete": list(names)},
            }
        )
        shrinks.append(GroupShrink(group, i, before, after, names))
    # Lists whose pods are all gone are cleared, as the autoscaler does after safe_to_scale.
    for i, wg in enumerate(groups):
        name = str(wg.get("groupName", ""))
        if name not in by_group and ((wg.get("scaleStrategy") or {}).get("workersToDelete")):
            ops.append(
                {"op": "add", "path": f"/spec/workerGroupSpecs/{i}/scaleStrategy", "value": {"workersToDelete": []}}
            )
    return ShrinkPlan(ops, groups=tuple(shrinks))


# --- suspend ----------------------------------------------------------------------------------------------------

# On a RayJob kai-ray suspended: the user's spec.shutdownAfterJobFinishes, put back when the job is resumed.
SHUTDOWN_RESTORE = "kai-ray.io/restore-shutdown-after-job-finishes"
UNSET = "unset"


@dataclass(frozen=True)
class SuspendPlan:
    """A JSON patch for the owner, or ``patch=None`` and a refusal ``code`` with a ``reason`` naming the field.
    ``restored``: for a RayJob whose ``shutdownAfterJobFinishes`` the plan sets (suspend) or puts back (resume), the
    user's value (``"false"``, ``"true"`` or :data:`UNSET`); empty otherwise."""

    patch: list[dict[str, Any]] | None
    code: str = ""
    reason: str = ""
    restored: str = ""

    @property
    def ok(self) -> bool:
        return self.patch is not None


def _annotation_ops(owner: Mapping[str, Any], key: str, value: str | None) -> list[dict[str, Any]]:
    """JSON-patch operations setting (or, for ``None``, removing) one annotation."""
    annotations = meta_of(owner).get("annotations")
    path = "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")
    if value is None:
        return [{"op": "remove", "path": path}] if annotations and key in annotations else []
    if not annotations:
        return [{"op": "add", "path": "/metadata/annotations", "value": {key: value}}]
    return [{"op": "add", "path": path, "value": value}]


def suspend_plan_for(owner_kind: str, owner: Mapping[str, Any], value: bool) -> SuspendPlan:
    name = name_of(owner)
    if owner_kind not in SUSPENDABLE_KINDS:
        return SuspendPlan(None, NOT_SUSPENDABLE, f"{owner_kind} {name}: only {', '.join(SUSPENDABLE_KINDS)} suspend")
    spec = owner.get("spec") or {}
    if value and owner_kind == "RayJob":
        blocker = suspend_blocker("RayJob", name, spec)
        if blocker is not None:
            return SuspendPlan(None, NOT_SUSPENDABLE, blocker)
    already = bool(spec.get("suspend")) == value
    annotations = meta_of(owner).get("annotations") or {}
    if already and not (owner_kind == "RayJob" and not value and SHUTDOWN_RESTORE in annotations):
        return SuspendPlan(None, NOTHING_TO_DO, f"{owner_kind} {name}: spec.suspend is already {str(value).lower()}")
    ops: list[dict[str, Any]] = []
    rv = meta_of(owner).get("resourceVersion")
    if rv:
        ops.append({"op": "test", "path": "/metadata/resourceVersion", "value": rv})
    restored = ""
    if owner_kind == "RayJob" and value and not spec.get("shutdownAfterJobFinishes"):
        # KubeRay suspends a RayJob only with shutdownAfterJobFinishes true (otherwise ValidationFailed, for good).
        # Set it in the same patch as the suspend, and keep the user's value on the RayJob to put back on resume.
        was = "false" if "shutdownAfterJobFinishes" in spec else UNSET
        ops += _annotation_ops(owner, SHUTDOWN_RESTORE, was)
        ops.append({"op": "add", "path": "/spec/shutdownAfterJobFinishes", "value": True})
        restored = was
    if owner_kind == "RayJob" and not value:
        kept = annotations.get(SHUTDOWN_RESTORE)
        if kept is not None:
            if kept == UNSET:
                if "shutdownAfterJobFinishes" in spec:
                    ops.append({"op": "remove", "path": "/spec/shutdownAfterJobFinishes"})
            else:
                ops.append({"op": "add", "path": "/spec/shutdownAfterJobFinishes", "value": kept == "true"})
            ops += _annotation_ops(owner, SHUTDOWN_RESTORE, None)
            restored = str(kept)
    if not already:
        ops.append({"op": "add", "path": "/spec/suspend", "value": value})
    return SuspendPlan(ops, restored=restored)


def plan_suspend(owner_kind: str, owner: Mapping[str, Any]) -> SuspendPlan:
    """JSON patch setting ``spec.suspend: true`` on a RayJob/RayCluster/RayService, or a refusal with its reason. A
    RayJob without ``shutdownAfterJobFinishes: true`` gets it in the same patch (KubeRay refuses to suspend it
    otherwise), its own value kept in :data:`SHUTDOWN_RESTORE` for :func:`plan_resume`."""
    return suspend_plan_for(owner_kind, owner, True)


def plan_resume(owner_kind: str, owner: Mapping[str, Any]) -> SuspendPlan:
    """JSON patch lifting ``spec.suspend`` (the scheduler admitted the gang again) and putting back a RayJob's own
    ``shutdownAfterJobFinishes`` (also when someone else lifted the suspend)."""
    return suspend_plan_for(owner_kind, owner, False)


def ray_owner(podgroup: Mapping[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of the Ray object that owns a PodGroup (its ``ray.io`` owner reference), or None."""
    for ref in meta_of(podgroup).get("ownerReferences") or []:
        if str(ref.get("apiVersion", "")).startswith("ray.io/"):
            return str(ref.get("kind")), str(ref.get("name"))
    return None


# Refusals after which the victims are evicted the plain way: a shrink can never express them.
FALLBACK_CODES = (NOT_A_WORKER, UNKNOWN_GROUP, NO_REPLICA_LABEL, BELOW_MIN_REPLICAS, NO_RESOURCE_VERSION)

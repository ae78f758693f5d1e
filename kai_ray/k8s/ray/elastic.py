"""Ray-aware reclaim: shrink a worker group the way the Ray autoscaler does, suspend whole gangs, drain Ray nodes first.

Why not just delete the victim pods: KubeRay recreates any worker pod deleted behind its back while ``replicas`` is
unchanged, the new pod sits Pending, and Ray sees a node die with no warning (kuberay#5002, KAI#1386). Instead:

- **Elastic surplus** (pods above the gang's minimum): drain the victims' Ray nodes through the GCS with the
  ``PREEMPTION`` reason and a deadline, then lower that group's ``replicas`` and list exactly the victims in
  ``scaleStrategy.workersToDelete`` (one JSON patch guarded by a ``test`` on ``metadata.resourceVersion``). KubeRay then
  deletes those pods and creates none. While a previous ``workersToDelete`` still names live pods we refuse, as the
  Ray autoscaler's ``safe_to_scale`` does, so two writers never fight over the list.
- **Whole gangs**: set ``spec.suspend`` on the owner (RayJob, RayCluster; RayService where its CRD has the field) and
  lift it when the scheduler admits the gang again. A suspended RayJob requeues instead of running headless.

Three modules, as Ray autoscaler v2 splits deciding, reconciling and the provider: :mod:`kai_ray.k8s.ray.rayplan` plans
(pure: dicts in, JSON patch out), :mod:`kai_ray.k8s.ray.raygcs` drains Ray nodes, and this module does the few API calls
(``apply_*``); :mod:`kai_ray.k8s.ray.ray_reclaim` runs them for the scheduler's victims. The PodGroup records what was
done under :data:`SHRINK_ANNOTATION` / :data:`SUSPEND_ANNOTATION`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kai_ray import constants as c
from kai_ray.durations import rfc3339
from kai_ray.k8s.base.rest import ApiError, Kube, podgroups_path, pods_path, ray_path
from kai_ray.k8s.ray.drainfirst import drain_and_wait
from kai_ray.k8s.ray.raygcs import DrainOutcome, gcs_address_for
from kai_ray.k8s.ray.rayplan import (
    ALREADY_REQUESTED,
    NOT_SUSPENDABLE,
    NOTHING_TO_DO,
    SUSPENDABLE_KINDS,
    ShrinkPlan,
    meta_of,
    name_of,
    plan_shrink,
    suspend_plan_for,
)

log = logging.getLogger(__name__)

# Written on the PodGroup (JSON) so users and the scheduler see why a gang lost workers or was suspended.
SHRINK_ANNOTATION = "kai-ray.io/last-shrink"
SUSPEND_ANNOTATION = "kai-ray.io/suspended"


# --- apply ------------------------------------------------------------------------------------------------------


@dataclass
class ShrinkOutcome:
    """Result of :func:`apply_shrink`: ``applied`` or not, the plan, per-pod drain outcomes and timings."""

    applied: bool
    plan: ShrinkPlan
    drains: list[DrainOutcome] = field(default_factory=list)
    attempts: int = 0
    waited_s: float = 0.0
    message: str = ""
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def in_effect(self) -> bool:
        """Applied now, or an earlier shrink already lists exactly these victims."""
        return self.applied or self.plan.code == ALREADY_REQUESTED


@dataclass
class SuspendOutcome:
    applied: bool
    code: str = ""
    message: str = ""
    record: dict[str, Any] = field(default_factory=dict)


def _list_cluster_pods(kube: Kube, namespace: str, cluster: str) -> list[dict[str, Any]]:
    body = kube.get(pods_path(namespace), labelSelector=f"{c.RAY_CLUSTER}={cluster}")
    return list((body or {}).get("items") or [])


def record_on_podgroup(kube: Kube, namespace: str, podgroup: str, key: str, value: Mapping[str, Any] | None) -> bool:
    """Merge-patch one JSON annotation onto the PodGroup (``None`` removes it). False if the PodGroup is gone."""
    text = None if value is None else json.dumps(value, sort_keys=True, separators=(",", ":"))
    try:
        kube.merge_patch(podgroups_path(namespace, podgroup), {"metadata": {"annotations": {key: text}}})
        return True
    except ApiError as exc:
        if exc.not_found:
            return False
        raise


def _conflict(exc: ApiError) -> bool:
    # A failed JSON-patch ``test`` is 422 (Unprocessable); a racing update can also be 409.
    return exc.status in (409, 422)


def apply_shrink(
    kube: Kube,
    namespace: str,
    cluster: str,
    victims: Sequence[str],
    *,
    reason: str,
    message: str = "",
    podgroup: str | None = None,
    gcs_address: str | None = "auto",
    drain_deadline_s: float = 30.0,
    drain_timeout_s: float = 5.0,
    wait_for_drain: bool = True,
    retries: int = 3,
    sleep: Callable[[float], None] = time.sleep,
) -> ShrinkOutcome:
    """Drain the victims' Ray nodes, then shrink their worker groups on RayCluster ``cluster``.

    Steps: read the cluster and its pods and check the plan; drain through the GCS (``gcs_address="auto"`` finds the
    head pod, ``None`` skips draining); wait until the drained nodes have exited or the deadline passed (actors killed
    after it report ``preempted``; killed before it Ray calls the death unexpected); read again, plan again and send the
    guarded patch, retrying on a resourceVersion conflict. Records the shrink on ``podgroup`` (default: the victims'
    ``pod-group-name`` annotation). A refused plan changes nothing and says why.
    """
    rc_path = ray_path("RayCluster", namespace, cluster)
    raycluster = kube.get(rc_path)
    pods = _list_cluster_pods(kube, namespace, cluster)
    by_name = {name_of(p): p for p in pods}
    missing = [v for v in victims if v not in by_name]
    victim_pods = [by_name[v] for v in victims if v in by_name]
    plan = plan_shrink(raycluster, victim_pods, pods)
    if not plan.ok:
        return ShrinkOutcome(False, plan, message=plan.summary())
    if podgroup is None:
        podgroup = next((meta_of(p).get("annotations", {}).get(c.PODGROUP_ANNOTATION) for p in victim_pods), None)

    drains: list[DrainOutcome] = []
    waited = 0.0
    if gcs_address is not None:
        address = gcs_address_for(raycluster, pods) if gcs_address == "auto" else gcs_address
        to_drain = [by_name[n] for g in plan.groups for n in g.workers_to_delete if n in by_name]
        drains, waited = drain_and_wait(
            address, to_drain, message or reason, drain_deadline_s, timeout_s=drain_timeout_s, wait=wait_for_drain
        )

    attempts = 0
    while True:
        attempts += 1
        try:
            kube.json_patch(rc_path, plan.patch or [])
            break
        except ApiError as exc:
            if not _conflict(exc) or attempts > retries:
                return ShrinkOutcome(
                    False, plan, drains, attempts, waited, f"patch of RayCluster {cluster} failed: {exc}"
                )
        sleep(0.05 * attempts)
        raycluster = kube.get(rc_path)
        pods = _list_cluster_pods(kube, namespace, cluster)
        by_name = {name_of(p): p for p in pods}
        victim_pods = [by_name[v] for v in victims if v in by_name]
        plan = plan_shrink(raycluster, victim_pods, pods)
        if not plan.ok:
            return ShrinkOutcome(False, plan, drains, attempts, waited, plan.summary())

    record = {
        "at": rfc3339(),
        "reason": reason,
        "message": message,
        "cluster": cluster,
        "groups": {
            g.group: {"from": g.replicas_before, "to": g.replicas_after, "deleted": list(g.workers_to_delete)}
            for g in plan.groups
        },
        "drain": {d.pod: d.status for d in drains},
    }
    if missing:
        record["missing"] = missing
    if podgroup:
        record_on_podgroup(kube, namespace, podgroup, SHRINK_ANNOTATION, record)
    return ShrinkOutcome(True, plan, drains, attempts, waited, plan.summary(), record)


def _set_suspend(
    kube: Kube,
    owner_kind: str,
    namespace: str,
    name: str,
    value: bool,
    *,
    reason: str,
    message: str,
    podgroup: str | None,
    retries: int,
) -> SuspendOutcome:
    path = ray_path(owner_kind, namespace, name) if owner_kind in SUSPENDABLE_KINDS else ""
    if not path:
        return SuspendOutcome(
            False, NOT_SUSPENDABLE, f"{owner_kind} {name}: only {', '.join(SUSPENDABLE_KINDS)} suspend"
        )
    attempts = 0
    while True:
        attempts += 1
        owner = kube.get(path)
        plan = suspend_plan_for(owner_kind, owner, value)
        if not plan.ok:
            return SuspendOutcome(plan.code == NOTHING_TO_DO, plan.code, plan.reason)
        try:
            result = kube.json_patch(path, plan.patch or [])
            break
        except ApiError as exc:
            if not _conflict(exc) or attempts > retries:
                return SuspendOutcome(False, "PatchFailed", f"patch of {owner_kind} {name} failed: {exc}")
    if bool(((result or {}).get("spec") or {}).get("suspend")) != value:
        # The API server pruned the field: this KubeRay version's CRD has no spec.suspend for the kind.
        return SuspendOutcome(
            False, NOT_SUSPENDABLE, f"{owner_kind} {name}: spec.suspend is not part of the installed {owner_kind} CRD"
        )
    record: dict[str, Any] = {"at": rfc3339(), "reason": reason, "message": message, "owner": f"{owner_kind}/{name}"}
    if plan.restored and value:
        record["shutdownAfterJobFinishes"] = f"set true for the suspension (was {plan.restored})"
    if podgroup:
        record_on_podgroup(kube, namespace, podgroup, SUSPEND_ANNOTATION, record if value else None)
    verb = "suspended" if value else "resumed"
    return SuspendOutcome(True, "", f"{owner_kind} {name} {verb}: {message or reason}", record)


def apply_suspend(
    kube: Kube,
    owner_kind: str,
    namespace: str,
    name: str,
    *,
    reason: str,
    message: str = "",
    podgroup: str | None = None,
    retries: int = 3,
) -> SuspendOutcome:
    """Set ``spec.suspend: true`` on the owner (KubeRay deletes its pods; a RayJob requeues) and record why on the
    PodGroup. Refusals (e.g. a RayJob without ``shutdownAfterJobFinishes``) change nothing; evict pods instead."""
    return _set_suspend(
        kube, owner_kind, namespace, name, True, reason=reason, message=message, podgroup=podgroup, retries=retries
    )


def apply_resume(
    kube: Kube,
    owner_kind: str,
    namespace: str,
    name: str,
    *,
    reason: str = "Admitted",
    message: str = "",
    podgroup: str | None = None,
    retries: int = 3,
) -> SuspendOutcome:
    """Lift ``spec.suspend`` and remove the PodGroup's suspend record."""
    return _set_suspend(
        kube, owner_kind, namespace, name, False, reason=reason, message=message, podgroup=podgroup, retries=retries
    )

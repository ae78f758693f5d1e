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
(``apply_*``) and runs the scheduler's eviction interceptor. The PodGroup records what was done under
:data:`SHRINK_ANNOTATION` / :data:`SUSPEND_ANNOTATION`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kai_ray import constants as c
from kai_ray.durations import rfc3339
from kai_ray.k8s.base.rest import ApiError, Kube, podgroups_path, pods_path, ray_path
from kai_ray.k8s.ray.drainfirst import DrainDeadline, DrainReport, apply_drain, drain_and_wait
from kai_ray.k8s.ray.raygcs import DrainOutcome, gcs_address_for
from kai_ray.k8s.ray.rayplan import (
    ALREADY_REQUESTED,
    FALLBACK_CODES,
    NOT_SUSPENDABLE,
    NOTHING_TO_DO,
    SUSPENDABLE_KINDS,
    ShrinkPlan,
    labels_of,
    meta_of,
    name_of,
    plan_shrink,
    ray_owner,
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


@dataclass
class ReclaimRecord:
    """One Ray-aware reclaim the interceptor performed (kept for metrics, tests and ``kai-ray explain``)."""

    kind: str  # "shrink" | "suspend" | "drain" (drained, then evicted)
    target: str  # namespace/name of the RayCluster or owner
    pods: list[str]
    ok: bool
    code: str
    message: str
    seconds: float
    drains: list[DrainOutcome] = field(default_factory=list)
    deferred: bool = False  # not done and not evicted instead: the next cycle decides again (a RayJob's suspend)


class ElasticReclaimer:
    """An eviction interceptor for the scheduler operator (``SchedulerOperator.eviction_interceptors``).

    Elastic victims that are KubeRay workers become one shrink per RayCluster (drain, then ``replicas`` down and
    ``workersToDelete``); the victims of a job that loses its whole gang, when its PodGroup's owner is one of
    ``suspend_kinds``, become a suspend of that owner (every victim of that job: shrinking the surplus of a gang that
    goes anyway would only race the suspend). Everything else is returned for plain eviction. The API work runs on a
    small thread pool, because a shrink waits up to ``drain_deadline_s`` for the drain; refusals that a shrink can
    never express (a head pod, an unknown group, ...) are handed to ``fallback`` (the operator's own eviction), while
    ``PendingDeletes`` is left for a later cycle to decide again (killing the pod would restart the recreate loop).
    A RayJob that cannot be suspended now is never evicted instead (KubeRay would fail it for good): its victims are
    handed to ``release`` (the operator forgets they are being evicted) and the next cycle decides again.

    Drain first (:mod:`kai_ray.k8s.ray.drainfirst`): whatever happens to a KubeRay pod, shrink, suspend or eviction,
    its Ray node is drained with the ``PREEMPTION`` reason and the gang's deadline first, so Ray Train gets its
    preemption notice and Serve moves replicas away; pods that are no Ray node are returned for plain eviction at once.
    ``deadline_of`` ((namespace, podgroup) -> :class:`DrainDeadline`) gives each gang's deadline; without it every
    gang gets ``drain_deadline_s``.

    ``gcs_address``: ``"auto"`` (the head pod's IP and GCS port), ``None`` (no draining), or a function
    ``(namespace, cluster) -> address``. ``shrink=False`` leaves elastic victims to plain eviction. ``labels_of``
    (victim -> pod labels) and ``owner_of`` ((namespace, podgroup) -> (kind, name) of its Ray owner, or None) let the
    caller answer from its informer cache instead of the API.
    """

    def __init__(
        self,
        kube: Kube,
        *,
        shrink: bool = True,
        suspend_kinds: Sequence[str] = ("RayJob",),
        gcs_address: str | Callable[[str, str], str | None] | None = "auto",
        drain_deadline_s: float = 30.0,
        fallback: Callable[[Any, Any], None] | None = None,
        workers: int = 16,  # a drain waits up to its deadline: many clusters drain at once
        labels_of: Callable[[Any], Mapping[str, str] | None] | None = None,
        owner_of: Callable[[str, str], tuple[str, str] | None] | None = None,
        release: Callable[[Any], None] | None = None,
        on_record: Callable[[ReclaimRecord], None] | None = None,
        deadline_of: Callable[[str, str | None], DrainDeadline] | None = None,
    ) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.kube = kube
        self.shrink = shrink
        self.suspend_kinds = tuple(suspend_kinds)
        self.gcs_address = gcs_address
        self.drain_deadline_s = drain_deadline_s
        self.fallback = fallback
        self.labels_of = labels_of
        self.owner_of = owner_of
        self.release = release
        self.on_record = on_record  # e.g. the operator's metrics
        self.deadline_of = deadline_of
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kai-ray-reclaim")
        self.records: list[ReclaimRecord] = []
        self._lock = threading.Lock()

    def close(self, wait: bool = True) -> None:
        self.pool.shutdown(wait=wait, cancel_futures=not wait)

    def __call__(self, victims: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        remaining: list[tuple[Any, Any]] = []
        shrinks: dict[tuple[str, str], list[tuple[Any, Any]]] = {}
        suspends: dict[tuple[str, str, str, str], list[tuple[Any, Any]]] = {}
        drains: dict[tuple[str, str, str], list[tuple[Any, Any]]] = {}
        by_job: dict[str, list[tuple[Any, Any]]] = {}
        for p, e in victims:
            by_job.setdefault(str(getattr(e, "job", "") or f"{p.namespace}/{p.group}"), []).append((p, e))
        for items in by_job.values():
            p0 = items[0][0]
            if self.suspend_kinds and p0.group and any(getattr(e, "whole_gang", False) for _, e in items):
                try:
                    owner = self._owner(p0.namespace, p0.group)
                except ApiError as exc:
                    owner = None
                    if not exc.not_found:
                        log.info("owner of PodGroup %s/%s: %s; evicting its pods", p0.namespace, p0.group, exc)
                if owner is not None and owner[0] in self.suspend_kinds:
                    suspends[(p0.namespace, owner[0], owner[1], p0.group)] = items
                    continue
            for p, e in items:
                if not (self.shrink and getattr(e, "elastic", False)) and self.gcs_address is None:
                    remaining.append((p, e))
                    continue
                try:
                    labels = self._labels(p)
                except ApiError as exc:
                    if exc.not_found:
                        continue  # already gone: nothing to evict
                    log.info("reclaim of %s/%s: %s; evicting it instead", p.namespace, p.name, exc)
                    labels = {}
                cluster = labels.get(c.RAY_CLUSTER)
                if self.shrink and getattr(e, "elastic", False) and labels.get(c.RAY_NODE_TYPE) == "worker" and cluster:
                    shrinks.setdefault((p.namespace, cluster), []).append((p, e))
                elif cluster and self.gcs_address is not None:
                    drains.setdefault((p.namespace, cluster, str(p.group or "")), []).append((p, e))
                else:
                    remaining.append((p, e))
        for (ns, cluster), group in shrinks.items():
            self.pool.submit(self._shrink, ns, cluster, group)
        for (ns, kind, name, pg), group in suspends.items():
            self.pool.submit(self._suspend, ns, kind, name, pg, group)
        for (ns, cluster, _), group in drains.items():
            self.pool.submit(self._drain_then_evict, ns, cluster, group)
        return remaining

    def _labels(self, p: Any) -> Mapping[str, str]:
        if self.labels_of is not None:
            return self.labels_of(p) or {}
        return labels_of(self.kube.get(pods_path(p.namespace, p.name)))

    def _owner(self, namespace: str, podgroup: str) -> tuple[str, str] | None:
        if self.owner_of is not None:
            return self.owner_of(namespace, podgroup)
        return ray_owner(self.kube.get(podgroups_path(namespace, podgroup)))

    def _deadline(self, namespace: str, podgroup: str | None) -> DrainDeadline:
        if self.deadline_of is None:
            return DrainDeadline(self.drain_deadline_s, "default")
        return self.deadline_of(namespace, podgroup)

    def _drain(self, namespace: str, cluster: str, items: list[tuple[Any, Any]]) -> DrainReport:
        """Drain the Ray nodes of these victims of one RayCluster and wait (bounded by the gang's deadline)."""
        deadline = self._deadline(namespace, items[0][0].group)
        _, message = self._reason(items)
        try:
            return apply_drain(
                self.kube,
                namespace,
                cluster,
                [p.name for p, _ in items],
                message=message,
                deadline_s=deadline.seconds,
                gcs_address=self._address(namespace, cluster),
            )
        except Exception as exc:
            log.warning("draining Ray nodes of RayCluster %s/%s failed: %s; evicting anyway", namespace, cluster, exc)
            return DrainReport(cluster, deadline.seconds)

    def _drain_then_evict(self, namespace: str, cluster: str, items: list[tuple[Any, Any]]) -> None:
        t0 = time.monotonic()
        report = self._drain(namespace, cluster, items)
        names = [p.name for p, _ in items]
        message = f"drained {len(report.accepted)} of {len(names)} Ray nodes in {report.waited_s:.1f}s, then evicted"
        self._record(
            ReclaimRecord(
                "drain", f"{namespace}/{cluster}", names, True, "", message, time.monotonic() - t0, report.drains
            )
        )
        self._fall_back(items, drained=True)

    def _address(self, namespace: str, cluster: str) -> str | None:
        if callable(self.gcs_address):
            return self.gcs_address(namespace, cluster)
        return self.gcs_address

    def _reason(self, items: list[tuple[Any, Any]]) -> tuple[str, str]:
        e = items[0][1]
        reason = getattr(getattr(e, "reason", None), "value", None) or str(getattr(e, "reason", "Reclaimed"))
        who = f" for {e.preemptor}" if getattr(e, "preemptor", None) else ""
        return reason, f"kai-ray {reason.lower()}{who}"

    def _record(self, rec: ReclaimRecord) -> None:
        with self._lock:
            self.records.append(rec)
            del self.records[:-1000]
        if self.on_record is not None:
            self.on_record(rec)

    def _release(self, items: list[tuple[Any, Any]]) -> None:
        if self.release is None:
            return
        for p, _ in items:
            try:
                self.release(p)
            except Exception as exc:
                log.warning("releasing victim %s/%s failed: %s", p.namespace, p.name, exc)

    def _fall_back(self, items: list[tuple[Any, Any]], *, drained: bool = False) -> None:
        """Plain eviction through the operator; Ray pods not drained yet are drained first (by RayCluster)."""
        if self.fallback is None:
            return
        if not drained and self.gcs_address is not None:
            by_cluster: dict[str, list[tuple[Any, Any]]] = {}
            others = []
            for p, e in items:
                try:
                    cluster = self._labels(p).get(c.RAY_CLUSTER)
                except ApiError:
                    cluster = None
                if cluster:
                    by_cluster.setdefault(cluster, []).append((p, e))
                else:
                    others.append((p, e))
            for cluster, group in by_cluster.items():
                self._drain_then_evict(group[0][0].namespace, cluster, group)
            items = others
        for p, e in items:
            try:
                self.fallback(p, e)
            except Exception as exc:
                log.warning("fallback eviction of %s/%s failed: %s", p.namespace, p.name, exc)

    def _shrink(self, namespace: str, cluster: str, items: list[tuple[Any, Any]]) -> None:
        t0 = time.monotonic()
        reason, message = self._reason(items)
        names = [p.name for p, _ in items]
        try:
            out = apply_shrink(
                self.kube,
                namespace,
                cluster,
                names,
                reason=reason,
                message=message,
                podgroup=items[0][0].group,
                gcs_address=self._address(namespace, cluster),
                drain_deadline_s=self._deadline(namespace, items[0][0].group).seconds,
            )
        except Exception as exc:
            log.warning("shrink of RayCluster %s/%s failed: %s; evicting instead", namespace, cluster, exc)
            self._record(ReclaimRecord("shrink", f"{namespace}/{cluster}", names, False, "Error", str(exc), 0.0))
            self._fall_back(items)
            return
        took = time.monotonic() - t0
        ok = out.in_effect
        self._record(
            ReclaimRecord("shrink", f"{namespace}/{cluster}", names, ok, out.plan.code, out.message, took, out.drains)
        )
        if ok:
            log.info("shrank RayCluster %s/%s in %.1fs: %s", namespace, cluster, took, out.message)
        elif out.plan.code in FALLBACK_CODES:
            log.info("cannot shrink RayCluster %s/%s (%s); evicting", namespace, cluster, out.message)
            self._fall_back(items)
        else:
            log.info("shrink of RayCluster %s/%s deferred: %s", namespace, cluster, out.message)

    def _suspend(self, namespace: str, kind: str, name: str, podgroup: str, items: list[tuple[Any, Any]]) -> None:
        t0 = time.monotonic()
        reason, message = self._reason(items)
        names = [p.name for p, _ in items]
        drains: list[DrainOutcome] = []
        if self.gcs_address is not None:
            by_cluster: dict[str, list[tuple[Any, Any]]] = {}
            for p, e in items:
                with contextlib.suppress(ApiError):
                    cluster = self._labels(p).get(c.RAY_CLUSTER)
                    if cluster:
                        by_cluster.setdefault(cluster, []).append((p, e))
            for cluster, group in by_cluster.items():
                drains.extend(self._drain(namespace, cluster, group).drains)
        try:
            out = apply_suspend(self.kube, kind, namespace, name, reason=reason, message=message, podgroup=podgroup)
        except Exception as exc:
            out = SuspendOutcome(False, "Error", str(exc))
        self._record(
            ReclaimRecord(
                "suspend",
                f"{namespace}/{name}",
                names,
                out.applied,
                out.code,
                out.message,
                time.monotonic() - t0,
                drains,
                deferred=not out.applied and kind == "RayJob",
            )
        )
        if out.applied:
            return
        if kind == "RayJob":
            # Evicting a RayJob's pods fails it for good (KubeRay does not recreate its head): never. The victims go
            # back to the core, which decides again next cycle (the suspend is retried, or someone else yields).
            log.info("cannot suspend RayJob %s/%s now (%s); its pods are not evicted", namespace, name, out.message)
            self._release(items)
            return
        log.info("cannot suspend %s %s/%s (%s); evicting its pods", kind, namespace, name, out.message)
        self._fall_back(items, drained=True)

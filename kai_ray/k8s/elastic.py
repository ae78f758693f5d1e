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

The ``plan_*`` functions are pure (dicts in, JSON patch out) so they can be tested and reused; ``apply_*`` do the few
API calls. The PodGroup records what was done under :data:`SHRINK_ANNOTATION` / :data:`SUSPEND_ANNOTATION`.

Ray is imported lazily: the core install has no ``ray``; without it, draining reports ``unavailable`` and the shrink
still happens.
"""

from __future__ import annotations

import importlib
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

from kai_ray import constants as c
from kai_ray.k8s.rest import ApiError, Kube, podgroups_path, pods_path, ray_path

log = logging.getLogger(__name__)

# Written on the PodGroup (JSON) so users and the scheduler see why a gang lost workers or was suspended.
SHRINK_ANNOTATION = "kai-ray.io/last-shrink"
SUSPEND_ANNOTATION = "kai-ray.io/suspended"

# KubeRay (RayMultiHostIndexing) and the GKE TPU webhook label the pods of one multi-host replica.
REPLICA_NAME_LABEL = "ray.io/worker-group-replica-name"
GKE_REPLICA_INDEX_LABEL = "replicaIndex"

DRAIN_REASON_PREEMPTION = "DRAIN_NODE_REASON_PREEMPTION"
DEFAULT_GCS_PORT = 6379
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


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return _meta(obj).get("labels") or {}


def _name(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("name") or "")


def _terminating(pod: Mapping[str, Any]) -> bool:
    return bool(_meta(pod).get("deletionTimestamp"))


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
    labels = _labels(pod)
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
    cluster = _name(raycluster)
    spec = raycluster.get("spec") or {}
    rv = _meta(raycluster).get("resourceVersion")
    if not rv:
        return _refuse(NO_RESOURCE_VERSION, f"RayCluster {cluster}: metadata.resourceVersion: missing (read it first)")
    if spec.get("suspend"):
        return _refuse(SUSPENDED, f"RayCluster {cluster}: spec.suspend is true")
    if not victim_pods:
        return _refuse(NOTHING_TO_DO, "no victim pods")
    pods = list(existing_pods) if existing_pods is not None else list(victim_pods)
    live = [p for p in pods if not _terminating(p)]
    groups = list(spec.get("workerGroupSpecs") or [])
    index = {str(wg.get("groupName", "")): i for i, wg in enumerate(groups)}

    pending = pending_deletes(raycluster, (_name(p) for p in live))
    victim_names = {_name(v) for v in victim_pods}
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
        name = _name(v)
        labels = _labels(v)
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
        mates = {_name(p) for p in live if _labels(p).get(c.RAY_GROUP) == group and _replica_key(p) == key}
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


@dataclass(frozen=True)
class SuspendPlan:
    patch: list[dict[str, Any]] | None
    code: str = ""
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.patch is not None


def _suspend_plan(owner_kind: str, owner: Mapping[str, Any], value: bool) -> SuspendPlan:
    name = _name(owner)
    if owner_kind not in SUSPENDABLE_KINDS:
        return SuspendPlan(None, NOT_SUSPENDABLE, f"{owner_kind} {name}: only {', '.join(SUSPENDABLE_KINDS)} suspend")
    spec = owner.get("spec") or {}
    if value and owner_kind == "RayJob":
        # KubeRay marks such a RayJob ValidationFailed instead of suspending it.
        if not spec.get("shutdownAfterJobFinishes"):
            return SuspendPlan(
                None,
                NOT_SUSPENDABLE,
                f"RayJob {name}: spec.shutdownAfterJobFinishes is not true, and KubeRay refuses to suspend such a job",
            )
        if spec.get("clusterSelector"):
            return SuspendPlan(
                None,
                NOT_SUSPENDABLE,
                f"RayJob {name}: spec.clusterSelector jobs run on a shared cluster; not suspended",
            )
    if bool(spec.get("suspend")) == value:
        return SuspendPlan(None, NOTHING_TO_DO, f"{owner_kind} {name}: spec.suspend is already {str(value).lower()}")
    ops: list[dict[str, Any]] = []
    rv = _meta(owner).get("resourceVersion")
    if rv:
        ops.append({"op": "test", "path": "/metadata/resourceVersion", "value": rv})
    ops.append({"op": "add", "path": "/spec/suspend", "value": value})
    return SuspendPlan(ops)


def plan_suspend(owner_kind: str, owner: Mapping[str, Any]) -> SuspendPlan:
    """JSON patch setting ``spec.suspend: true`` on a RayJob/RayCluster/RayService, or a refusal with its reason."""
    return _suspend_plan(owner_kind, owner, True)


def plan_resume(owner_kind: str, owner: Mapping[str, Any]) -> SuspendPlan:
    """JSON patch lifting ``spec.suspend`` (the scheduler admitted the gang again)."""
    return _suspend_plan(owner_kind, owner, False)


# --- drain ------------------------------------------------------------------------------------------------------

ACCEPTED = "accepted"
REJECTED = "rejected"
NOT_FOUND = "not-found"
AMBIGUOUS = "ambiguous"
UNREACHABLE = "unreachable"
UNAVAILABLE = "unavailable"  # ray is not installed here
ERROR = "error"


@dataclass(frozen=True)
class DrainOutcome:
    """What happened to one pod's Ray node: ``status`` is one of the constants above."""

    pod: str
    status: str
    node_id: str | None = None
    message: str = ""
    seconds: float = 0.0


PodRef = str | Mapping[str, Any]


def _pod_keys(ref: PodRef) -> tuple[str, str | None]:
    """(name-or-ip, ip) of a pod reference: a pod dict gives its name and status.podIP; a string is either."""
    if isinstance(ref, str):
        return ref, None
    return _name(ref), (ref.get("status") or {}).get("podIP")


def match_ray_nodes(nodes: Sequence[Mapping[str, Any]], refs: Sequence[PodRef]) -> dict[str, tuple[str | None, str]]:
    """Map each pod to an alive Ray node: by ``RAY_CLOUD_INSTANCE_ID`` (KubeRay sets it to the pod name), then node
    name or a ``ray.io/pod-name`` label, then IP when exactly one alive node has it. ``nodes`` are dicts with keys
    ``node_id`` (hex), ``instance_id``, ``node_name``, ``ip``, ``labels``, ``alive``, ``is_head``.
    Returns pod -> (node_id or None, status-or-detail)."""
    alive = [n for n in nodes if n.get("alive")]
    out: dict[str, tuple[str | None, str]] = {}
    for ref in refs:
        key, ip = _pod_keys(ref)
        found = [n for n in alive if n.get("instance_id") and n.get("instance_id") == key]
        if not found:
            found = [
                n
                for n in alive
                if (n.get("labels") or {}).get("ray.io/pod-name") == key
                or (n.get("node_name") == key and n.get("node_name") != n.get("ip"))
            ]
        if not found:
            for addr in (ip, key):
                if addr:
                    found = [n for n in alive if n.get("ip") == addr]
                    if found:
                        break
        if len(found) == 1:
            out[key] = (str(found[0]["node_id"]), "matched")
        elif not found:
            out[key] = (None, NOT_FOUND)
        else:
            out[key] = (None, AMBIGUOUS)
    return out


def _ray(module: str) -> Any:
    """Ray modules, imported on first use (untyped: Ray's stubs lag its private API)."""
    return importlib.import_module(module)


def _split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host:
        return address, DEFAULT_GCS_PORT
    return host.strip("[]"), int(port)


def _tcp_reachable(address: str, timeout: float) -> str | None:
    """None when something listens at ``address``; otherwise why not. A cheap pre-check: Ray's GcsClient would
    otherwise block for about 40 s on a dead address."""
    try:
        host, port = _split_address(address)
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except (OSError, ValueError) as exc:
        return f"GCS at {address} is unreachable: {exc}"


def _gcs_nodes(client: Any, timeout: float) -> list[dict[str, Any]]:
    infos = client.get_all_node_info(timeout=timeout)
    nodes = []
    for nid, info in infos.items():
        nodes.append(
            {
                "node_id": nid.hex(),
                "instance_id": info.instance_id,
                "node_name": info.node_name,
                "ip": info.node_manager_address,
                "labels": dict(info.labels),
                "alive": info.state == 0,  # GcsNodeInfo.ALIVE
                "is_head": info.is_head_node,
            }
        )
    return nodes


def _drain_sync(
    gcs_address: str, refs: Sequence[PodRef], message: str, deadline_ms: int, timeout: float
) -> list[DrainOutcome]:
    reason = _ray("ray.core.generated.autoscaler_pb2").DrainNodeReason.Value(DRAIN_REASON_PREEMPTION)
    client = _ray("ray._raylet").GcsClient(address=gcs_address)
    matched = match_ray_nodes(_gcs_nodes(client, timeout), refs)
    out = []
    for ref in refs:
        pod = _pod_keys(ref)[0]
        node_id, detail = matched[pod]
        if node_id is None:
            out.append(DrainOutcome(pod, detail, None, f"no single alive Ray node for pod {pod} ({detail})"))
            continue
        t0 = time.monotonic()
        try:
            accepted, why = client.drain_node(node_id, reason, message, deadline_ms, timeout=timeout)
        except Exception as exc:  # RpcError and friends: report, never raise into the shrink
            out.append(DrainOutcome(pod, ERROR, node_id, f"drain_node failed: {exc}", time.monotonic() - t0))
            continue
        status = ACCEPTED if accepted else REJECTED
        out.append(DrainOutcome(pod, status, node_id, str(why or ""), time.monotonic() - t0))
    return out


def drain_ray_nodes(
    gcs_address: str,
    pod_names_or_ips: Sequence[PodRef],
    reason: str,
    deadline_s: float,
    *,
    timeout_s: float = 5.0,
) -> list[DrainOutcome]:
    """Ask the GCS to drain the Ray nodes of these pods with the PREEMPTION reason and a deadline ``deadline_s`` from
    now: they take no new work, running tasks and actors get until the deadline, and actors killed afterwards report
    ``preempted``. The deadline is advisory (Ray does not kill the node); the shrink that follows does.

    Never raises and never blocks longer than about ``timeout_s``: an unreachable GCS gives ``unreachable`` for every
    pod, a missing ``ray`` package ``unavailable``. Pods are names (matched to ``RAY_CLOUD_INSTANCE_ID``) or IPs, or
    pod dicts (name and ``status.podIP``)."""
    pods = [_pod_keys(r)[0] for r in pod_names_or_ips]
    if not pods:
        return []
    try:
        _ray("ray._raylet")
    except ImportError:
        return [DrainOutcome(p, UNAVAILABLE, None, "ray is not installed (pip install 'kai-ray[ray]')") for p in pods]
    t0 = time.monotonic()
    why = _tcp_reachable(gcs_address, min(timeout_s, 2.0))
    if why is not None:
        return [DrainOutcome(p, UNREACHABLE, None, why, time.monotonic() - t0) for p in pods]
    deadline_ms = int((time.time() + max(0.0, deadline_s)) * 1000)
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["out"] = _drain_sync(gcs_address, pod_names_or_ips, reason, deadline_ms, timeout_s)
        except Exception as exc:
            box["err"] = exc

    # A GCS that accepts TCP but never answers would block GcsClient for ~40 s; the daemon thread bounds our wait.
    worker = threading.Thread(target=run, name="kai-ray-drain", daemon=True)
    worker.start()
    worker.join(timeout_s * 2 + 1.0)
    took = time.monotonic() - t0
    if worker.is_alive():
        return [
            DrainOutcome(p, UNREACHABLE, None, f"GCS at {gcs_address} did not answer in {took:.1f}s", took)
            for p in pods
        ]
    if "err" in box:
        err = box["err"]
        status = UNREACHABLE if "unavailable" in str(err).lower() or "timed out" in str(err).lower() else ERROR
        return [DrainOutcome(p, status, None, f"GCS at {gcs_address}: {err}", took) for p in pods]
    result: list[DrainOutcome] = box["out"]
    return result


def wait_drained(
    gcs_address: str,
    node_ids: Iterable[str],
    until: float,
    *,
    poll_s: float = 0.25,
    timeout_s: float = 5.0,
) -> set[str]:
    """Wait (wall clock, ``until`` = epoch seconds) while any of ``node_ids`` is alive; a preemption-drained node exits
    by itself once idle. Returns the ids still alive at the end. Errors end the wait early (the shrink goes on)."""
    waiting = set(node_ids)
    if not waiting:
        return waiting
    try:
        client = _ray("ray._raylet").GcsClient(address=gcs_address)
        while waiting and time.time() < until:
            alive = {n["node_id"] for n in _gcs_nodes(client, timeout_s) if n["alive"]}
            waiting &= alive
            if waiting:
                time.sleep(min(poll_s, max(0.0, until - time.time())))
    except Exception as exc:
        log.info("waiting for drained Ray nodes at %s: %s", gcs_address, exc)
    return waiting


def gcs_address_for(raycluster: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> str | None:
    """``<head pod IP>:<port>`` from the live head pod and ``headGroupSpec.rayStartParams.port`` (6379 by default)."""
    params = ((raycluster.get("spec") or {}).get("headGroupSpec") or {}).get("rayStartParams") or {}
    port = int(params.get("port") or DEFAULT_GCS_PORT)
    for p in pods:
        if _labels(p).get(c.RAY_NODE_TYPE) == "head" and not _terminating(p):
            ip = (p.get("status") or {}).get("podIP")
            if ip:
                return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
    return None


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
    by_name = {_name(p): p for p in pods}
    missing = [v for v in victims if v not in by_name]
    victim_pods = [by_name[v] for v in victims if v in by_name]
    plan = plan_shrink(raycluster, victim_pods, pods)
    if not plan.ok:
        return ShrinkOutcome(False, plan, message=plan.summary())
    if podgroup is None:
        podgroup = next((_meta(p).get("annotations", {}).get(c.PODGROUP_ANNOTATION) for p in victim_pods), None)

    drains: list[DrainOutcome] = []
    waited = 0.0
    if gcs_address is not None:
        address = gcs_address_for(raycluster, pods) if gcs_address == "auto" else gcs_address
        to_drain = [by_name[n] for g in plan.groups for n in g.workers_to_delete if n in by_name]
        if address is None:
            drains = [DrainOutcome(_name(p), UNREACHABLE, None, "no running head pod with an IP") for p in to_drain]
        else:
            drains = drain_ray_nodes(address, to_drain, message or reason, drain_deadline_s, timeout_s=drain_timeout_s)
            accepted = [d.node_id for d in drains if d.status == ACCEPTED and d.node_id]
            if wait_for_drain and accepted:
                t0 = time.monotonic()
                wait_drained(address, accepted, time.time() + drain_deadline_s + 0.5, timeout_s=drain_timeout_s)
                waited = time.monotonic() - t0

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
        by_name = {_name(p): p for p in pods}
        victim_pods = [by_name[v] for v in victims if v in by_name]
        plan = plan_shrink(raycluster, victim_pods, pods)
        if not plan.ok:
            return ShrinkOutcome(False, plan, drains, attempts, waited, plan.summary())

    record = {
        "at": _now_iso(),
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
        plan = _suspend_plan(owner_kind, owner, value)
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
    record = {"at": _now_iso(), "reason": reason, "message": message, "owner": f"{owner_kind}/{name}"}
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


# --- scheduler operator glue ------------------------------------------------------------------------------------


def ray_owner(podgroup: Mapping[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of the Ray object that owns a PodGroup (its ``ray.io`` owner reference), or None."""
    for ref in _meta(podgroup).get("ownerReferences") or []:
        if str(ref.get("apiVersion", "")).startswith("ray.io/"):
            return str(ref.get("kind")), str(ref.get("name"))
    return None


# Refusals after which the victims are evicted the plain way: a shrink can never express them.
FALLBACK_CODES = (NOT_A_WORKER, UNKNOWN_GROUP, NO_REPLICA_LABEL, BELOW_MIN_REPLICAS, NO_RESOURCE_VERSION)


@dataclass
class ReclaimRecord:
    """One Ray-aware reclaim the interceptor performed (kept for metrics, tests and ``kai-ray explain``)."""

    kind: str  # "shrink" | "suspend"
    target: str  # namespace/name of the RayCluster or owner
    pods: list[str]
    ok: bool
    code: str
    message: str
    seconds: float
    drains: list[DrainOutcome] = field(default_factory=list)


class ElasticReclaimer:
    """An eviction interceptor for the scheduler operator (``SchedulerOperator.eviction_interceptors``).

    Elastic victims that are KubeRay workers become one shrink per RayCluster (drain, then ``replicas`` down and
    ``workersToDelete``); the victims of a job that loses its whole gang, when its PodGroup's owner is one of
    ``suspend_kinds``, become a suspend of that owner (every victim of that job: shrinking the surplus of a gang that
    goes anyway would only race the suspend). Everything else is returned for plain eviction. The API work runs on a
    small thread pool, because a shrink waits up to ``drain_deadline_s`` for the drain; refusals that a shrink can
    never express (a head pod, an unknown group, ...) are handed to ``fallback`` (the operator's own eviction), while
    ``PendingDeletes`` is left for a later cycle to decide again (killing the pod would restart the recreate loop).

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
        workers: int = 4,
        labels_of: Callable[[Any], Mapping[str, str] | None] | None = None,
        owner_of: Callable[[str, str], tuple[str, str] | None] | None = None,
        on_record: Callable[[ReclaimRecord], None] | None = None,
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
        self.on_record = on_record  # e.g. the operator's metrics
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kai-ray-reclaim")
        self.records: list[ReclaimRecord] = []
        self._lock = threading.Lock()

    def close(self, wait: bool = True) -> None:
        self.pool.shutdown(wait=wait, cancel_futures=not wait)

    def __call__(self, victims: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        remaining: list[tuple[Any, Any]] = []
        shrinks: dict[tuple[str, str], list[tuple[Any, Any]]] = {}
        suspends: dict[tuple[str, str, str, str], list[tuple[Any, Any]]] = {}
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
                if self.shrink and getattr(e, "elastic", False):
                    try:
                        labels = self._labels(p)
                    except ApiError as exc:
                        if exc.not_found:
                            continue  # already gone: nothing to evict
                        log.info("reclaim of %s/%s: %s; evicting it instead", p.namespace, p.name, exc)
                        labels = {}
                    if labels.get(c.RAY_NODE_TYPE) == "worker" and labels.get(c.RAY_CLUSTER):
                        shrinks.setdefault((p.namespace, labels[c.RAY_CLUSTER]), []).append((p, e))
                        continue
                remaining.append((p, e))
        for (ns, cluster), group in shrinks.items():
            self.pool.submit(self._shrink, ns, cluster, group)
        for (ns, kind, name, pg), group in suspends.items():
            self.pool.submit(self._suspend, ns, kind, name, pg, group)
        return remaining

    def _labels(self, p: Any) -> Mapping[str, str]:
        if self.labels_of is not None:
            return self.labels_of(p) or {}
        return _labels(self.kube.get(pods_path(p.namespace, p.name)))

    def _owner(self, namespace: str, podgroup: str) -> tuple[str, str] | None:
        if self.owner_of is not None:
            return self.owner_of(namespace, podgroup)
        return ray_owner(self.kube.get(podgroups_path(namespace, podgroup)))

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

    def _fall_back(self, items: list[tuple[Any, Any]]) -> None:
        if self.fallback is None:
            return
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
                drain_deadline_s=self.drain_deadline_s,
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
        try:
            out = apply_suspend(self.kube, kind, namespace, name, reason=reason, message=message, podgroup=podgroup)
        except Exception as exc:
            out = SuspendOutcome(False, "Error", str(exc))
        self._record(
            ReclaimRecord(
                "suspend", f"{namespace}/{name}", names, out.applied, out.code, out.message, time.monotonic() - t0
            )
        )
        if not out.applied:
            log.info("cannot suspend %s %s/%s (%s); evicting its pods", kind, namespace, name, out.message)
            self._fall_back(items)


def publish_headroom(
    kube: Kube,
    snapshot: Any,
    jobs: Iterable[str] | None = None,
    *,
    now: float | None = None,
    **compute: Any,
) -> dict[str, Any]:
    """Compute the headroom of ``jobs`` (default: every job that may still grow) with the scheduler core and write it
    onto their PodGroups (``kai-ray.io/headroom``). Returns job key -> {subgroup: SubgroupHeadroom}."""
    from kai_ray.autoscaler.compute import compute_headroom

    result = compute_headroom(snapshot, jobs, **compute)
    for key, subgroups in result.items():
        write_headroom(kube, key, subgroups, now)
    return result


def write_headroom(kube: Kube, job: str, subgroups: Mapping[str, Any], now: float | None = None) -> None:
    """Merge-patch one PodGroup's ``kai-ray.io/headroom`` annotation (a vanished PodGroup is not an error)."""
    from kai_ray.autoscaler.headroom import headroom_annotations

    ns, _, name = job.partition("/")
    try:
        kube.merge_patch(podgroups_path(ns, name), {"metadata": {"annotations": headroom_annotations(subgroups, now)}})
    except ApiError as exc:
        if not exc.not_found:
            log.info("publishing headroom on PodGroup %s: %s", job, exc)


class HeadroomPublisher:
    """The scheduler operator's headroom publication for the autoscaler hook.

    At most every ``interval`` seconds, it computes the headroom of every job that may still grow with the core
    (:func:`kai_ray.autoscaler.compute.compute_headroom`) and hands a write to ``submit`` only for PodGroups whose
    numbers changed, or whose last write is older than ``refresh_s`` (the hook treats old numbers as unknown).
    ``templates(job_keys)`` supplies probe pods for subgroups scaled to zero.
    """

    def __init__(
        self,
        kube: Kube,
        interval: float,
        submit: Callable[[str, Callable[[], None]], None],
        *,
        refresh_s: float = 60.0,
        templates: Callable[[list[str]], Mapping[str, Mapping[str, Any]]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.interval = interval
        self.submit = submit
        self.refresh_s = refresh_s
        self.templates = templates
        self.clock = clock
        self._last_run = float("-inf")
        self._written: dict[str, tuple[dict[str, tuple[int, int]], float]] = {}
        self.writes = 0

    def due(self) -> bool:
        return self.interval > 0 and self.clock() - self._last_run >= self.interval

    def maybe_publish(self, snapshot: Any) -> dict[str, Any] | None:
        """Publish if due; returns what was computed (None when not due or nothing may grow)."""
        if not self.due():
            return None
        from kai_ray.autoscaler.compute import autoscaling_jobs, compute_headroom

        now = self.clock()
        self._last_run = now
        jobs = autoscaling_jobs(snapshot)
        for key in [k for k in self._written if k not in jobs]:
            del self._written[key]
        if not jobs:
            return None
        templates = dict(self.templates(jobs)) if self.templates is not None else None
        result = compute_headroom(snapshot, jobs, templates=templates)
        wall = time.time()
        for key, subgroups in result.items():
            numbers = {sg: (h.pods, h.headroom) for sg, h in subgroups.items()}
            last = self._written.get(key)
            if last is not None and last[0] == numbers and now - last[1] < self.refresh_s:
                continue
            self._written[key] = (numbers, now)
            self.writes += 1
            self.submit(f"headroom/{key}", partial(write_headroom, self.kube, key, subgroups, wall))
        return result

    def forget(self) -> None:
        self._written.clear()
        self._last_run = float("-inf")


__all__ = [
    "SHRINK_ANNOTATION",
    "SUSPEND_ANNOTATION",
    "DrainOutcome",
    "ElasticReclaimer",
    "GroupShrink",
    "HeadroomPublisher",
    "ReclaimRecord",
    "ShrinkOutcome",
    "ShrinkPlan",
    "SuspendOutcome",
    "SuspendPlan",
    "apply_resume",
    "apply_shrink",
    "apply_suspend",
    "drain_ray_nodes",
    "gcs_address_for",
    "match_ray_nodes",
    "pending_deletes",
    "plan_resume",
    "plan_shrink",
    "plan_suspend",
    "publish_headroom",
    "ray_owner",
    "record_on_podgroup",
    "wait_drained",
    "write_headroom",
]

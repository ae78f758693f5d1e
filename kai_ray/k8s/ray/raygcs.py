"""Ray-aware reclaim, the Ray side: drain the Ray nodes of victim pods through the GCS before they are removed.

Ray is imported lazily: the core install has no ``ray``; without it, draining reports ``unavailable`` and the shrink
still happens. Every call is bounded in time (a GCS that accepts TCP but never answers must not hold a reclaim).
"""

from __future__ import annotations

import importlib
import logging
import socket
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kai_ray import constants as c
from kai_ray.k8s.ray.rayplan import is_terminating, labels_of, name_of
from kai_ray.scheduler.snapshot import RayActivity

log = logging.getLogger(__name__)

DRAIN_REASON_PREEMPTION = "DRAIN_NODE_REASON_PREEMPTION"
DEFAULT_GCS_PORT = 6379


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
    return name_of(ref), (ref.get("status") or {}).get("podIP")


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
        return [
            DrainOutcome(p, UNAVAILABLE, None, "ray is not installed (the 'ray' extra: pip install '.[ray]')")
            for p in pods
        ]
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
        if labels_of(p).get(c.RAY_NODE_TYPE) == "head" and not is_terminating(p):
            ip = (p.get("status") or {}).get("podIP")
            if ip:
                return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
    return None


# ---------------------------------------------------------------------- Ray activity (idle-aware victims)


def _activity_sync(gcs_address: str, timeout: float) -> list[dict[str, Any]]:
    client = _ray("ray._raylet").GcsClient(address=gcs_address)
    state = _ray("ray.autoscaler.v2.sdk").get_cluster_resource_state(client)
    status = _ray("ray.core.generated.autoscaler_pb2").NodeStatus
    out = []
    for n in state.node_states:
        out.append(
            {
                "node_id": n.node_id.hex(),
                "instance_id": n.instance_id,
                "node_name": "",
                "ip": n.node_ip_address,
                "labels": dict(n.labels),
                "alive": n.status != status.Value("DEAD"),
                "idle_ms": int(n.idle_duration_ms) if n.status == status.Value("IDLE") else 0,
                "activity": list(n.node_activity),
            }
        )
    return out


def ray_node_activity(gcs_address: str, *, timeout_s: float = 5.0) -> list[dict[str, Any]] | None:
    """Every Ray node's activity from the GCS autoscaler state (what Ray's own autoscaler reads): node dicts as
    :func:`match_ray_nodes` takes them, plus ``idle_ms`` (> 0: idle that long; 0: running tasks or actors) and
    ``activity`` (Ray's words for what runs). None when the GCS cannot be asked (no ``ray``, unreachable, an error):
    the scheduler then keeps KAI's victim order. Bounded in time like :func:`drain_ray_nodes`."""
    try:
        _ray("ray._raylet")
    except ImportError:
        return None
    if _tcp_reachable(gcs_address, min(timeout_s, 2.0)) is not None:
        return None
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["out"] = _activity_sync(gcs_address, timeout_s)
        except Exception as exc:
            box["err"] = exc

    worker = threading.Thread(target=run, name="kai-ray-activity", daemon=True)
    worker.start()
    worker.join(timeout_s * 2 + 1.0)
    if worker.is_alive() or "err" in box:
        log.info("Ray activity from %s: %s", gcs_address, box.get("err", "no answer"))
        return None
    result: list[dict[str, Any]] = box["out"]
    return result


class ActivityTracker:
    """Per pod, Ray's idle/busy answers over time as the core's :class:`RayActivity`: the GCS says how long a node has
    been idle, not how long it has been busy, so the tracker remembers when it saw a node turn busy (unknown for a
    node busy since before the first answer)."""

    def __init__(self) -> None:
        self._busy_since: dict[str, float | None] = {}  # pod -> when seen turning busy (None: busy when first seen)
        self._idle: set[str] = set()  # pods whose node was idle at the last answer

    def observe(self, pod: str, observed_at: float, idle_ms: int) -> RayActivity:
        if idle_ms > 0:
            self._busy_since.pop(pod, None)
            self._idle.add(pod)
            return RayActivity(observed_at=observed_at, idle_seconds=idle_ms / 1000.0)
        if pod not in self._busy_since:
            self._busy_since[pod] = observed_at if pod in self._idle else None
        self._idle.discard(pod)
        return RayActivity(observed_at=observed_at, busy_since=self._busy_since[pod])

    def update(
        self, observed_at: float, pods: Sequence[PodRef], nodes: Sequence[Mapping[str, Any]]
    ) -> dict[str, RayActivity]:
        """Each pod's activity from one GCS answer (pods without a single matching node are left out)."""
        by_id = {str(n["node_id"]): n for n in nodes}
        out: dict[str, RayActivity] = {}
        for pod, (node_id, _) in match_ray_nodes(nodes, pods).items():
            if node_id is not None:
                out[pod] = self.observe(pod, observed_at, int(by_id[node_id].get("idle_ms") or 0))
        return out

    def forget(self, keep: Iterable[str]) -> None:
        """Drop pods that are gone."""
        alive = set(keep)
        for pod in [p for p in self._busy_since if p not in alive]:
            del self._busy_since[pod]
        self._idle &= alive

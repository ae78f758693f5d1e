"""Waits and reads on real pods (phases, container states, logs through the apiserver -> kubelet path)."""

from __future__ import annotations

from typing import Any

from kai_ray.k8s.base.rest import ApiError, Kube, pods_path


def pod(kube: Kube, ns: str, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = kube.get(pods_path(ns, name))
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    return found


def phase(kube: Kube, ns: str, name: str) -> str:
    p = pod(kube, ns, name)
    return str((p or {}).get("status", {}).get("phase", "Gone" if p is None else ""))


def running_containers(kube: Kube, ns: str, name: str) -> bool:
    """Every container of the pod has a ``running`` state (the process was started by runc)."""
    p = pod(kube, ns, name) or {}
    statuses = p.get("status", {}).get("containerStatuses") or []
    return bool(statuses) and all("running" in (s.get("state") or {}) for s in statuses)


def logs(kube: Kube, ns: str, name: str, container: str = "main") -> str:
    """``kubectl logs``: the apiserver asks the kubelet (with its client certificate), which reads containerd's log."""
    headers = {"Authorization": kube._headers(None).get("Authorization", "")}
    resp = kube.pool.request("GET", kube.url(f"{pods_path(ns, name)}/log", {"container": container}), headers=headers)
    if resp.status >= 400:
        raise ApiError.from_response(resp.status, resp.data)
    return bytes(resp.data).decode(errors="replace")

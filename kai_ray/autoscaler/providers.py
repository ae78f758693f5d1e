"""Ray's own KubeRay node providers, gated by the scheduler's headroom.

We subclass rather than reimplement: Ray's providers know how KubeRay wants ``replicas`` and ``workersToDelete``
written, when it is safe to scale and how multi-host groups count; we only cap scale-ups.

- :class:`KaiKubeRayNodeProvider` (autoscaler v1, a ``BatchingNodeProvider``): caps the batched
  ``desired_num_workers`` before Ray turns it into a ``replicas`` patch.
- :class:`KaiKubeRayProvider` (autoscaler v2, an ``ICloudInstanceProvider``): caps each launch; the refused part
  becomes a ``LaunchNodeError`` carrying our reason, so v2 fails those instances at once instead of waiting out its
  10-minute REQUESTED timeout.

Both KubeRay providers talk to the API server through :class:`RayKubeClient`, Ray's injectable HTTP-client interface
over kai-ray's client (kubeconfig or in-cluster service account), which also reaches PodGroups and Events.

Imports Ray: only for the ``ray`` extra.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any, cast

import requests
from ray.autoscaler._private.kuberay.node_provider import IKubernetesHttpApiClient, KubeRayNodeProvider
from ray.autoscaler.v2.instance_manager.cloud_providers.kuberay.cloud_provider import KubeRayProvider

from kai_ray.headroom.contract import MISSING_DENY, CapDecision, HeadroomGate
from kai_ray.k8s.base.rest import JSON_PATCH, ApiError, Kube, podgroups_path

log = logging.getLogger(__name__)

ENV_PODGROUP = "KAI_RAY_PODGROUP"  # override the PodGroup name (default: derived from the RayCluster's owner)
ENV_MAX_AGE = "KAI_RAY_HEADROOM_MAX_AGE_S"  # headroom older than this counts as unknown (default 300; 0 = never)
ENV_MISSING = "KAI_RAY_HEADROOM_MISSING"  # deny (default): no scale-up without headroom; allow: only max applies
ENV_EVENTS = "KAI_RAY_EVENTS"  # "0" disables the ScaleUpCapped Events on the RayCluster
RAY_OWNER_KINDS = ("RayJob", "RayService")


def _http_error(exc: ApiError) -> requests.HTTPError:
    """Ray's providers inspect ``err.response.status_code`` on ``requests.HTTPError``."""
    resp = requests.Response()
    resp.status_code = exc.status or 503
    resp.reason = exc.reason
    resp._content = (exc.message or "").encode()
    return requests.HTTPError(str(exc), response=resp)


class RayKubeClient(IKubernetesHttpApiClient):
    """Ray's ``IKubernetesHttpApiClient`` over :class:`~kai_ray.k8s.base.rest.Kube`, for one namespace.

    Paths are Ray's relative ones (``pods?labelSelector=...``, ``rayclusters/<name>``) plus ``podgroups/<name>`` and
    ``events``."""

    def __init__(self, kube: Kube, namespace: str, crd_version: str = "v1") -> None:
        self.kube = kube
        self.namespace = namespace
        self.crd_version = crd_version

    @classmethod
    def from_env(cls, namespace: str) -> RayKubeClient:
        """``$KUBECONFIG`` when set (tests, running outside a pod), else the pod's service account."""
        return cls(
            Kube.connect(os.environ.get("KUBECONFIG") or None), namespace, os.environ.get("KUBERAY_CRD_VER", "v1")
        )

    def url_path(self, path: str) -> str:
        ns = self.namespace
        if path.startswith(("pods", "events")):
            return f"/api/v1/namespaces/{ns}/{path}"
        if path.startswith("rayclusters"):
            return f"/apis/ray.io/{self.crd_version}/namespaces/{ns}/{path}"
        if path.startswith("podgroups"):
            return podgroups_path(ns) + path[len("podgroups") :]
        raise NotImplementedError(f"no route for {path!r}")

    def _call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        try:
            return self.kube.request(method, self.url_path(path), body=body, content_type=content_type)
        except ApiError as exc:
            raise _http_error(exc) from None

    def get(self, path: str) -> dict[str, Any]:
        return dict(self._call("GET", path) or {})

    def patch(self, path: str, payload: Any, content_type: str = JSON_PATCH) -> dict[str, Any]:
        return dict(self._call("PATCH", path, payload, content_type) or {})

    def delete(self, path: str) -> dict[str, Any]:
        return dict(self._call("DELETE", path) or {})

    def post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return dict(self._call("POST", path, dict(body)) or {})


def podgroup_name_for(raycluster: Mapping[str, Any]) -> str:
    """KAI's PodGroup name ``pg-<top owner name>-<top owner uid>``: the RayJob/RayService that owns the cluster, or
    the RayCluster itself (same rule as :func:`kai_ray.podgrouper.grouper.podgroup_name`)."""
    meta = raycluster.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") in RAY_OWNER_KINDS and str(ref.get("apiVersion", "")).startswith("ray.io/"):
            return f"pg-{ref['name']}-{ref['uid']}" if ref.get("uid") else f"pg-{ref['name']}"
    uid = meta.get("uid")
    return f"pg-{meta.get('name')}-{uid}" if uid else f"pg-{meta.get('name')}"


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw in (None, ""):
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"${name}: {raw!r} is not a number") from None


def gate_for_cluster(
    client: RayKubeClient,
    raycluster: Callable[[], Mapping[str, Any] | None],
    *,
    podgroup: str | None = None,
    max_age_s: float | None = None,
    missing: str | None = None,
    events: bool | None = None,
) -> HeadroomGate:
    """A gate reading the cluster's PodGroup through ``client`` and posting capped decisions as Events on the
    RayCluster. Unset options come from ``$KAI_RAY_*``."""
    podgroup = podgroup or os.environ.get(ENV_PODGROUP) or None
    events = os.environ.get(ENV_EVENTS, "1") != "0" if events is None else events

    def fetch() -> Mapping[str, Any] | None:
        rc = raycluster()
        if rc is None:
            return None
        name = podgroup or podgroup_name_for(rc)
        try:
            return client.get(f"podgroups/{name}")
        except requests.HTTPError as exc:
            if exc.response is not None and exc.response.status_code == 404:
                log.warning("kai-ray: PodGroup %s/%s not found", client.namespace, name)
                return None
            raise

    def report(d: CapDecision) -> None:
        rc = raycluster()
        if not events or not rc:
            return
        meta = rc.get("metadata") or {}
        ref = {
            "apiVersion": rc.get("apiVersion", "ray.io/v1"),
            "kind": "RayCluster",
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace") or client.namespace,
            "uid": meta.get("uid", ""),
        }
        client.post("events", d.event(ref))

    return HeadroomGate(
        fetch,
        max_age_s=_env_float(ENV_MAX_AGE, 300.0) if max_age_s is None else max_age_s,
        missing=(os.environ.get(ENV_MISSING) or MISSING_DENY) if missing is None else missing,
        report=report,
    )


def _group(raycluster: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    for wg in (raycluster.get("spec") or {}).get("workerGroupSpecs") or []:
        if wg.get("groupName") == name:
            return dict(wg)
    return {}


class KaiKubeRayNodeProvider(KubeRayNodeProvider):
    """Autoscaler v1: Ray's ``KubeRayNodeProvider`` whose scale-ups are capped by the PodGroup's headroom."""

    def __init__(
        self,
        provider_config: dict[str, Any],
        cluster_name: str,
        k8s_api_client: IKubernetesHttpApiClient | None = None,
        gate: HeadroomGate | None = None,
    ) -> None:
        super().__init__(provider_config, cluster_name)
        client: Any = k8s_api_client or RayKubeClient.from_env(self.namespace)
        self.k8s_api_client = client
        if gate is None:
            if not isinstance(client, RayKubeClient):
                raise TypeError("pass a gate, or a RayKubeClient as k8s_api_client")
            gate = gate_for_cluster(client, lambda: getattr(self, "_raycluster", None))
        self.kai_gate = gate

    def submit_scale_request(self, scale_request: Any) -> None:
        rc = self._raycluster
        for node_type, target in list(scale_request.desired_num_workers.items()):
            wg = _group(rc, node_type)
            if not wg:
                continue
            current = int(wg.get("replicas", 0) or 0)
            hosts = max(1, int(wg.get("numOfHosts", 1) or 1))
            if target <= current:
                continue
            d = self.kai_gate.cap(node_type, current * hosts, target * hosts, hosts)
            if d.capped:
                scale_request.desired_num_workers[node_type] = d.allowed // hosts
        super().submit_scale_request(scale_request)


class KaiKubeRayProvider(KubeRayProvider):
    """Autoscaler v2: Ray's ``KubeRayProvider`` whose launches are capped by the PodGroup's headroom."""

    def __init__(
        self,
        cluster_name: str,
        provider_config: dict[str, Any],
        gcs_client: Any,
        k8s_api_client: IKubernetesHttpApiClient | None = None,
        gate: HeadroomGate | None = None,
    ) -> None:
        client = k8s_api_client or RayKubeClient.from_env(provider_config["namespace"])
        super().__init__(cluster_name, provider_config, gcs_client, k8s_api_client=client)
        if gate is None:
            if not isinstance(client, RayKubeClient):
                raise TypeError("pass a gate, or a RayKubeClient as k8s_api_client")
            gate = gate_for_cluster(client, lambda: self._ray_cluster)
        self.kai_gate = gate
        self._kai_capped: dict[str, tuple[int, str]] = {}

    def _initialize_scale_request(self, to_launch: dict[str, int], to_delete_instances: list[str]) -> Any:
        req = super()._initialize_scale_request(to_launch, to_delete_instances)
        for node_type, count in to_launch.items():
            if count <= 0:
                continue
            desired = int(req.desired_num_workers.get(node_type, 0))
            rc = cast(Mapping[str, Any], self._ray_cluster)
            hosts = max(1, int(_group(rc, node_type).get("numOfHosts", 1) or 1))
            d = self.kai_gate.cap(node_type, desired - count, desired, hosts)
            if d.capped:
                req.desired_num_workers[node_type] = d.allowed
                self._kai_capped[node_type] = (desired - d.allowed, d.message)
        return req

    def launch(self, shape: dict[str, int], request_id: str) -> None:
        fresh = request_id not in self._requests
        self._kai_capped = {}
        super().launch(shape, request_id)
        if fresh and request_id in self._requests:
            for node_type, (refused, message) in self._kai_capped.items():
                n = min(refused, shape.get(node_type, 0))
                if n > 0:
                    self._add_launch_errors({node_type: n}, request_id, details=f"kai-ray: {message}")
        self._kai_capped = {}

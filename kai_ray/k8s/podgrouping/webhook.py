"""The podgrouper's side of the admission webhook (``--upstream-gangs``): what a new Ray pod is told (the upstream
PodGroup of its gang, :mod:`kai_ray.podgrouper.workload_api`), and the server, its certificate and its registration.

Why a decision at admission: ``spec.schedulingGroup`` can only be set when the pod is created, so the gang must be
known before the pod exists; it is computed as the reconcile would, from the same owners and the same grouper.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from kai_ray import constants as c
from kai_ray.api.meta import Pod
from kai_ray.k8s.base.mountedcert import MountedCert
from kai_ray.k8s.base.rest import ApiError, Kube
from kai_ray.k8s.base.servingcert import shared_serving_cert
from kai_ray.k8s.config import OperatorConfig
from kai_ray.k8s.podgrouping import admission
from kai_ray.k8s.podgrouping.owners import Owners
from kai_ray.k8s.podgrouping.quotagate import QuotaGate
from kai_ray.k8s.podgrouping.ray_gangs import RayGangs
from kai_ray.podgrouper.defaultgrouper import skip_requested
from kai_ray.podgrouper.workload_api import scheduling_group_patch

log = logging.getLogger(__name__)


class PodAdmission:
    def __init__(self, kube: Kube, scheduler_name: str, owners: Owners, gangs: RayGangs) -> None:
        self.kube = kube
        self.scheduler_name = scheduler_name
        self.owners = owners
        self.gangs = gangs
        self._priority_values: dict[str, int | None] = {}

    def admit(self, raw: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
        """The admission decision for a Ray pod being created: the JSON patch naming its gang's upstream PodGroup."""
        meta = raw.setdefault("metadata", {})
        meta.setdefault("namespace", namespace)
        if not meta.get("name"):
            meta["name"] = f"{meta.get('generateName') or 'pod-'}admission"
        if (raw.get("spec") or {}).get("schedulerName") != self.scheduler_name:
            return []
        chain = self.owners.chain(raw)
        if any(skip_requested(o.get("metadata") or {}) for o in chain):
            return []
        top = chain[-1]
        kind = str(top.get("kind") or "")
        if top is raw or kind not in c.RAY_KINDS:
            return []
        desired = self.gangs.for_pod(kind, top, chain, Pod.model_validate(raw))
        if desired is None:
            return []
        pclass = desired.spec.priority_class_name
        return scheduling_group_patch(raw, desired.metadata.name or "", pclass, self._priority_value(pclass))

    def _priority_value(self, name: str | None) -> int | None:
        """A PriorityClass's value (read once per class and remembered; None when it does not exist)."""
        if not name:
            return None
        if name not in self._priority_values:
            try:
                value = self.kube.get(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}").get("value")
            except ApiError as exc:
                if not exc.not_found:
                    raise
                return None
            self._priority_values[name] = int(value) if isinstance(value, int) else None
        return self._priority_values[name]


def serve_admission(
    config: OperatorConfig, kube: Kube, decide: PodAdmission | None, gate: QuotaGate | None = None
) -> admission.AdmissionServer:
    """Serve the admission webhook (every replica, one certificate) and point the API server at it: the upstream
    gangs' decision on :data:`~admission.PATH`, the queue-admission gate's on :data:`~admission.GATE_PATH`."""
    _, namespace = config.lease("podgrouper")
    if config.webhook_url:
        host = config.webhook_url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
        hosts = [host]
        client: dict[str, Any] = {"url": config.webhook_url}
    else:
        svc = config.webhook_service
        hosts = [f"{svc}.{namespace}.svc", f"{svc}.{namespace}.svc.cluster.local"]
        client = {"service": {"namespace": namespace, "name": svc, "path": admission.PATH, "port": 443}}
    routes: dict[str, admission.Decide] = {admission.PATH: decide.admit} if decide is not None else {}
    if gate is not None:
        routes[admission.GATE_PATH] = gate.decide
    if config.webhook_cert_dir:
        # cert-manager's mode: its certificate, renewed in place; the chart owns the registration, its CA injected
        mounted = MountedCert(Path(config.webhook_cert_dir))
        server = admission.AdmissionServer(
            routes, mounted.load(), bind=config.bind_address, port=config.webhook_port, mounted=mounted
        ).start()
        log.info(
            "admission webhook on port %d (certificate from %s): %s", server.port, mounted.directory, ", ".join(routes)
        )
        return server
    cert = shared_serving_cert(kube, namespace, f"{config.webhook_service}-tls", hosts)
    server = admission.AdmissionServer(routes, cert, bind=config.bind_address, port=config.webhook_port).start()
    admission.register(kube, admission.webhook_configuration(client, cert.ca_pem, config.namespaces, tuple(routes)))
    log.info("admission webhook on port %d: %s", server.port, ", ".join(routes))
    return server

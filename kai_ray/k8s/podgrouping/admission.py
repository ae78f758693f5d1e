"""The podgrouper's admission webhook: a Ray pod names its upstream PodGroup as it is created.

Why a webhook: a pod joins a Kubernetes ``scheduling.k8s.io/v1beta1`` PodGroup through ``spec.schedulingGroup``,
which is immutable once the pod exists, and KubeRay (1.6) builds pods from templates that cannot carry it (its CRDs
prune the field). So the field is set in admission, the only moment it can be: the API server sends each new Ray pod
(``ray.io/is-ray-node`` labelled) here, the podgrouper answers with a JSON patch naming the gang it groups the pod
into (:func:`kai_ray.podgrouper.workload_api.scheduling_group_patch`). The webhook fails open
(``failurePolicy: Ignore``, a short timeout, and every error answered "allowed, unchanged"): a podgrouper that is
down delays no pod, it only leaves that pod out of the upstream gang.

Python's ``http.server`` is enough here: one small POST per pod creation, TLS from the standard ``ssl`` module; the
certificate is the operator's own (:mod:`kai_ray.k8s.base.servingcert`), written into the webhook configuration's
``caBundle`` when the operator starts; or, with ``--webhook-cert-dir``, cert-manager's, read from its mounted Secret
(:mod:`kai_ray.k8s.base.mountedcert`) and served anew when renewed, the configuration then being the installer's.

The same server answers a second webhook on :data:`GATE_PATH` when ``--queue-admission-gating`` is on: every new pod
kai-ray schedules (not only Ray's) goes there, and :mod:`kai_ray.k8s.podgrouping.quotagate` adds the queue-admission
gate. Two paths, two registrations: a Ray pod is sent to both, and each answers only its own patch.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import ssl
import tempfile
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kai_ray.k8s.base.mountedcert import CertDirError, MountedCert
from kai_ray.k8s.base.rest import ApiError, Kube
from kai_ray.k8s.base.servingcert import ServingCert

log = logging.getLogger(__name__)

PATH = "/mutate-pods"
GATE_PATH = "/gate-pods"
CONFIG_NAME = "kai-ray-podgrouper"
WEBHOOK_NAME = "upstream-gangs.pods.kai-ray.io"
GATE_WEBHOOK_NAME = "queue-admission.pods.kai-ray.io"
CONFIGS_PATH = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
MAX_BODY = 4 * 1024 * 1024

Decide = Callable[[dict[str, Any], str], list[dict[str, Any]]]


def review_response(review: Mapping[str, Any], decide: Decide) -> dict[str, Any]:
    """The AdmissionReview answer to ``review``: allowed always, with ``decide``'s JSON patch when it has one."""
    request = review.get("request") or {}
    response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": True}
    obj = request.get("object")
    if request.get("operation") == "CREATE" and isinstance(obj, dict):
        try:
            patch = decide(obj, str(request.get("namespace") or ""))
        except Exception as exc:
            log.warning("admission of a pod in %s: %s; admitted unchanged", request.get("namespace"), exc)
            patch = []
        if patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


class AdmissionServer:
    """HTTPS server for its ``routes`` (path -> decision: :data:`PATH`, :data:`GATE_PATH`); ``port`` 0 picks a free
    one (see :attr:`port` after :meth:`start`). With ``mounted``, the certificate is that directory's, served anew
    within ``reload_every`` seconds of the files changing (cert-manager renewed it)."""

    def __init__(
        self,
        routes: Mapping[str, Decide],
        cert: ServingCert,
        *,
        bind: str = "0.0.0.0",
        port: int = 9443,
        mounted: MountedCert | None = None,
        reload_every: float = 30.0,
    ) -> None:
        self.routes = dict(routes)
        self.cert = cert
        self.bind = bind
        self.mounted = mounted
        self.reload_every = reload_every
        self.reloads = 0
        self._port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._context: ssl.SSLContext | None = None
        self._stopped = threading.Event()

    @property
    def port(self) -> int:
        return self._server.server_address[1] if self._server is not None else self._port

    def start(self) -> AdmissionServer:
        routes = self.routes

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                decide = routes.get(self.path.split("?")[0])
                if decide is None or not 0 < length <= MAX_BODY:
                    self.send_error(404 if decide is None else 400)
                    return
                try:
                    review = json.loads(self.rfile.read(length))
                except ValueError:
                    self.send_error(400, "not JSON")
                    return
                body = json.dumps(review_response(review, decide)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("admission: " + format, *args)

        server = ThreadingHTTPServer((self.bind, self._port), Handler)
        server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        load_chain(context, self.cert)
        self._context = context
        server.socket = context.wrap_socket(server.socket, server_side=True)
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="kai-ray-admission", daemon=True)
        self._thread.start()
        if self.mounted is not None:
            threading.Thread(target=self._reload_loop, name="kai-ray-admission-cert", daemon=True).start()
        return self

    def _reload_loop(self) -> None:
        """Serve the mounted certificate anew when it changes: later handshakes get the renewed one."""
        assert self.mounted is not None and self._context is not None
        while not self._stopped.wait(self.reload_every):
            if not self.mounted.changed():
                continue
            try:
                cert = self.mounted.load()
                load_chain(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), cert)  # a pair that does not match stops here
                load_chain(self._context, cert)
                self.cert = cert
                self.reloads += 1
                log.info("admission webhook: serving the renewed certificate from %s", self.mounted.directory)
            except (CertDirError, ssl.SSLError) as exc:
                log.warning("admission webhook: keeping the current certificate: %s", exc)

    def stop(self) -> None:
        self._stopped.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def load_chain(context: ssl.SSLContext, cert: ServingCert) -> None:
    """Put ``cert`` in ``context`` (``ssl`` reads only files, so through a private temporary directory)."""
    with tempfile.TemporaryDirectory(prefix="kai-ray-webhook-") as tmp:
        crt, key = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
        with open(crt, "wb") as f:
            f.write(cert.cert_pem)
        with os.fdopen(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
            f.write(cert.key_pem)
        context.load_cert_chain(crt, key)


def client_for(client_config: dict[str, Any], path: str) -> dict[str, Any]:
    """``client_config`` (a ``url`` or a ``service``) pointed at ``path`` of the same server."""
    if "url" in client_config:
        url = str(client_config["url"])
        scheme, _, rest = url.partition("://")
        return {**client_config, "url": f"{scheme}://{rest.split('/', 1)[0]}{path}"}
    return {**client_config, "service": {**client_config["service"], "path": path}}


def webhook_configuration(
    client_config: dict[str, Any], ca_pem: bytes, namespaces: tuple[str, ...] = (), paths: tuple[str, ...] = (PATH,)
) -> dict[str, Any]:
    """The MutatingWebhookConfiguration for ``paths``: :data:`PATH` gets new Ray pods, :data:`GATE_PATH` every new
    pod (in ``namespaces``, or all)."""
    webhooks = []
    for path in paths:
        webhook: dict[str, Any] = {
            "name": WEBHOOK_NAME if path == PATH else GATE_WEBHOOK_NAME,
            "clientConfig": {**client_for(client_config, path), "caBundle": base64.b64encode(ca_pem).decode()},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
            "reinvocationPolicy": "Never",
        }
        if path == PATH:
            webhook["objectSelector"] = {"matchExpressions": [{"key": "ray.io/is-ray-node", "operator": "Exists"}]}
        if namespaces:
            webhook["namespaceSelector"] = {
                "matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": sorted(namespaces)}
                ]
            }
        webhooks.append(webhook)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": CONFIG_NAME, "labels": {"app.kubernetes.io/managed-by": "kai-ray"}},
        "webhooks": webhooks,
    }


def register(kube: Kube, body: dict[str, Any]) -> None:
    """Create the webhook configuration, or replace this operator's earlier one (a new CA on every start)."""
    name = body["metadata"]["name"]
    try:
        kube.create(CONFIGS_PATH, body)
    except ApiError as exc:
        if not exc.conflict:
            raise
        current = kube.get(f"{CONFIGS_PATH}/{name}")
        body = {**body, "metadata": {**body["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}}
        kube.replace(f"{CONFIGS_PATH}/{name}", body)

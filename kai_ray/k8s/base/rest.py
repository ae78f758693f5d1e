"""A thin raw-JSON client over the official ``kubernetes`` client's connection pool.

Why not the generated ``CoreV1Api`` methods: they turn every response into model objects, which costs more CPU than
the request itself for a pod, and the Binding call cannot even deserialise its own response (kubernetes-client/python
#825). The operators need thousands of writes per second on a small machine, so they speak JSON to the API server
directly, reusing the official client's kubeconfig loading, TLS setup, token refresh and urllib3 pool.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlencode

import orjson
import urllib3
from kubernetes import client, config

log = logging.getLogger(__name__)

USER_AGENT = "kai-ray/0.1"
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class ApiError(Exception):
    """A non-2xx answer from the API server: ``status`` (HTTP code), ``reason`` and ``message`` from its Status."""

    def __init__(self, status: int, reason: str = "", message: str = "", body: Any = None) -> None:
        super().__init__(message if status == UNREACHABLE else f"{status} {reason}: {message}".strip())
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body

    @classmethod
    def from_response(cls, status: int, data: bytes) -> ApiError:
        try:
            body = json.loads(data) if data else {}
        except ValueError:
            body = {"message": data[:200].decode(errors="replace")}
        if not isinstance(body, dict):
            body = {}
        return cls(status, str(body.get("reason", "")), str(body.get("message", "")), body)

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def unreachable(self) -> bool:
        """No answer at all: the server is down, unreachable, or the connection broke."""
        return self.status == UNREACHABLE


UNREACHABLE = 0  # ApiError.status when no HTTP answer came back


def connection_problem(host: str, exc: Exception) -> ApiError:
    """A connection failure as one readable line: where, and what went wrong (not urllib3's repr)."""
    text = str(exc)
    if isinstance(exc, urllib3.exceptions.NewConnectionError):
        text = text.split("Failed to establish a new connection: ", 1)[-1]
        text = re.sub(r"^\[Errno -?\d+\] ", "", text).lower()
    elif isinstance(exc, urllib3.exceptions.NameResolutionError):
        text = f"cannot resolve {urllib3.util.parse_url(host).host}"
    elif isinstance(exc, urllib3.exceptions.ConnectTimeoutError):
        text = "no connection within the timeout"
    elif isinstance(exc, urllib3.exceptions.ReadTimeoutError):
        text = "no answer within the timeout"
    elif isinstance(exc, urllib3.exceptions.SSLError):
        text = f"TLS: {text}"
    elif isinstance(exc, urllib3.exceptions.ProtocolError):
        text = f"connection broken ({exc.args[0] if exc.args else text})"
    return ApiError(UNREACHABLE, "Unreachable", f"cannot reach the API server at {host}: {text}")


class Reachability:
    """Whether the API server answers, for one operator: the one place that retries with backoff and logs it.

    Every loop that gets no answer at all (informers, the Lease) reports it here and waits, instead of each logging
    its own retries; one prober asks ``/version`` with exponential backoff (0.5 s doubling to 30 s) and wakes them all
    when the server answers again (any HTTP answer counts, even 401 or 403).
    """

    MAX_BACKOFF = 30.0

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._up = threading.Event()
        self._up.set()
        self._lock = threading.Lock()
        self._closed = threading.Event()

    @property
    def up(self) -> bool:
        return self._up.is_set()

    def failed(self, exc: ApiError) -> None:
        """A request got no answer: start the prober (once) if the server was thought up."""
        with self._lock:
            if not self._up.is_set() or self._closed.is_set():
                return
            self._up.clear()
        log.warning("%s; retrying with backoff", exc)
        threading.Thread(target=self._probe, name="kai-ray-reachability", daemon=True).start()

    def check(self) -> bool:
        """Ask once now (e.g. before starting work); False (and the prober started) when there is no answer."""
        try:
            self.kube.request("GET", "/version", timeout=10.0)
        except ApiError as exc:
            if exc.unreachable:
                self.failed(exc)
                return False
        return True

    def wait(self, stop: threading.Event, timeout: float | None = None) -> bool:
        """Block until the server answers again (True), ``stop`` is set or ``timeout`` passes (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._up.wait(0.2):
            if stop.is_set() or self._closed.is_set() or (deadline is not None and time.monotonic() > deadline):
                return False
        return True

    def close(self) -> None:
        self._closed.set()

    def _probe(self) -> None:
        backoff, since = 0.5, time.monotonic()
        while not self._closed.wait(backoff):
            try:
                self.kube.request("GET", "/version", timeout=10.0)
            except ApiError as exc:
                if exc.unreachable:
                    backoff = min(backoff * 2, self.MAX_BACKOFF)
                    log.warning("%s; next try in %.0fs", exc, backoff)
                    continue
            log.warning("API server %s answers again after %.0fs", self.kube.host, time.monotonic() - since)
            self._up.set()
            return


def _in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and not os.environ.get("KUBECONFIG")


class Kube:
    """JSON in, JSON out. Thread-safe: every call takes a connection from the shared urllib3 pool."""

    def __init__(self, api_client: Any, timeout: float = 30.0) -> None:
        self.api_client = api_client
        self.configuration = api_client.configuration
        self.host = str(self.configuration.host).rstrip("/")
        self.pool = api_client.rest_client.pool_manager
        self.timeout = timeout
        self._lock = threading.Lock()
        self.reachability = Reachability(self)

    @classmethod
    def connect(cls, kubeconfig: str | None = None, context: str | None = None, pool_size: int = 32) -> Kube:
        """From ``kubeconfig`` (or ``$KUBECONFIG`` / ``~/.kube/config``), or the in-cluster service account."""
        cfg = client.Configuration()
        if kubeconfig is None and _in_cluster():
            config.load_incluster_config(client_configuration=cfg)
        else:
            config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
        cfg.connection_pool_maxsize = pool_size
        return cls(client.ApiClient(cfg))

    def close(self) -> None:
        self.reachability.close()
        self.api_client.close()

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": JSON, "User-Agent": USER_AGENT}
        if content_type:
            headers["Content-Type"] = content_type
        with self._lock:  # auth_settings() may refresh a token in place
            auth = self.configuration.auth_settings().get("BearerToken")
        if auth and auth.get("value"):
            headers["Authorization"] = str(auth["value"])
        return headers

    def url(self, path: str, query: dict[str, Any] | None = None) -> str:
        q = {k: v for k, v in (query or {}).items() if v is not None and v != ""}
        return self.host + path + ("?" + urlencode(q) if q else "")

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: float | None = None,
    ) -> Any:
        """One request; returns the decoded JSON body (None when empty); raises ApiError on a non-2xx answer."""
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        try:
            resp = self.pool.request(
                method,
                self.url(path, query),
                body=data,
                headers=self._headers(content_type if data is not None else None),
                timeout=urllib3.Timeout(connect=10.0, read=timeout or self.timeout),
                retries=False,
                preload_content=True,
            )
        except urllib3.exceptions.HTTPError as exc:
            raise connection_problem(self.host, exc) from None
        if resp.status >= 400:
            raise ApiError.from_response(resp.status, resp.data)
        return orjson.loads(resp.data) if resp.data else None

    def open_stream(self, path: str, query: dict[str, Any], timeout: float) -> Any:
        """Start a watch; returns the urllib3 response (``shutdown()`` it from another thread to stop reading)."""
        try:
            resp = self.pool.request(
                "GET",
                self.url(path, query),
                headers=self._headers(None),
                timeout=urllib3.Timeout(connect=10.0, read=timeout),
                retries=False,
                preload_content=False,
            )
        except urllib3.exceptions.HTTPError as exc:
            raise connection_problem(self.host, exc) from None
        if resp.status >= 400:
            data = resp.read()
            resp.release_conn()
            raise ApiError.from_response(resp.status, data)
        return resp

    # --- conveniences -------------------------------------------------------------------------------------------

    def get(self, path: str, **query: Any) -> Any:
        return self.request("GET", path, query=query)

    def create(self, path: str, body: dict[str, Any]) -> Any:
        return self.request("POST", path, body=body)

    def replace(self, path: str, body: dict[str, Any]) -> Any:
        return self.request("PUT", path, body=body)

    def merge_patch(self, path: str, body: dict[str, Any]) -> Any:
        return self.request("PATCH", path, body=body, content_type=MERGE_PATCH)

    def json_patch(self, path: str, ops: list[dict[str, Any]]) -> Any:
        return self.request("PATCH", path, body=ops, content_type=JSON_PATCH)

    def delete(self, path: str, body: dict[str, Any] | None = None) -> Any:
        return self.request("DELETE", path, body=body)

    def bind(self, namespace: str, name: str, uid: str | None, node: str) -> None:
        """POST pods/binding; the pod's UID is a precondition so a recreated pod of the same name is never bound."""
        meta: dict[str, Any] = {"name": name, "namespace": namespace}
        if uid:
            meta["uid"] = uid
        self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/pods/{quote(name)}/binding",
            body={
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": meta,
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            },
        )

    def evict(self, namespace: str, name: str, uid: str | None, grace_seconds: int | None = None) -> None:
        """POST pods/eviction (policy/v1): the API server refuses with 429 when a PodDisruptionBudget forbids it."""
        opts: dict[str, Any] = {}
        if uid:
            opts["preconditions"] = {"uid": uid}
        if grace_seconds is not None:
            opts["gracePeriodSeconds"] = grace_seconds
        body: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if opts:
            body["deleteOptions"] = opts
        self.request("POST", f"/api/v1/namespaces/{namespace}/pods/{quote(name)}/eviction", body=body)

    def delete_pod(self, namespace: str, name: str, uid: str | None, grace_seconds: int | None = None) -> None:
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        self.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{quote(name)}", body=body)


def iter_json_lines(resp: Any) -> Iterator[dict[str, Any]]:
    """Each newline-terminated JSON document of a streaming response, as a dict."""
    buf = b""
    try:
        for chunk in resp.stream(amt=None, decode_content=False):
            buf += chunk
            start = 0
            while True:
                nl = buf.find(b"\n", start)
                if nl < 0:
                    break
                line = buf[start:nl]
                start = nl + 1
                if line.strip():
                    yield orjson.loads(line)
            buf = buf[start:]
    finally:
        resp.release_conn()


# --- resource paths ------------------------------------------------------------------------------------------------


def resource_version(obj: dict[str, Any] | None) -> int:
    """An object's ``metadata.resourceVersion`` as a number, 0 when absent or not a number. The API server's are etcd
    revisions, so the larger one is the newer copy of an object: what a cache needs to prefer its own last write over
    a watch that lags behind it."""
    try:
        return int(((obj or {}).get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


PODGROUP_GROUP = "scheduling.run.ai"
PODGROUP_VERSION = "v2alpha2"
QUEUE_VERSION = "v2"


def serves(kube: Kube, group_version: str, resource: str) -> bool:
    """Whether the server serves ``resource`` in ``group_version`` (``scheduling.k8s.io/v1beta1``), by discovery:
    optional APIs (a feature gate, a newer release) are looked up once before their informers start, and a server
    without them gets none. A version the server does not serve at all is False; other errors are raised."""
    try:
        found = kube.get(f"/apis/{group_version}")
    except ApiError as exc:
        if exc.not_found:
            return False
        raise
    return any(r.get("name") == resource for r in (found or {}).get("resources") or [] if isinstance(r, dict))


def pods_path(namespace: str | None = None, name: str | None = None) -> str:
    base = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
    return f"{base}/{quote(name)}" if name else base


def podgroups_path(namespace: str | None = None, name: str | None = None) -> str:
    root = f"/apis/{PODGROUP_GROUP}/{PODGROUP_VERSION}"
    base = f"{root}/namespaces/{namespace}/podgroups" if namespace else f"{root}/podgroups"
    return f"{base}/{quote(name)}" if name else base


def queues_path(name: str | None = None) -> str:
    base = f"/apis/{PODGROUP_GROUP}/{QUEUE_VERSION}/queues"
    return f"{base}/{quote(name)}" if name else base


RAY_PLURALS = {"RayCluster": "rayclusters", "RayJob": "rayjobs", "RayService": "rayservices"}


def ray_path(kind: str, namespace: str | None = None, name: str | None = None, version: str = "v1") -> str:
    plural = RAY_PLURALS[kind]
    root = f"/apis/ray.io/{version}"
    base = f"{root}/namespaces/{namespace}/{plural}" if namespace else f"{root}/{plural}"
    return f"{base}/{quote(name)}" if name else base


def events_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/events"

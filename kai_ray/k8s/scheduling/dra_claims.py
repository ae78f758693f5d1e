"""The scheduler operator's side of Dynamic Resource Allocation: watch the DRA objects, write claim allocations.

Why the operator writes ``status.allocation`` and ``reservedFor`` itself: with ``schedulerName: kai-scheduler`` no
kube-scheduler runs its dynamicresources plugin for the pod, and the kubelet only prepares a claim that is allocated
and reserved for the pod. So, as kube-scheduler's plugin does in its PreBind step, the devices the core chose
(:attr:`~kai_ray.scheduler.decisions.Bind.claims`) are written to each claim before the pod is bound, and when a pod
goes its entry leaves ``reservedFor`` (the allocation too, once nobody reserves the claim), so its devices come
free.

API version: ``resource.k8s.io/v1`` (GA since Kubernetes 1.34, served by default). A server without v1 (an older
release, or v1 turned off) is read through the newest version it serves, found by discovery when the informers start
(one log line says which); :mod:`kai_ray.api.dra_objects` reads the v1, v1beta2 and v1beta1 shapes alike.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from kai_ray.api.dra_objects import pod_resource_claims
from kai_ray.api.meta import Pod as ApiPod
from kai_ray.bridge_dra import DraCatalog, attach, catalog_from_documents
from kai_ray.k8s.base.informer import DELETE, Informer, slim
from kai_ray.k8s.base.rest import ApiError, Kube, serves
from kai_ray.scheduler import snapshot as s
from kai_ray.scheduler.device_ledger import ClaimAllocation

log = logging.getLogger(__name__)

GROUP = "resource.k8s.io"
VERSION = f"{GROUP}/v1"
VERSIONS = (VERSION, f"{GROUP}/v1beta2", f"{GROUP}/v1beta1")  # newest first
KINDS = {
    "DeviceClass": "deviceclasses",
    "ResourceSlice": "resourceslices",
    "ResourceClaim": "resourceclaims",
    "ResourceClaimTemplate": "resourceclaimtemplates",
}
CLUSTER_SCOPED = ("DeviceClass", "ResourceSlice")


def claim_path(namespace: str, name: str, version: str = VERSION) -> str:
    return f"/apis/{version}/namespaces/{namespace}/resourceclaims/{name}"


def served_version(kube: Kube) -> str | None:
    """The newest ``resource.k8s.io`` version the server serves (v1, else v1beta2, else v1beta1), by discovery;
    None when it serves none of them (DRA is off: nothing is scheduled with it)."""
    return next((v for v in VERSIONS if serves(kube, v, "resourceclaims")), None)


def slim_pod_claims(obj: dict[str, Any], slimmed: dict[str, Any]) -> dict[str, Any]:
    """Keep the parts of a pod DRA reads (``spec.resourceClaims``, the claim names in its status) in the slimmed pod
    the scheduler cache holds."""
    spec = obj.get("spec") or {}
    if spec.get("resourceClaims"):
        slimmed["spec"]["resourceClaims"] = spec["resourceClaims"]
        status = obj.get("status") or {}
        for key in ("resourceClaimStatuses", "extendedResourceClaimStatus"):
            if key in status:
                slimmed["status"][key] = status[key]
    return slimmed


class DraStore:
    """DRA objects as the watch delivers them, the pods that name claims, and the catalog built from them."""

    def __init__(self, on_change: Callable[[], None] = lambda: None) -> None:
        self.on_change = on_change
        self.lock = threading.Lock()
        self.objects: dict[str, dict[str, dict[str, Any]]] = {kind: {} for kind in KINDS}
        self.pods: dict[str, ApiPod] = {}  # uid -> pods with spec.resourceClaims
        self.generation = 0
        self._catalog: tuple[int, DraCatalog] | None = None
        self.version = VERSION  # the resource.k8s.io version read and written, set by discovery in informers()

    def informers(self, kube: Kube) -> list[Informer]:
        try:
            served: str | None = served_version(kube)
        except ApiError as exc:
            if not exc.unreachable:
                raise
            # the informers wait for the server in the one retry loop; discovery cannot, so it assumes the GA API
            log.info("DRA: the API server is not reachable yet; reading claims through %s", VERSION)
            served = VERSION
        if served is None:
            log.info("DRA: the API server serves no resource.k8s.io version kai-ray reads (v1, v1beta2, v1beta1)")
        else:
            self.version = served
            if served == VERSION:
                log.info("DRA: reading and allocating claims through %s", served)
            else:
                log.info("DRA: the API server does not serve %s; falling back to %s", VERSION, served)
        out = []
        for kind, plural in KINDS.items():
            out.append(
                Informer(
                    kube,
                    f"/apis/{self.version}/{plural}",
                    name=plural,
                    handler=self._handler(kind),
                    missing_ok=True,  # the API is off in this cluster: nothing to schedule with it
                )
            )
        return out

    def _handler(self, kind: str) -> Callable[[str, str, dict[str, Any]], None]:
        def handle(event: str, key: str, obj: dict[str, Any]) -> None:
            with self.lock:
                if event == DELETE:
                    self.objects[kind].pop(key, None)
                else:
                    self.objects[kind][key] = slim({**obj, "kind": kind})
                self.generation += 1
            self.on_change()

        return handle

    def on_pod(self, event: str, key: str, obj: dict[str, Any]) -> ApiPod | None:
        """Keep the pods that name claims; returns a deleted one, whose claims the caller releases (:func:`release`)."""
        if not (obj.get("spec") or {}).get("resourceClaims"):
            return None
        uid = (obj.get("metadata") or {}).get("uid") or key
        try:
            pod = ApiPod.model_validate(obj)
        except ValidationError:
            return None
        with self.lock:
            if event == DELETE:
                self.pods.pop(uid, None)
            else:
                self.pods[uid] = pod
        self.on_change()  # e.g. the claim controller named the pod's claim in its status
        return pod if event == DELETE else None

    def active(self) -> bool:
        return bool(self.pods or self.objects["ResourceSlice"])

    def catalog(self) -> DraCatalog:
        with self.lock:
            gen = self.generation
            if self._catalog is not None and self._catalog[0] == gen:
                return self._catalog[1]
            docs = [obj for objs in self.objects.values() for obj in objs.values()]
        cat = catalog_from_documents(docs)
        self._catalog = (gen, cat)
        return cat

    def attach(self, snap: s.Snapshot) -> s.Snapshot:
        """A copy of the snapshot with DRA devices, claims and claimed GPUs (the cache's jobs and pods are shared
        between cycles, so they are copied, never changed)."""
        if not self.active():
            return snap
        cat = self.catalog()
        with self.lock:
            pods = dict(self.pods)
        jobs = [
            replace(j, pods=[replace(p) for p in j.pods]) if any(p.uid in pods for p in j.pods) else j
            for j in snap.jobs
        ]
        out = replace(snap, jobs=jobs)
        attach(out, pods, cat, make_template_claims=False)  # kube-controller-manager makes them
        return out


def _results(alloc: ClaimAllocation) -> list[dict[str, str]]:
    out = []
    for request, device_id in alloc.devices:
        driver, _, rest = device_id.partition("/")
        pool, _, device = rest.rpartition("/")
        out.append({"request": request, "driver": driver, "pool": pool, "device": device})
    return out


def reserve(
    kube: Kube, store: DraStore, namespace: str, pod_name: str, pod_uid: str, allocs: tuple[ClaimAllocation, ...]
) -> None:
    """Write each claim's allocation (when it has none yet) and add the pod to its ``reservedFor``, before binding,
    through the version ``store`` reads. Raises ApiError (e.g. a conflict: another writer changed the claim; the pod
    is scheduled again next cycle)."""
    for alloc in allocs:
        ns, _, name = alloc.claim.partition("/")
        path = claim_path(ns or namespace, name, store.version)
        for attempt in range(8):  # pods sharing a claim are bound in parallel: re-read on a conflict
            try:
                _reserve_one(kube, path, alloc, pod_name, pod_uid)
                break
            except ApiError as exc:
                if not exc.conflict or attempt == 7:
                    raise


def _reserve_one(kube: Kube, path: str, alloc: ClaimAllocation, pod_name: str, pod_uid: str) -> None:
    claim = kube.get(path)
    status = claim.get("status") or {}
    if not status.get("allocation"):
        status["allocation"] = {
            "devices": {"results": _results(alloc)},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [alloc.node]}]}
                ]
            },
        }
    reserved = status.get("reservedFor") or []
    if not any(r.get("uid") == pod_uid for r in reserved):
        reserved.append({"resource": "pods", "name": pod_name, "uid": pod_uid})
    status["reservedFor"] = reserved
    claim["status"] = status
    kube.replace(f"{path}/status", claim)


def release(kube: Kube, store: DraStore, pod: ApiPod) -> None:
    """A pod is gone: drop it from its claims' ``reservedFor``; a claim nobody reserves loses its allocation (KAI's
    deallocate handler does the same), so its devices are free again."""
    ns = pod.metadata.namespace or ""
    statuses = {
        st.get("name"): st.get("resourceClaimName")
        for st in ((pod.status.model_extra or {}).get("resourceClaimStatuses") or [] if pod.status else [])
        if isinstance(st, dict)
    }
    for prc in pod_resource_claims(pod.spec):
        name = prc.resource_claim_name or statuses.get(prc.name)
        if not name:
            continue
        path = claim_path(ns, name, store.version)
        for _ in range(5):
            try:
                claim = kube.get(path)
            except ApiError as exc:
                if exc.not_found:
                    break
                raise
            status = claim.get("status") or {}
            reserved = [r for r in status.get("reservedFor") or [] if r.get("uid") != pod.metadata.uid]
            if len(reserved) == len(status.get("reservedFor") or []):
                break
            status["reservedFor"] = reserved
            if not reserved:
                status.pop("allocation", None)
            claim["status"] = status
            try:
                kube.replace(f"{path}/status", claim)
                break
            except ApiError as exc:
                if not exc.conflict:
                    raise

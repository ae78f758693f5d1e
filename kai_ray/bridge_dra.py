"""DRA objects -> the core's devices and claims: CEL selectors evaluated here, so the core stays pure.

Why here and not in the core: a DeviceClass and a claim's request select devices with CEL expressions, and CEL needs
a CEL runtime (``cel-python``, the maintained pure-Python implementation); the scheduler core imports nothing but
numpy. So the adapters evaluate every (class, selectors) pair against every published device once per snapshot and
give the core sets of matching device ids; the core picks among them on the node it chooses.

Accounting follows KAI's DRA rule: a device request whose DeviceClass name contains "gpu" (case-insensitive) asks
for GPUs: ``count`` of them (``allocationMode: All`` counts as 1 until allocated, as KAI books it). Those GPUs are
added to the pod's GPU request and a node's GPU devices to its allocatable GPUs, so quotas, fair share, reclaim,
preemption, metrics and views count DRA GPUs like ``nvidia.com/gpu``. A claim counts once: a shared claim (named by
several pods) is charged to the first of them (by uid), and the claim Kubernetes made for a pod's extended-resource
request (``status.extendedResourceClaimStatus``) is not charged again on top of that request.

What kai-ray does not allocate is refused, never ignored: a request with ``firstAvailable`` alternatives, device-taint
tolerations, a consumable-capacity request or admin access makes its claim refused (the pods wait, and the reason is
in their Unschedulable Event); a device tainted ``NoSchedule`` or ``NoExecute`` takes no new claim.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import celpy
from celpy import celtypes

from kai_ray import constants as c
from kai_ray.api.dra_objects import (
    DeviceClass,
    ExactDeviceRequest,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    is_gpu_class,
    pod_resource_claims,
)
from kai_ray.api.meta import Pod as ApiPod
from kai_ray.api.quantity import QuantityError, parse_quantity
from kai_ray.scheduler import device_ledger as d
from kai_ray.scheduler import snapshot as s


def _number(q: Any) -> celtypes.Value:
    v = parse_quantity(q)
    return celtypes.IntType(int(v)) if float(v).is_integer() else celtypes.DoubleType(v)


def _quantity(text: Any) -> celtypes.Value:
    try:
        return _number(str(text))
    except QuantityError as exc:
        raise ValueError(str(exc)) from exc


def _compare(a: Any, b: Any) -> celtypes.Value:
    return celtypes.IntType((a > b) - (a < b))


# Kubernetes' CEL library for quantities (``quantity('40Gi')``, ``.compareTo``, ``.isGreaterThan``, ``.isLessThan``)
# over numbers: capacities reach CEL as plain numbers, so the same comparisons hold.
_FUNCTIONS: dict[str, Any] = {
    "quantity": _quantity,
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: celtypes.BoolType(a > b),
    "isLessThan": lambda a, b: celtypes.BoolType(a < b),
}


class CelSelectors:
    """Compiled CEL programs by expression text (KAI and kube-scheduler keep the same kind of cache)."""

    def __init__(self) -> None:
        self.env = celpy.Environment()
        self.programs: dict[str, Any] = {}
        self.errors: dict[str, str] = {}

    def program(self, expr: str) -> Any | None:
        if expr in self.errors:
            return None
        prog = self.programs.get(expr)
        if prog is None:
            try:
                prog = self.env.program(self.env.compile(expr), functions=_FUNCTIONS)
            except Exception as exc:  # celpy raises several unrelated types for a bad expression
                self.errors[expr] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                return None
            self.programs[expr] = prog
        return prog

    def matches(self, expr: str, activation: dict[str, Any]) -> bool:
        """True when the expression is true for the device; an evaluation error (a missing attribute) is a no match,
        as kube-scheduler's allocator skips a device whose selector cannot be evaluated."""
        prog = self.program(expr)
        if prog is None:
            return False
        try:
            return bool(prog.evaluate(activation)) is True
        except Exception:  # CELEvalError, and Python errors for missing keys
            return False


def _qualified(name: str, driver: str) -> tuple[str, str]:
    domain, _, short = name.rpartition("/")
    return (domain or driver, short)


class DraCatalog:
    """The published devices and the claim specs of one snapshot, with selector results cached."""

    def __init__(
        self,
        classes: Iterable[DeviceClass] = (),
        slices: Iterable[ResourceSlice] = (),
        claims: Iterable[ResourceClaim] = (),
        templates: Iterable[ResourceClaimTemplate] = (),
        problems: list[str] | None = None,
    ) -> None:
        self.problems = problems if problems is not None else []
        self.cel = CelSelectors()
        self.classes = {c.metadata.name or "": c for c in classes}
        self.templates = {f"{t.metadata.namespace}/{t.metadata.name}": t for t in templates}
        self.api_claims = {f"{c.metadata.namespace}/{c.metadata.name}": c for c in claims}
        self._act: dict[str, dict[str, Any]] = {}
        self.device_list: list[tuple[str, str]] = []  # (id, node)
        for sl in slices:
            spec = sl.spec
            if not spec.node_name:
                continue  # network-attached pools (allNodes / nodeSelector) are not scheduled by kai-ray
            for dev in spec.devices:
                did = f"{spec.driver}/{spec.pool.name or spec.node_name}/{dev.name}"
                if did in self._act:
                    continue
                body = dev.body()
                if any((t or {}).get("effect") in ("NoSchedule", "NoExecute") for t in body.taints or []):
                    continue  # a tainted device takes no new claim (tolerations are refused with the claim)
                attrs: dict[str, dict[str, Any]] = {}
                for k, a in body.attributes.items():
                    dom, short = _qualified(k, spec.driver)
                    attrs.setdefault(dom, {})[short] = a.value()
                caps: dict[str, dict[str, Any]] = {}
                for k, cap in body.capacity.items():
                    dom, short = _qualified(k, spec.driver)
                    raw = cap.value if hasattr(cap, "value") else cap
                    try:
                        caps.setdefault(dom, {})[short] = _number(raw)
                    except QuantityError as exc:
                        self.problems.append(f"ResourceSlice {sl.metadata.name} device {dev.name} capacity[{k}]: {exc}")
                self._act[did] = {
                    "device": celtypes.MapType(
                        {
                            celtypes.StringType("driver"): celtypes.StringType(spec.driver),
                            celtypes.StringType("attributes"): celpy.json_to_cel(attrs),
                            celtypes.StringType("capacity"): celtypes.MapType(
                                {
                                    celtypes.StringType(dom): celtypes.MapType(
                                        {celtypes.StringType(k): v for k, v in vals.items()}
                                    )
                                    for dom, vals in caps.items()
                                }
                            ),
                        }
                    )
                }
                self.device_list.append((did, spec.node_name))
        self._class_match: dict[str, frozenset[str]] = {}
        self._req_cache: dict[tuple[str, tuple[str, ...]], frozenset[str]] = {}
        gpu_ids: set[str] = set()
        gpu_classes = [name for name in self.classes if is_gpu_class(name)]
        for name in gpu_classes:
            gpu_ids |= self.class_matches(name)
        if not gpu_classes:  # no GPU DeviceClass published: a device of a GPU driver is a GPU
            gpu_ids = {did for did, _ in self.device_list if is_gpu_class(did.split("/", 1)[0])}
        self.devices = [d.Device(did, node, did in gpu_ids) for did, node in self.device_list]

    def class_matches(self, name: str) -> frozenset[str]:
        hit = self._class_match.get(name)
        if hit is None:
            dc = self.classes.get(name)
            exprs = [sel.cel.expression for sel in dc.spec.selectors if sel.cel] if dc is not None else []
            hit = frozenset(
                did for did, _ in self.device_list if all(self.cel.matches(e, self._act[did]) for e in exprs)
            )
            self._class_match[name] = hit if dc is not None else frozenset()
        return self._class_match[name]

    def request(self, name: str, exact: ExactDeviceRequest, where: str) -> d.DeviceRequest:
        exprs = tuple(sel.cel.expression for sel in exact.selectors if sel.cel)
        key = (exact.device_class_name, exprs)
        hit = self._req_cache.get(key)
        if hit is None:
            base = self.class_matches(exact.device_class_name)
            hit = frozenset(did for did in base if all(self.cel.matches(e, self._act[did]) for e in exprs))
            self._req_cache[key] = hit
            for e in exprs:
                if e in self.cel.errors:
                    self.problems.append(f"{where} request {name} selector {e!r}: {self.cel.errors[e]}")
        mode = (exact.allocation_mode or "ExactCount").lower()
        return d.DeviceRequest(
            name=name,
            device_class=exact.device_class_name,
            count=max(1, exact.count or 1),
            all=mode == "all",
            matches=hit,
            selectors=exprs,
        )

    def claim(self, key: str, spec_requests: list[Any], allocation: dict[str, tuple[str, ...]] | None) -> d.Claim:
        reqs = tuple(self.request(r.name, r.exact(), f"ResourceClaim {key}") for r in spec_requests)
        refused = [f"request {r.name} {why}" for r in spec_requests if (why := r.unsupported())]
        out = d.Claim(key=key, requests=reqs, allocation=allocation)
        if refused and allocation is None:
            out.refused = f"{'; '.join(refused)}: kai-ray does not allocate that"
        return out


def claim_gpus(claim: d.Claim) -> float:
    """GPUs a claim asks for (KAI: requests of a GPU class; allocationMode All counts its allocated devices, 1 before
    allocation)."""
    total = 0
    for r in claim.requests:
        if not is_gpu_class(r.device_class):
            continue
        if r.all:
            got = len((claim.allocation or {}).get(r.name, ()))
            total += got or 1
        else:
            total += r.count
    return float(total)


def _allocation_of(c: ResourceClaim) -> dict[str, tuple[str, ...]] | None:
    alloc = c.status.allocation if c.status is not None else None
    if alloc is None:
        return None
    out: dict[str, list[str]] = {}
    for r in alloc.devices.results:
        out.setdefault(r.request, []).append(f"{r.driver}/{r.pool}/{r.device}")
    return {k: tuple(v) for k, v in out.items()}


def template_claim_name(pod_name: str, claim_name: str) -> str:
    """The name kai-ray gives a claim made from a template for one pod where Kubernetes has not made one yet."""
    return f"{pod_name}-{claim_name}"


def pod_claim_keys(pod: ApiPod, catalog: DraCatalog, make: bool = True) -> tuple[tuple[str, bool], ...]:
    """(claim key, from a template) for each entry of the pod's ``spec.resourceClaims``. A template claim that
    Kubernetes has not created yet is built here from the template when ``make`` (offline: nothing else would make
    it); against a cluster (``make`` False) kube-controller-manager makes it, and the pod waits for it."""
    ns = pod.metadata.namespace or ""
    statuses = {
        st.get("name"): st.get("resourceClaimName")
        for st in ((pod.status.model_extra or {}).get("resourceClaimStatuses") or [] if pod.status else [])
        if isinstance(st, dict)
    }
    out: list[tuple[str, bool]] = []
    for prc in pod_resource_claims(pod.spec):
        if prc.resource_claim_name:
            out.append((f"{ns}/{prc.resource_claim_name}", False))
            continue
        if not prc.resource_claim_template_name:
            continue
        name = statuses.get(prc.name) or template_claim_name(pod.metadata.name or "", prc.name)
        key = f"{ns}/{name}"
        if make and key not in catalog.api_claims:
            tpl = catalog.templates.get(f"{ns}/{prc.resource_claim_template_name}")
            if tpl is None:
                catalog.problems.append(
                    f"Pod {pod.metadata.name} resourceClaims[{prc.name}]: ResourceClaimTemplate "
                    f"{prc.resource_claim_template_name!r} not found"
                )
            else:
                catalog.api_claims[key] = ResourceClaim(metadata={"name": name, "namespace": ns}, spec=tpl.spec.spec)
        out.append((key, True))
    return tuple(out)


def attach(
    snap: s.Snapshot,
    api_pods: dict[str, ApiPod],
    catalog: DraCatalog,
    queue_label: str = c.QUEUE_LABEL,
    make_template_claims: bool = True,
) -> None:
    """Give the snapshot its devices and claims, the pods their claim keys and claimed GPUs, the nodes their GPU
    devices. ``api_pods``: the API pod of each snapshot pod, by the core pod's uid. The snapshot's pods are changed
    in place (adapters build them per snapshot); its nodes are replaced by copies."""
    claims: dict[str, d.Claim] = {}
    charged: set[str] = set()
    pods = sorted((p for j in snap.jobs for p in j.pods), key=lambda p: p.uid)
    uids = {p.uid for p in pods} | {api.metadata.uid for api in api_pods.values() if api.metadata.uid}
    for pod in pods:
        api = api_pods.get(pod.uid)
        if api is None:
            continue
        keys = pod_claim_keys(api, catalog, make_template_claims)
        if not keys:
            continue
        ext = ((api.status.model_extra or {}).get("extendedResourceClaimStatus") or {}) if api.status else {}
        ext_claim = f"{pod.namespace}/{ext.get('resourceClaimName')}" if isinstance(ext, dict) else ""
        gpus = 0.0
        for key, from_template in keys:
            claim = claims.get(key)
            if claim is None:
                api_claim = catalog.api_claims.get(key)
                if api_claim is None:
                    claim = d.Claim(key=key, exists=False)  # the pod waits; the core says the claim is missing
                else:
                    claim = catalog.claim(key, api_claim.spec.devices.requests, _allocation_of(api_claim))
                    claim.shared = not from_template
                    if claim.shared and any(is_gpu_class(r.device_class) for r in claim.requests):
                        claim.queue = api_claim.metadata.labels.get(queue_label, "")
                    reserved = api_claim.status.reserved_for if api_claim.status is not None else []
                    claim.consumers = sum(1 for r in reserved if r.uid not in uids)
                claims[key] = claim
            if key in charged or key == ext_claim:
                continue
            charged.add(key)
            gpus += claim_gpus(claim)
        pod.claims = tuple(k for k, _ in keys)
        if gpus:
            pod.request = replace(pod.request, gpu=pod.request.gpu + gpus)
    gpus_of = node_gpu_devices(catalog)
    snap.nodes = [
        replace(n, allocatable=replace(n.allocatable, gpu=n.allocatable.gpu + gpus_of[n.name]))
        if n.name in gpus_of
        else n
        for n in snap.nodes
    ]
    snap.devices = list(catalog.devices)
    snap.claims = list(claims.values())


def node_gpu_devices(catalog: DraCatalog) -> dict[str, int]:
    """GPU devices per node: added to the node's allocatable GPUs, so DRA GPUs are capacity like device-plugin ones."""
    out: dict[str, int] = {}
    for dev in catalog.devices:
        if dev.gpu:
            out[dev.node] = out.get(dev.node, 0) + 1
    return out


DEFAULT_GPU_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
}


def catalog_from_documents(docs: Iterable[dict[str, Any]], problems: list[str] | None = None) -> DraCatalog:
    """A catalog from DRA manifests (DeviceClass, ResourceSlice, ResourceClaim, ResourceClaimTemplate); without any
    DeviceClass, NVIDIA's ``gpu.nvidia.com`` class (every device of that driver) is assumed, as its driver installs."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        by_kind.setdefault(str(doc.get("kind")), []).append(doc)
    classes = by_kind.get("DeviceClass") or [DEFAULT_GPU_CLASS]
    return DraCatalog(
        [DeviceClass.model_validate(x) for x in classes],
        [ResourceSlice.model_validate(x) for x in by_kind.get("ResourceSlice", [])],
        [ResourceClaim.model_validate(x) for x in by_kind.get("ResourceClaim", [])],
        [ResourceClaimTemplate.model_validate(x) for x in by_kind.get("ResourceClaimTemplate", [])],
        problems,
    )


def template_pod_claims(
    pod: ApiPod, catalog: DraCatalog
) -> tuple[tuple[str, ...], dict[str, tuple[d.DeviceRequest, ...]], float]:
    """For a pod template (the simulator's KubeRay pods): the core pod's claim entries (the pod claim's name for a
    claim made per pod from a template, the claim's key for a shared one), the requests of each per-pod claim, and
    the GPUs the per-pod claims charge. A missing template is a problem and the claim asks for nothing."""
    ns = pod.metadata.namespace or ""
    entries: list[str] = []
    requests: dict[str, tuple[d.DeviceRequest, ...]] = {}
    gpus = 0.0
    for prc in pod_resource_claims(pod.spec):
        if prc.resource_claim_name:
            entries.append(f"{ns}/{prc.resource_claim_name}")
            continue
        tpl = catalog.templates.get(f"{ns}/{prc.resource_claim_template_name}")
        if tpl is None:
            catalog.problems.append(
                f"Pod {pod.metadata.name} resourceClaims[{prc.name}]: ResourceClaimTemplate "
                f"{prc.resource_claim_template_name!r} not found"
            )
            continue
        claim = catalog.claim(f"{ns}/{prc.name}", tpl.spec.spec.devices.requests, None)
        entries.append(prc.name)
        requests[prc.name] = claim.requests
        gpus += claim_gpus(claim)
    return tuple(entries), requests, gpus

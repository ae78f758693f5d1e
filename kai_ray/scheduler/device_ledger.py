"""Dynamic Resource Allocation in the core: devices per node, claims per pod, and the ledger of who holds what.

Why the selectors are already evaluated here: a ResourceClaim request names a DeviceClass and CEL selectors, and
evaluating CEL needs a CEL library the pure core must not import. The adapters (``kai_ray.bridge``) evaluate the
class's and the request's selectors against every published device once per snapshot, and hand the core the set
of matching device ids (:attr:`DeviceRequest.matches`). The core then does what kube-scheduler's dynamicresources
plugin does on the chosen node: pick free matching devices for each request (``count``, or every matching device for
``allocationMode: All``), all or nothing per pod, and hold them until the pods using the claim are gone.

Why the ledger keeps claims, not pods: a claim made from a template belongs to one pod, but a named ResourceClaim
may be shared by several pods; its devices are allocated once (by the first pod placed) and every later user must
land on the node that holds them. GPU accounting (queues, fair share, reclaim) is not done here: the adapters add a
claim's GPU devices to the pod's GPU request and a node's GPU devices to its allocatable GPUs, so every quota, fair
share and victim computation counts DRA GPUs exactly like ``nvidia.com/gpu`` ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, slots=True)
class Device:
    """One published device. ``id`` is ``driver/pool/name`` (unique in the cluster, as in an allocation result)."""

    id: str
    node: str
    gpu: bool = False  # its DeviceClass counts as a GPU (KAI: the class name contains "gpu")


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    name: str
    device_class: str
    count: int = 1
    all: bool = False  # allocationMode All: every matching device of the node
    matches: frozenset[str] = frozenset()  # ids of the devices passing the class's and the request's selectors
    selectors: tuple[str, ...] = ()  # the CEL text, for explanations

    def describe(self) -> str:
        sel = f" with selector {' && '.join(self.selectors)}" if self.selectors else ""
        n = "all devices" if self.all else f"{self.count} device{'s' if self.count != 1 else ''}"
        return f"request {self.name} ({n} of class {self.device_class}{sel})"


@dataclass(slots=True)
class Claim:
    """A ResourceClaim. ``allocation`` (request -> device ids) is set when the claim is already allocated."""

    key: str  # namespace/name
    requests: tuple[DeviceRequest, ...] = ()
    allocation: dict[str, tuple[str, ...]] | None = None
    shared: bool = False  # a named claim, not one made from a template for one pod
    # KAI: a shared GPU claim must carry the queue label of the jobs using it ("" = no label); None = not checked
    queue: str | None = None
    consumers: int = 0  # reservedFor entries of pods outside the snapshot (a claim has at most MAX_CONSUMERS)
    exists: bool = True  # False: named by a pod but not created (yet): its pods wait
    refused: str = ""  # why the adapters refuse the claim (a DRA feature kai-ray does not allocate): its pods wait


MAX_CONSUMERS = 256  # resource.k8s.io ResourceClaimReservedForMaxSize


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    """The devices chosen for one claim, carried by a Bind so the adapter writes ``status.allocation`` and
    ``reservedFor`` before it binds the pod."""

    claim: str
    node: str
    devices: tuple[tuple[str, str], ...]  # (request name, device id)


@dataclass(slots=True)
class _State:
    node: int
    devices: dict[str, tuple[str, ...]]


@dataclass(slots=True)
class Taken:
    """What :meth:`DeviceLedger.take` changed, for the undo of one allocation."""

    claims: tuple[str, ...]
    new: tuple[str, ...]  # claims allocated by this take
    prev_owner: dict[str, str] = field(default_factory=dict)  # device -> claim that held it (pipelined take-over)


class DeviceLedger:
    """One cycle's device accounting. A device is free when no claim holds it; a held device is "releasing" (usable
    by a pipelined pod) when no active pod uses the claim holding it."""

    def __init__(self, devices: list[Device], claims: list[Claim], node_index: dict[str, int]) -> None:
        self.node_of: dict[str, int] = {}
        self.by_node: dict[int, list[str]] = {}
        for d in devices:
            n = node_index.get(d.node)
            if n is None or d.id in self.node_of:
                continue
            self.node_of[d.id] = n
            self.by_node.setdefault(n, []).append(d.id)
        self.claims = {c.key: c for c in claims}
        self.state: dict[str, _State] = {}
        self.owner: dict[str, str] = {}
        self.users: dict[str, int] = {}
        for c in claims:
            if c.allocation is None:
                continue
            nodes = {self.node_of[i] for held in c.allocation.values() for i in held if i in self.node_of}
            node = min(nodes) if nodes else -1
            self.state[c.key] = _State(node, dict(c.allocation))
            for held in c.allocation.values():
                for dev_id in held:
                    self.owner[dev_id] = c.key

    # ------------------------------------------------------------------ questions
    def _free(self, d: str, future: bool) -> bool:
        o = self.owner.get(d)
        return o is None or (future and self.users.get(o, 0) <= 0)

    def refusal(self, claims: tuple[str, ...], queue: str) -> str | None:
        """Why the pod may not use its claims wherever it goes (KAI's pre-filter): a shared GPU claim whose queue
        label is missing or names another queue, a claim whose consumers are at the API's limit, or a claim the adapters
        refused."""
        for key in claims:
            claim = self.claims.get(key)
            if claim is None:
                continue
            if claim.refused:
                return f"claim {key} {claim.refused}"
            if claim.queue is not None and claim.queue != queue:
                if not claim.queue:
                    return f"claim {key} is a shared GPU claim without a queue label (kai.scheduler/queue)"
                return f"claim {key} is a shared GPU claim of queue {claim.queue!r}, not {queue!r}"
            if claim.consumers + self.users.get(key, 0) >= MAX_CONSUMERS:
                return f"claim {key} has reached its maximum number of consumers ({MAX_CONSUMERS})"
        return None

    def _choose(self, claims: tuple[str, ...], node: int, future: bool) -> dict[str, dict[str, tuple[str, ...]]] | None:
        """Devices on ``node`` for each not-yet-allocated claim, or None when some request cannot be met (kube-
        scheduler's allocator, greedy in request order: devices are interchangeable once they pass the selectors)."""
        chosen: dict[str, dict[str, tuple[str, ...]]] = {}
        used: set[str] = set()
        on_node = self.by_node.get(node, ())
        for key in claims:
            st = self.state.get(key)
            if st is not None:
                if st.node != node:
                    return None
                continue
            claim = self.claims.get(key)
            if claim is None or not claim.exists:
                return None
            per: dict[str, tuple[str, ...]] = {}
            for req in claim.requests:
                cands = [d for d in on_node if d in req.matches and d not in used]
                if req.all:
                    if not cands or not all(self._free(d, future) for d in cands):
                        return None
                    pick = cands
                else:
                    pick = [d for d in cands if self._free(d, future)][: req.count]
                    if len(pick) < req.count:
                        return None
                used.update(pick)
                per[req.name] = tuple(pick)
            chosen[key] = per
        return chosen

    def mask(self, claims: tuple[str, ...], base: np.ndarray, future: bool, queue: str) -> np.ndarray:
        out = np.zeros_like(base)
        if self.refusal(claims, queue) is not None:
            return out
        for n in np.flatnonzero(base).tolist():
            out[n] = self._choose(claims, n, future) is not None
        return out

    def unsatisfiable(self, claims: tuple[str, ...], base: np.ndarray, queue: str) -> str | None:
        """Why the pod can never use its claims: a refusal, or the first request no eligible node could meet even
        with every device free."""
        refused = self.refusal(claims, queue)
        if refused is not None:
            return refused
        for key in claims:
            claim = self.claims.get(key)
            if claim is None or not claim.exists:
                return f"claim {key} does not exist (yet)"
            if key in self.state:
                st = self.state[key]
                if st.node < 0 or not base[st.node]:
                    return f"claim {key} is allocated on a node the pod may not use"
                continue
            for req in claim.requests:
                ok = False
                for n in np.flatnonzero(base).tolist():
                    k = sum(1 for d in self.by_node.get(n, ()) if d in req.matches)
                    if (k >= 1) if req.all else (k >= req.count):
                        ok = True
                        break
                if not ok:
                    return f"claim {key} {req.describe()}: no eligible node has enough matching devices"
        return None

    def allocation(self, key: str, node_names: list[str]) -> ClaimAllocation | None:
        st = self.state.get(key)
        if st is None or st.node < 0:
            return None
        devs = tuple((r, d) for r, ds in st.devices.items() for d in ds)
        return ClaimAllocation(key, node_names[st.node], devs)

    # ------------------------------------------------------------------ changes (each undone in LIFO order)
    def take(self, claims: tuple[str, ...], node: int, future: bool) -> Taken:
        chosen = self._choose(claims, node, future) or {}
        taken = Taken(claims, tuple(chosen))
        for key, per in chosen.items():
            self.state[key] = _State(node, per)
            for devs in per.values():
                for d in devs:
                    if d in self.owner:
                        taken.prev_owner[d] = self.owner[d]
                    self.owner[d] = key
        self.use(claims, 1)
        return taken

    def untake(self, taken: Taken) -> None:
        self.use(taken.claims, -1)
        for key in taken.new:
            st = self.state.pop(key)
            for devs in st.devices.values():
                for d in devs:
                    prev = taken.prev_owner.get(d)
                    if prev is None:
                        self.owner.pop(d, None)
                    else:
                        self.owner[d] = prev

    def use(self, claims: tuple[str, ...], sign: int) -> None:
        for key in claims:
            self.users[key] = self.users.get(key, 0) + sign

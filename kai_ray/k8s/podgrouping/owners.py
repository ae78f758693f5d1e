"""Owner chains: from a pod (or a Ray object) up ``ownerReferences`` to its top owner.

Ray owners and KubeRay's submitter Jobs come from the informers; the few built-in kinds that may sit between a pod
and a Ray object (:data:`~kai_ray.podgrouper.defaultgrouper.GENERIC_OWNERS`) are read with a GET and remembered for
:data:`OWNER_TTL` seconds, so a Deployment's hundred pods cost one read, not a hundred.
"""

from __future__ import annotations

import time
from typing import Any

from kai_ray import constants as c
from kai_ray.k8s.base.metrics import PodgrouperMetrics
from kai_ray.k8s.base.rest import ApiError, Kube, ray_path
from kai_ray.k8s.podgrouping.watches import Watches
from kai_ray.podgrouper import SUBMITTER_JOB
from kai_ray.podgrouper.defaultgrouper import GENERIC_OWNERS, controller_ref, has_skip_marks, skip_marks

MAX_OWNER_DEPTH = 8
OWNER_TTL = 30.0  # seconds a built-in owner read by GET is remembered
OWNER_CACHE_SIZE = 5000


class OwnerError(Exception):
    """The owner chain cannot be followed yet (an owner is missing or its UID does not match); retried."""


class Owners:
    def __init__(self, kube: Kube, watches: Watches) -> None:
        self.kube = kube
        self.watches = watches
        self._read: dict[tuple[str, str, str], tuple[float, dict[str, Any] | None]] = {}  # -> (until, object)

    def owner(self, ns: str, ref: dict[str, Any]) -> dict[str, Any] | None:
        """The owner object a reference points to (Ray kinds and KubeRay's Jobs from caches, a few built-in kinds by
        GET); None for a kind the podgrouper does not follow. A Ray owner that does not exist is an
        :class:`OwnerError`."""
        kind, name, api = ref.get("kind", ""), ref.get("name", ""), ref.get("apiVersion", "")
        if kind in c.RAY_KINDS and api.startswith("ray.io/"):
            obj = self.watches.ray_object(kind, f"{ns}/{name}")
            if obj is None:
                try:
                    obj = self.kube.get(ray_path(kind, ns, name, api.split("/", 1)[1]))
                except ApiError as exc:
                    if exc.not_found:
                        raise OwnerError(f"{kind} {ns}/{name} (owner) not found") from None
                    raise
            return obj
        template = GENERIC_OWNERS.get((api, kind))
        if template is None:
            return None
        if (api, kind) == SUBMITTER_JOB:
            cached = self.watches.job(f"{ns}/{name}")
            if cached is not None and (not ref.get("uid") or (cached.get("metadata") or {}).get("uid") == ref["uid"]):
                return cached
        key = (kind, ns, name)
        hit = self._read.get(key)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        try:
            obj = self.kube.get(template.format(ns=ns, name=name))
        except ApiError as exc:
            if not exc.not_found:
                raise
            obj = None
        self._read[key] = (time.monotonic() + OWNER_TTL, obj)
        if len(self._read) > OWNER_CACHE_SIZE:
            self._read.clear()
        return obj

    def chain(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        """``[obj, owner, owner's owner, ...]`` up to the first object without a (known) owner."""
        chain = [obj]
        ns = (obj.get("metadata") or {}).get("namespace", "")
        while len(chain) <= MAX_OWNER_DEPTH:
            ref = controller_ref(chain[-1].get("metadata") or {})
            if ref is None:
                break
            owner = self.owner(ns, ref)
            if owner is None:
                break
            uid = (owner.get("metadata") or {}).get("uid")
            if ref.get("uid") and uid and ref["uid"] != uid:
                raise OwnerError(f"owner {ref.get('kind')} {ns}/{ref.get('name')} has UID {uid}, not {ref['uid']}")
            chain.append(owner)
        return chain


def owner_kinds(chain: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """``(apiVersion, kind)`` of each controlling owner along ``chain`` (``[pod, owner, ...]``), nearest first, as
    the references name them (cached objects need not carry their own kind)."""
    out = []
    for obj in chain[:-1]:
        ref = controller_ref(obj.get("metadata") or {}) or {}
        out.append((str(ref.get("apiVersion", "")), str(ref.get("kind", ""))))
    return out


def mark_owner(kube: Kube, metrics: PodgrouperMetrics, kind: str, obj: dict[str, Any]) -> None:
    """KAI-coexistence: tell KAI's podgrouper to leave this Ray object (and so its pods) to kai-ray."""
    meta = obj.get("metadata") or {}
    if has_skip_marks(meta):
        return
    kube.merge_patch(
        ray_path(kind, meta.get("namespace"), meta.get("name")), {"metadata": {"annotations": skip_marks()}}
    )
    metrics.owners_marked.inc()

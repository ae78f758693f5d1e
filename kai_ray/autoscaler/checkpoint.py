"""Tell kai-ray when a Ray program last checkpointed, so its scheduler evicts the run that loses least.

The scheduler reads ``kai-ray.io/last-checkpoint-time`` (RFC 3339) on the Ray object that owns the workload (the
RayJob, the RayService, or a RayCluster of its own); the podgrouper copies it onto the PodGroup, and among
otherwise equal victims the one with the most recent checkpoint goes first (``docs/ray-native.md``). Only the
program knows when a checkpoint is safely written, so it says so from inside Ray:

* Ray Train: ``RunConfig(callbacks=[checkpoint_callback()])`` marks every ``ray.train.report`` that carried a
  checkpoint (the callback runs in the Train controller, in some pod of the cluster);
* anything else: call :func:`record_checkpoint` after the checkpoint is durable.

Both find the owner from the pod they run in (its ``ray.io/cluster`` label, that RayCluster's controller) once,
then send one merge patch per checkpoint with the pod's service account. That account needs, in its namespace::

    - apiGroups: [""]        resources: [pods]                          verbs: [get]
    - apiGroups: [ray.io]    resources: [rayclusters]                   verbs: [get, patch]
    - apiGroups: [ray.io]    resources: [rayjobs, rayservices]          verbs: [patch]

(``examples/ray-native/checkpoint-rbac.yaml``). A failure is logged and reported as ``False``, never raised:
a training run must not stop because the scheduler could not be told.
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import datetime
from pathlib import Path
from typing import Any

from kai_ray import constants as c
from kai_ray.durations import rfc3339
from kai_ray.k8s.base.rest import ApiError, Kube, pods_path, ray_path

log = logging.getLogger(__name__)

SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class CheckpointRecorder:
    """Patches ``kai-ray.io/last-checkpoint-time`` onto the Ray object that owns the pod this runs in.

    ``pod`` defaults to ``$POD_NAME``, else the hostname (a pod's hostname is its name); ``namespace`` to
    ``$POD_NAMESPACE``, else the service account's namespace file; ``kube`` to ``$KUBECONFIG`` or the in-cluster
    service account."""

    def __init__(self, kube: Kube | None = None, pod: str | None = None, namespace: str | None = None) -> None:
        self._kube = kube
        self.pod = pod or os.environ.get("POD_NAME") or socket.gethostname()
        self.namespace = namespace or os.environ.get("POD_NAMESPACE") or _sa_namespace()
        self._target: tuple[str, str] | None = None  # (kind, name) of the owner, found once

    @property
    def kube(self) -> Kube:
        if self._kube is None:
            self._kube = Kube.connect(os.environ.get("KUBECONFIG") or None)
        return self._kube

    def target(self) -> tuple[str, str]:
        """The Ray object to annotate: the RayCluster's controller (RayJob or RayService), else the RayCluster."""
        if self._target is not None:
            return self._target
        ns = self.namespace
        pod = self.kube.get(pods_path(ns, self.pod))
        cluster = (pod.get("metadata", {}).get("labels") or {}).get(c.RAY_CLUSTER)
        if not cluster:
            raise LookupError(f"pod {ns}/{self.pod} has no {c.RAY_CLUSTER} label: not a KubeRay pod")
        rc = self.kube.get(ray_path("RayCluster", ns, cluster))
        owner = next(
            (
                ref
                for ref in rc.get("metadata", {}).get("ownerReferences") or []
                if ref.get("controller") and ref.get("kind") in ("RayJob", "RayService")
            ),
            None,
        )
        self._target = (owner["kind"], owner["name"]) if owner is not None else ("RayCluster", cluster)
        return self._target

    def record(self, when: datetime | None = None) -> bool:
        """Mark a checkpoint taken ``when`` (default now). True when the owner was patched."""
        stamp = rfc3339(when.timestamp() if when else None)
        try:
            kind, name = self.target()
            self.kube.merge_patch(
                ray_path(kind, self.namespace, name), {"metadata": {"annotations": {c.LAST_CHECKPOINT: stamp}}}
            )
        except (ApiError, LookupError, OSError) as exc:
            log.warning("kai-ray: could not record the checkpoint of %s/%s: %s", self.namespace, self.pod, exc)
            return False
        return True


def _sa_namespace() -> str:
    try:
        return SA_NAMESPACE.read_text().strip()
    except OSError:
        return "default"


_default: CheckpointRecorder | None = None


def record_checkpoint(when: datetime | None = None) -> bool:
    """For custom training loops: call after a checkpoint is durable. True when kai-ray was told."""
    global _default
    if _default is None:
        _default = CheckpointRecorder()
    return _default.record(when)


def checkpoint_callback(recorder: CheckpointRecorder | None = None) -> Any:
    """A Ray Train ``UserCallback`` (Ray Train v2) that records every report carrying a checkpoint.

    Built on call, so importing this module needs neither Ray Train nor its dependencies."""
    from ray.train import UserCallback

    rec = recorder or CheckpointRecorder()

    class KaiRayCheckpointCallback(UserCallback):
        def after_report(self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any) -> None:
            if checkpoint is not None:
                rec.record()

    return KaiRayCheckpointCallback()

"""One pod of our scheduler: its top owner's PodGroup created or brought up to date, then the pod stamped with it.

In that order, so the scheduler never sees a stamped pod without its group: a pod under a Ray object joins the Ray
object's gang (:mod:`~kai_ray.k8s.podgrouping.ray_gangs`), any other pod gets a PodGroup of its own (KAI's default
grouper). A K8sJobMode RayJob's submitter pod carries no Ray label: it is recognised by its owners (pod -> batch Job
-> RayJob, :func:`~kai_ray.podgrouper.is_submitter`) and stamped into the RayJob's ``submitter`` subgroup.
"""

from __future__ import annotations

import logging

from pydantic import ValidationError

from kai_ray import constants as c
from kai_ray.api.meta import Pod
from kai_ray.k8s.base.metrics import PodgrouperMetrics
from kai_ray.k8s.base.rest import Kube
from kai_ray.k8s.podgrouping.orphans import Orphans
from kai_ray.k8s.podgrouping.owners import Owners, mark_owner, owner_kinds
from kai_ray.k8s.podgrouping.pod_stamps import DeferredStamp, PodStamps
from kai_ray.k8s.podgrouping.podgroup_writer import PodGroupWriter
from kai_ray.k8s.podgrouping.ray_gangs import RayGangs
from kai_ray.k8s.podgrouping.watches import Watches
from kai_ray.podgrouper import PodgrouperConfig, is_submitter
from kai_ray.podgrouper.defaultgrouper import single_pod_group, skip_requested

log = logging.getLogger(__name__)


class PodReconciler:
    def __init__(
        self,
        kube: Kube,
        metrics: PodgrouperMetrics,
        grouper_config: PodgrouperConfig,
        watches: Watches,
        owners: Owners,
        gangs: RayGangs,
        podgroups: PodGroupWriter,
        stamps: PodStamps,
        orphans: Orphans,
        *,
        kai_coexistence: bool = False,
        upstream_gangs: bool = False,
    ) -> None:
        self.kube = kube
        self.metrics = metrics
        self.grouper_config = grouper_config
        self.watches = watches
        self.owners = owners
        self.gangs = gangs
        self.podgroups = podgroups
        self.stamps = stamps
        self.orphans = orphans
        self.kai_coexistence = kai_coexistence
        self.upstream_gangs = upstream_gangs

    def reconcile(self, key: str) -> DeferredStamp | None:
        """Group and stamp the pod ``<ns>/<name>``; returns the stamp to write later when it may wait (see
        :mod:`~kai_ray.k8s.podgrouping.pod_stamps`). An owner that cannot be followed is an
        :class:`~kai_ray.k8s.podgrouping.owners.OwnerError`."""
        raw = self.watches.pod(key)
        if raw is None:
            return None
        meta = raw.get("metadata") or {}
        if meta.get("deletionTimestamp") or (raw.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return None
        spec = raw.get("spec") or {}
        if spec.get("schedulerName") != self.grouper_config.scheduler_name:
            return None
        chain = self.owners.chain(raw)
        if any(skip_requested(o.get("metadata") or {}) for o in chain):
            return None
        named = (spec.get("schedulingGroup") or {}).get("podGroupName")
        if named and not (self.upstream_gangs and chain[-1].get("kind") in c.RAY_KINDS):
            return None  # an upstream gang: the Kubernetes PodGroup the pod names is its gang (upstream_gangs.py)
        try:
            pod = Pod.model_validate(raw)
        except ValidationError as exc:
            log.info("pod %s cannot be read: %s", key, exc.errors()[0].get("msg"))
            return None
        top = chain[-1]
        top_kind = top.get("kind") or ("Pod" if top is raw else "")
        submitter = False
        if top_kind in c.RAY_KINDS:
            submitter = is_submitter(owner_kinds(chain))
            desired = self.gangs.for_pod(top_kind, top, chain, pod)
            if desired is None:
                return None
            if self.kai_coexistence:
                mark_owner(self.kube, self.metrics, top_kind, top)
        else:
            desired = single_pod_group(pod, self.grouper_config)
        pg = self.podgroups.apply(desired)
        later = self.stamps.stamp_or_defer(key, raw, pod, pg, submitter)
        if later is None:
            self.orphans.adopted(key, raw, pg.metadata.name)
        return later

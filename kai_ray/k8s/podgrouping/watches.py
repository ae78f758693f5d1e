"""The podgrouper's informers, one set per watched namespace: pods of our scheduler, PodGroups, the Ray kinds, and
the Jobs KubeRay creates (a RayJob's submitter).

Why one bundle: every part of the podgrouper reads the same caches (an owner, a live RayCluster, the pods of a Ray
object), and a key is looked up in each namespace's informer in turn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from kai_ray import constants as c
from kai_ray.k8s.base.informer import Handler, Informer
from kai_ray.k8s.base.rest import RAY_PLURALS, Kube, podgroups_path, pods_path, ray_path
from kai_ray.k8s.base.slim import slim_pod

KUBERAY_JOBS = "app.kubernetes.io/created-by=kuberay-operator"  # the label KubeRay puts on its submitter Jobs


def cached(infs: list[Informer], key: str) -> dict[str, Any] | None:
    for inf in infs:
        obj = inf.get(key)
        if obj is not None:
            return obj
    return None


def slim_job(obj: dict[str, Any]) -> dict[str, Any]:
    """What the owner chain reads of a Job: its identity and owners (not its pod template or status)."""
    meta = obj.get("metadata") or {}
    keep = ("name", "namespace", "uid", "labels", "ownerReferences", "deletionTimestamp", "resourceVersion")
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {k: meta[k] for k in keep if k in meta}}


@dataclass
class Watches:
    pods: list[Informer] = field(default_factory=list)
    podgroups: list[Informer] = field(default_factory=list)
    ray: dict[str, list[Informer]] = field(default_factory=lambda: {k: [] for k in c.RAY_KINDS})
    jobs: list[Informer] = field(default_factory=list)

    @classmethod
    def build(
        cls,
        kube: Kube,
        scheduler_name: str,
        namespaces: Sequence[str] | None,
        on_pod: Handler,
        on_podgroup: Handler,
        on_ray: Callable[[str], Handler],
    ) -> Watches:
        """The informers of each namespace (all namespaces when none is given); ``on_ray(kind)`` is the handler of
        that Ray kind's informers."""
        w = cls()
        for ns in namespaces or (None,):
            label = ns or "all"
            w.pods.append(
                Informer(
                    kube,
                    pods_path(ns),
                    name=f"pods-{label}",
                    handler=on_pod,
                    field_selector=f"spec.schedulerName={scheduler_name}",
                    transform=slim_pod,
                )
            )
            w.podgroups.append(
                Informer(kube, podgroups_path(ns), name=f"podgroups-{label}", handler=on_podgroup, missing_ok=True)
            )
            w.jobs.append(
                Informer(
                    kube,
                    f"/apis/batch/v1/namespaces/{ns}/jobs" if ns else "/apis/batch/v1/jobs",
                    name=f"kuberay-jobs-{label}",
                    label_selector=KUBERAY_JOBS,
                    transform=slim_job,
                )
            )
            for kind in c.RAY_KINDS:
                w.ray[kind].append(
                    Informer(
                        kube,
                        ray_path(kind, ns),
                        name=f"{RAY_PLURALS[kind]}-{label}",
                        handler=on_ray(kind),
                        missing_ok=True,
                    )
                )
        return w

    @property
    def all(self) -> list[Informer]:
        return [*self.pods, *self.podgroups, *self.jobs, *(i for infs in self.ray.values() for i in infs)]

    def pod(self, key: str) -> dict[str, Any] | None:
        return cached(self.pods, key)

    def ray_object(self, kind: str, key: str) -> dict[str, Any] | None:
        return cached(self.ray.get(kind, []), key)

    def job(self, key: str) -> dict[str, Any] | None:
        return cached(self.jobs, key)

    def podgroup(self, key: str) -> dict[str, Any] | None:
        return cached(self.podgroups, key)

    def all_pods(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(key, pod)`` of every cached pod."""
        for inf in self.pods:
            for key in inf.list_keys():
                yield key, inf.get(key) or {}

    def ray_keys(self) -> Iterator[tuple[str, str]]:
        """``(kind, key)`` of every cached Ray object."""
        for kind, infs in self.ray.items():
            for inf in infs:
                for key in inf.list_keys():
                    yield kind, key

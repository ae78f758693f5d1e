"""Upstream gangs: Kubernetes ``scheduling.k8s.io/v1beta1`` PodGroups scheduled as kai-ray jobs.

Why: Kubernetes 1.37 made workload-aware scheduling beta (gate ``GenericWorkload``, off by default). A controller (the
Job controller with ``WorkloadWithJob``, JobSet, LWS, or a user) writes a ``Workload`` and a ``PodGroup``, and each pod
names its PodGroup in ``spec.schedulingGroup.podGroupName``. A pod with kai-ray's ``schedulerName`` that names one is
scheduled as a member of that gang, with kai-ray's queues, fair share and preemption, and without kai-ray's
podgrouper: the PodGroup becomes the same core :class:`~kai_ray.scheduler.snapshot.Job` a KAI PodGroup becomes.

The mapping (each field read from the upstream types of k8s.io/api v0.37):

- ``schedulingPolicy.gang.minCount`` is the gang minimum; ``schedulingPolicy.basic`` is a minimum of one (the pods
  are placed as they fit, none waits for another).
- ``priority`` (the Priority admission plugin fills it from ``priorityClassName``) is the gang's priority; without
  it the class's value, and without a class the pods' own priority (:attr:`UpstreamTemplate.priority_from_pods`).
- ``disruptionMode``: ``all`` evicts the gang whole, ``single`` (the API's default when unset) one pod at a time.
  A Single gang is never evicted as stale: upstream enforces ``minCount`` only when scheduling.
- The queue is the ``kai.scheduler/queue`` label of the PodGroup, else of its Workload (``spec.workloadRef``), else
  of its pods (:attr:`UpstreamTemplate.queue_from_pods`), else KAI's ``default-queue``.

kai-ray writes nothing on these PodGroups (their status conditions belong to kube-scheduler's gang plugin); it reports
on the pods (Events, the PodScheduled condition) as for every pod it schedules.

Discovery first: a server that does not serve ``podgroups`` in ``scheduling.k8s.io/v1beta1`` (the gate is off, or the
server predates 1.37) gets no informers, so nothing changes there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kai_ray import constants as c
from kai_ray.bridge import parse_time
from kai_ray.k8s.base.informer import Informer
from kai_ray.k8s.base.rest import ApiError, Kube, serves
from kai_ray.scheduler import snapshot as s

log = logging.getLogger(__name__)

GROUP = "scheduling.k8s.io"
VERSION = f"{GROUP}/v1beta1"
KIND = "PodGroup"


def podgroups_path(namespace: str | None = None, name: str | None = None) -> str:
    return _path("podgroups", namespace, name)


def workloads_path(namespace: str | None = None, name: str | None = None) -> str:
    return _path("workloads", namespace, name)


def _path(plural: str, namespace: str | None, name: str | None) -> str:
    base = f"/apis/{VERSION}/namespaces/{namespace}/{plural}" if namespace else f"/apis/{VERSION}/{plural}"
    return f"{base}/{name}" if name else base


def settle(job: s.Job, tmpl: UpstreamTemplate, pods: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> None:
    """What the gang's pods (metadata, spec; by name) settle when the PodGroup and its Workload say nothing: the queue
    label and the priority. The pods of one gang normally share both; the first pod by name decides the queue, the
    highest priority wins."""
    if tmpl.queue_from_pods:
        queue = next((q for meta, _ in pods if (q := (meta.get("labels") or {}).get(c.QUEUE_LABEL))), None)
        job.queue = queue or c.DEFAULT_QUEUE
    if tmpl.priority_from_pods:
        values = [v for _, spec in pods if isinstance(v := spec.get("priority"), int)]
        if values:
            job.priority = max(values)


def pod_group_name(spec: Mapping[str, Any]) -> str | None:
    """The upstream PodGroup a pod names (``spec.schedulingGroup.podGroupName``), in the pod's namespace."""
    group = spec.get("schedulingGroup")
    name = group.get("podGroupName") if isinstance(group, dict) else None
    return name if isinstance(name, str) and name else None


def workload_name(pg: Mapping[str, Any]) -> str | None:
    ref = (pg.get("spec") or {}).get("workloadRef")
    name = ref.get("workloadName") if isinstance(ref, dict) else None
    return name if isinstance(name, str) and name else None


@dataclass(slots=True)
class UpstreamTemplate:
    """The Job an upstream PodGroup becomes, and what only its pods can settle."""

    job: s.Job
    queue_from_pods: bool  # no queue label on the PodGroup or its Workload: the first pod's label decides
    priority_from_pods: bool  # no priority nor class on the PodGroup: the pods' highest priority decides


def template(
    pg: Mapping[str, Any],
    workload_labels: Mapping[str, str] | None,
    priority_classes: Mapping[str, int],
    global_default: int | None,
    max_gang_pods: int,
) -> tuple[UpstreamTemplate | None, list[str]]:
    """The core Job of an upstream PodGroup (no pods yet), or the field errors that keep it from being scheduled."""
    meta = pg.get("metadata") or {}
    spec = pg.get("spec") or {}
    name = meta.get("name", "")
    errors: list[str] = []
    policy = spec.get("schedulingPolicy") or {}
    gang = policy.get("gang")
    min_member = 1
    if isinstance(gang, dict):
        count = gang.get("minCount")
        if not isinstance(count, int) or count < 1:
            errors.append(f"spec.schedulingPolicy.gang.minCount: {count!r} must be a positive integer")
        elif count > max_gang_pods:
            errors.append(
                f"spec.schedulingPolicy.gang.minCount: {count} pods; at most {max_gang_pods} pods per gang "
                "(max-gang-pods)"
            )
        else:
            min_member = count
    elif policy.get("basic") is None:
        errors.append("spec.schedulingPolicy: neither basic nor gang is set")
    mode = spec.get("disruptionMode") or {}
    disruption = s.Disruption.ALL if isinstance(mode, dict) and mode.get("all") is not None else s.Disruption.SINGLE
    if errors:
        return None, errors
    labels = meta.get("labels") or {}
    queue = labels.get(c.QUEUE_LABEL) or (workload_labels or {}).get(c.QUEUE_LABEL) or ""
    pclass = spec.get("priorityClassName") or ""
    priority = spec.get("priority")
    if not isinstance(priority, int):
        priority = priority_classes.get(pclass) if pclass else None
        if priority is None and pclass:
            priority = global_default if global_default is not None else c.DEFAULT_PRIORITY_VALUE
    owner = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
    job = s.Job(
        namespace=meta.get("namespace", ""),
        name=name,
        uid=meta.get("uid", ""),
        queue=queue or c.DEFAULT_QUEUE,
        priority=priority if priority is not None else c.DEFAULT_PRIORITY_VALUE,
        priority_class=pclass,
        min_member=min_member,
        created_at=parse_time(meta.get("creationTimestamp")) or 0.0,
        kind=str(owner.get("kind", "")) if owner else "",
        disruption=disruption,
        staleness_grace=-1.0 if disruption is s.Disruption.SINGLE else None,
    )
    return UpstreamTemplate(job, queue_from_pods=not queue, priority_from_pods=priority is None), []


def informers(
    kube: Kube,
    namespaces: tuple[str, ...],
    on_podgroup: Callable[[str, str, dict[str, Any]], None],
    on_workload: Callable[[str, str, dict[str, Any]], None],
    label_selector: str | None = None,
) -> list[Informer]:
    """Informers on upstream PodGroups and Workloads when the server serves them, else none (and one log line)."""
    try:
        on = serves(kube, VERSION, "podgroups")
    except ApiError as exc:
        if not exc.unreachable:
            raise
        log.info("upstream gangs: the API server is not reachable yet; watching %s PodGroups once served", VERSION)
        on = True  # the informers wait for the server, and retry quietly while the API is not served
    if not on:
        log.info("upstream gangs: the API server does not serve %s PodGroups (gate GenericWorkload off)", VERSION)
        return []
    log.info("upstream gangs: scheduling pods that name a %s PodGroup", VERSION)
    out = []
    for ns in namespaces or (None,):
        out.append(
            Informer(
                kube,
                podgroups_path(ns),
                name=f"upstream-podgroups-{ns or 'all'}",
                handler=on_podgroup,
                missing_ok=True,
                label_selector=label_selector,
            )
        )
        out.append(
            Informer(kube, workloads_path(ns), name=f"workloads-{ns or 'all'}", handler=on_workload, missing_ok=True)
        )
    return out

"""A cluster as ``kai-ray queues`` and ``kai-ray pending`` show it: one list of each kind, no watch.

The objects are listed once and fed to the scheduler's own cache
(:class:`~kai_ray.k8s.scheduling.cache.SchedulerCache`), so the
snapshot is built exactly as the scheduler builds it. The last cycle's word is read from what the scheduler wrote:
``status.fairShare`` / ``allocated`` / ``requested`` on Queues and the ``Scheduled`` condition on PodGroups (or KAI's
``schedulingConditions`` when KAI's scheduler schedules). The order is computed here from the snapshot, with the same
code the scheduler's allocate action uses. Upstream Kubernetes PodGroups (``scheduling.k8s.io/v1beta1``, where the
server serves them) are listed too and pend in the same order; kai-ray writes no status on them, so they carry no
last verdict here (``kai-ray explain`` shows the Events on their pods).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kai_ray import constants as c
from kai_ray.api.quantity import QuantityError, parse_quantity
from kai_ray.k8s.base.informer import UPSERT, object_key, slim
from kai_ray.k8s.base.rest import ApiError, Kube, podgroups_path, pods_path, queues_path, serves
from kai_ray.k8s.base.slim import slim_pod
from kai_ray.k8s.config import OperatorConfig
from kai_ray.k8s.scheduling import upstream_gangs
from kai_ray.k8s.scheduling.cache import SchedulerCache
from kai_ray.scheduler.decisions import QueueStatus
from kai_ray.scheduler.queue_views import LastCycle, Verdict
from kai_ray.scheduler.snapshot import SchedulerConfig, Snapshot

PAGE = 500


@dataclass
class ClusterView:
    snapshot: Snapshot
    last: LastCycle
    display_names: dict[str, str]
    owners: dict[str, str]  # job key -> "Kind/name" of the PodGroup's owner


def list_all(kube: Kube, path: str, selector: str | None = None) -> list[dict[str, Any]]:
    """Every object of a collection (with labels matching ``selector``), page by page."""
    items: list[dict[str, Any]] = []
    cont = ""
    while True:
        page = kube.request(
            "GET", path, query={"limit": PAGE, "continue": cont or None, "labelSelector": selector}, timeout=120.0
        )
        items.extend(page.get("items") or [])
        cont = ((page.get("metadata") or {}).get("continue")) or ""
        if not cont:
            return items


_CORE_KEYS = {c.GPU_RESOURCE: "gpu", "cpu": "cpu", "memory": "memory"}  # status resource name -> core key


def _core_units(resources: dict[str, Any] | None) -> dict[str, float] | None:
    """A status resource list (``nvidia.com/gpu: "2"``, ``cpu: 4000m``) in core units (GPUs, millicores, bytes)."""
    if not isinstance(resources, dict):
        return None
    out = {"gpu": 0.0, "cpu": 0.0, "memory": 0.0}
    for name, value in resources.items():
        key = _CORE_KEYS.get(str(name))
        if key is None:
            continue
        try:
            number = parse_quantity(value)
        except QuantityError:
            continue
        out[key] = number * 1000.0 if key == "cpu" and number != -1 else number
    return out


def queue_status(name: str, status: dict[str, Any] | None) -> QueueStatus | None:
    status = status or {}
    fair = _core_units(status.get("fairShare"))
    alloc = _core_units(status.get("allocated"))
    if fair is None and alloc is None:
        return None  # the scheduler has not reported on this queue
    zero = {"gpu": 0.0, "cpu": 0.0, "memory": 0.0}
    return QueueStatus(
        name=name,
        fair_share=fair or dict(zero),
        allocated=alloc or dict(zero),
        allocated_non_preemptible=_core_units(status.get("allocatedNonPreemptible")) or dict(zero),
        requested=_core_units(status.get("requested")) or dict(zero),
        usage=_usage(status.get("usage")),
    )


def _usage(usage: Any) -> dict[str, float]:
    """``status.usage`` (shares of the cluster's capacity per resource name, no units) by core resource key."""
    if not isinstance(usage, dict):
        return {}
    out: dict[str, float] = {}
    for name, value in usage.items():
        key = _CORE_KEYS.get(str(name))
        if key is not None and isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = float(value)
    return out


def verdict(status: dict[str, Any] | None) -> Verdict | None:
    """The last cycle's verdict written on a PodGroup: our ``Scheduled`` condition, else KAI's scheduling
    conditions (KAI's scheduler in coexistence mode), else none yet."""
    status = status or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Scheduled":
            return Verdict(cond.get("status") == "True", str(cond.get("reason") or ""), str(cond.get("message") or ""))
    for sc in status.get("schedulingConditions") or []:
        reasons = sc.get("reasons") or [{}]
        first = reasons[0] if isinstance(reasons[0], dict) else {}
        reason = str(first.get("reason") or sc.get("reason") or "Unschedulable")
        return Verdict(False, reason, str(first.get("message") or sc.get("message") or ""))
    if status.get("phase") == "Running":
        return Verdict(True, "Scheduled", "running")
    return None


def cluster_view(
    kube: Kube,
    scheduler_name: str = c.SCHEDULER_NAME,
    config: SchedulerConfig | None = None,
    node_pool: str = "",
    node_pool_label_key: str = c.NODE_POOL_LABEL,
) -> ClusterView:
    """List nodes, PriorityClasses, Queues, pods and PodGroups once (of one node pool: what its scheduler sees);
    raises ApiError if any list fails."""
    op = OperatorConfig(
        scheduler_name=scheduler_name, leader_elect=False, node_pool=node_pool, node_pool_label_key=node_pool_label_key
    ).validate()
    pool = op.pool_selector()
    cache = SchedulerCache(op)
    for obj in list_all(kube, "/api/v1/nodes", pool):
        cache.on_node(UPSERT, object_key(obj), obj)
    for obj in list_all(kube, "/apis/scheduling.k8s.io/v1/priorityclasses"):
        cache.on_priority_class(UPSERT, object_key(obj), obj)
    queues = list_all(kube, queues_path(), pool)
    for obj in queues:
        cache.on_queue(UPSERT, object_key(obj), slim(obj))
    for obj in list_all(kube, pods_path()):
        obj = slim_pod(obj)
        cache.on_pod(UPSERT, object_key(obj), obj)
    podgroups = list_all(kube, podgroups_path(), pool)
    for obj in podgroups:
        cache.on_podgroup(UPSERT, object_key(obj), slim(obj))
    upstream_groups = _upstream_groups(kube, cache, pool)
    view = cache.build(config or SchedulerConfig())
    last_queues: dict[str, QueueStatus] = {}
    names: dict[str, str] = {}
    for obj in queues:
        name = str((obj.get("metadata") or {}).get("name", ""))
        qs = queue_status(name, obj.get("status"))
        if qs is not None:
            last_queues[name] = qs
        display = (obj.get("spec") or {}).get("displayName")
        if display:
            names[name] = str(display)
    verdicts: dict[str, Verdict] = {}
    owners: dict[str, str] = {}
    for obj in podgroups:
        key = object_key(obj)
        v = verdict(obj.get("status"))
        if v is not None:
            verdicts[key] = v
        refs = (obj.get("metadata") or {}).get("ownerReferences") or []
        if refs:
            owners[key] = f"{refs[0].get('kind', '')}/{refs[0].get('name', '')}"
    for obj in upstream_groups:
        refs = [r for r in (obj.get("metadata") or {}).get("ownerReferences") or [] if r.get("controller")]
        if refs:
            owners[object_key(obj)] = f"{refs[0].get('kind', '')}/{refs[0].get('name', '')}"
    return ClusterView(view.snapshot, LastCycle(last_queues, verdicts), names, owners)


def _upstream_groups(kube: Kube, cache: SchedulerCache, pool: str | None) -> list[dict[str, Any]]:
    """Feed the upstream PodGroups and their Workloads to ``cache`` where the server serves them; the PodGroups."""
    try:
        if not serves(kube, upstream_gangs.VERSION, "podgroups"):
            return []
        workloads = list_all(kube, upstream_gangs.workloads_path())
        groups = list_all(kube, upstream_gangs.podgroups_path(), pool)
    except ApiError as exc:
        if exc.status == 403:  # a user who may not read them sees the rest
            return []
        raise
    for obj in workloads:
        cache.on_workload(UPSERT, object_key(obj), slim(obj))
    for obj in groups:
        cache.on_upstream_podgroup(UPSERT, object_key(obj), slim(obj))
    return groups

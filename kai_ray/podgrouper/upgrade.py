"""A RayService's zero-downtime upgrade as its own gang: the pending cluster is the service's upgrade surge.

KubeRay upgrades a RayService (``upgradeStrategy: NewCluster``) by running a second, pending RayCluster beside the
active one (``status.pendingServiceStatus.rayClusterName``) and switching traffic once it is ready. Grouped with the
service's PodGroup, the pending cluster's pods would be surplus of a non-preemptible gang at its quota and never
start (KubeRay #1476, #4239). Here they get a PodGroup of their own, ``pg-<pending cluster>-<service uid>``, marked
``kai-ray.io/upgrade-surge-of: <the active cluster's PodGroup>``; the scheduler core lets that gang exceed the queue's
quota up to its limit while the active cluster runs (``scheduler/allocation.upgrade_surge_of``). After the switch the
new cluster's pods stay in that PodGroup, its mark cleared; the next upgrade's surge points at it.
"""

from __future__ import annotations

from collections.abc import Callable

from kai_ray import constants as c
from kai_ray.api.podgroup import PodGroup
from kai_ray.api.ray import RayCluster, RayService
from kai_ray.podgrouper.grouper import group, podgroup_name
from kai_ray.podgrouper.grouper_config import PodgrouperConfig


def cluster_podgroup_name(service: RayService, cluster_name: str) -> str:
    return own_podgroup_name(cluster_name, service.metadata.uid)


def own_podgroup_name(cluster_name: str, service_uid: str | None) -> str:
    """The PodGroup of one of a RayService's clusters once it has been a surge (named by the cluster, so the next
    upgrade's surge can point at it)."""
    return f"pg-{cluster_name}-{service_uid}" if service_uid else f"pg-{cluster_name}"


def service_cluster_group(
    service: RayService,
    cluster: RayCluster,
    main: PodGroup,
    exists: Callable[[str], bool],
    config: PodgrouperConfig | None = None,
) -> PodGroup:
    """The PodGroup for the pods of ``cluster``, one of ``service``'s RayClusters. ``main`` is the service's own
    PodGroup; ``exists(name)`` says whether a PodGroup of that name exists in the service's namespace."""
    status = service.status
    pending = status.pending_service_status.ray_cluster_name if status and status.pending_service_status else None
    active = status.active_service_status.ray_cluster_name if status and status.active_service_status else None
    name = cluster.metadata.name or ""
    own = cluster_podgroup_name(service, name)
    if pending and active and pending != active and name == pending:
        active_pg = cluster_podgroup_name(service, active)
        pg = group(service, cluster=cluster, config=config)
        pg.metadata.name = own
        pg.metadata.annotations[c.UPGRADE_SURGE_OF] = active_pg if exists(active_pg) else podgroup_name(service)
        return pg
    if exists(own):  # a former surge, now the service's active cluster
        pg = group(service, cluster=cluster, config=config)
        pg.metadata.name = own
        pg.metadata.annotations[c.UPGRADE_SURGE_OF] = ""
        return pg
    return main

"""Ray CR -> gang PodGroup. Pure functions; no API calls."""

from kai_ray.podgrouper.config import PodgrouperConfig
from kai_ray.podgrouper.grouper import GroupingError, effective_cluster_spec, group, podgroup_name
from kai_ray.podgrouper.pods import cluster_name, expand_pods
from kai_ray.podgrouper.stamping import PodStamp, stamp, subgroup_for_pod

__all__ = [
    "GroupingError",
    "PodStamp",
    "PodgrouperConfig",
    "cluster_name",
    "effective_cluster_spec",
    "expand_pods",
    "group",
    "podgroup_name",
    "stamp",
    "subgroup_for_pod",
]

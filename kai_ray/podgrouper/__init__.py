"""Ray CR -> gang PodGroup. Pure functions; no API calls."""

from kai_ray.podgrouper.grouper import (
    GroupingError,
    effective_cluster_spec,
    gang_too_large,
    group,
    placeholder_group,
    podgroup_name,
    ray_resource_warnings,
    suspend_blocker,
)
from kai_ray.podgrouper.grouper_config import PodgrouperConfig
from kai_ray.podgrouper.pods import PodTemplate, cluster_name, expand_pods, pod_templates
from kai_ray.podgrouper.stamping import SUBMITTER_JOB, PodStamp, is_submitter, stamp, subgroup_for_pod

__all__ = [
    "SUBMITTER_JOB",
    "GroupingError",
    "PodStamp",
    "PodTemplate",
    "PodgrouperConfig",
    "cluster_name",
    "effective_cluster_spec",
    "expand_pods",
    "gang_too_large",
    "group",
    "is_submitter",
    "placeholder_group",
    "pod_templates",
    "podgroup_name",
    "ray_resource_warnings",
    "stamp",
    "subgroup_for_pod",
    "suspend_blocker",
]

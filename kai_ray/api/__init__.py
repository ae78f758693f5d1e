"""The wire: pydantic models of KAI and KubeRay objects. Nothing else in kai-ray parses YAML."""

from kai_ray.api.errors import FieldError
from kai_ray.api.loader import ManifestError, load_documents, parse_object
from kai_ray.api.meta import KubeModel, ObjectMeta, OwnerReference, Pod, PodSpec, PodTemplateSpec
from kai_ray.api.podgroup import PodGroup, PodGroupSpec, SubGroup, TopologyConstraint
from kai_ray.api.queue import Queue, QueueResource, QueueResources, QueueSpec, queue_cycles
from kai_ray.api.ray import RayCluster, RayClusterSpec, RayJob, RayObject, RayService, WorkerGroupSpec

__all__ = [
    "FieldError",
    "KubeModel",
    "ManifestError",
    "ObjectMeta",
    "OwnerReference",
    "Pod",
    "PodGroup",
    "PodGroupSpec",
    "PodSpec",
    "PodTemplateSpec",
    "Queue",
    "QueueResource",
    "QueueResources",
    "QueueSpec",
    "RayCluster",
    "RayClusterSpec",
    "RayJob",
    "RayObject",
    "RayService",
    "SubGroup",
    "TopologyConstraint",
    "WorkerGroupSpec",
    "load_documents",
    "parse_object",
    "queue_cycles",
]

"""The pods KubeRay would create for a Ray CR, for the simulator and for tests.

Names are deterministic (``<cluster>-head``, ``<cluster>-<group>-worker-<i>``) where KubeRay adds random suffixes;
labels, resources and the autoscaler sidecar follow KubeRay (see ``kuberay.md`` section 2).
"""

from __future__ import annotations

from kai_ray import constants as c
from kai_ray.api.meta import Container, ObjectMeta, OwnerReference, Pod, PodSpec, PodTemplateSpec, ResourceRequirements
from kai_ray.api.ray import RayCluster, RayJob, RayObject
from kai_ray.podgrouper.config import PodgrouperConfig
from kai_ray.podgrouper.grouper import effective_cluster_spec, resolve_queue

SUBMITTER_RESOURCES = ResourceRequirements(
    requests={"cpu": "500m", "memory": "200Mi"}, limits={"cpu": "1", "memory": "1Gi"}
)


def cluster_name(obj: RayObject, cluster: RayCluster | None = None) -> str:
    if cluster is not None:
        return cluster.metadata.name or ""
    if isinstance(obj, RayCluster):
        return obj.metadata.name or ""
    return f"{obj.metadata.name}-raycluster"


def _pod(
    name: str,
    template: PodTemplateSpec,
    labels: dict[str, str],
    owner: OwnerReference | None,
    namespace: str | None,
    scheduler_name: str,
) -> Pod:
    spec = template.spec.model_copy(deep=True)
    spec.scheduler_name = spec.scheduler_name or scheduler_name
    return Pod(
        metadata=ObjectMeta(
            name=name,
            namespace=namespace,
            labels={**template.metadata.labels, **labels},
            annotations=dict(template.metadata.annotations),
            owner_references=[owner] if owner else None,
        ),
        spec=spec,
    )


def expand_pods(
    obj: RayObject, *, cluster: RayCluster | None = None, config: PodgrouperConfig | None = None
) -> list[Pod]:
    """Head, workers (desired replicas x numOfHosts, suspended groups skipped) and, for K8sJobMode, the submitter."""
    config = config or PodgrouperConfig()
    spec = effective_cluster_spec(obj, cluster)
    name = cluster_name(obj, cluster)
    ns = obj.metadata.namespace
    owner = OwnerReference(api_version="ray.io/v1", kind="RayCluster", name=name, uid=f"{name}-uid", controller=True)
    queue = {config.queue_label_key: resolve_queue(obj.metadata, None, config)}
    base = {c.RAY_CLUSTER: name, "ray.io/is-ray-node": "yes", **queue}
    pods: list[Pod] = []
    if spec.head_group_spec is not None:
        head = _pod(
            f"{name}-head",
            spec.head_group_spec.template,
            {**base, c.RAY_NODE_TYPE: "head", c.RAY_GROUP: c.RAY_HEAD_GROUP},
            owner,
            ns,
            config.scheduler_name,
        )
        if spec.enable_in_tree_autoscaling:
            res = (spec.autoscaler_options.resources if spec.autoscaler_options else None) or {
                "requests": {"cpu": config.autoscaler_sidecar_cpu, "memory": config.autoscaler_sidecar_memory}
            }
            head.spec.containers.append(
                Container(name="autoscaler", resources=ResourceRequirements.model_validate(res))
            )
        pods.append(head)
    for i, wg in enumerate(spec.worker_group_specs):
        group = wg.group_name or f"worker-group-{i}"
        for r in range(wg.desired_replicas()):
            for h in range(wg.hosts):
                suffix = f"{r}" if wg.hosts == 1 else f"{r}-{h}"
                pods.append(
                    _pod(
                        f"{name}-{group.lower().replace('_', '-')}-worker-{suffix}",
                        wg.template,
                        {**base, c.RAY_NODE_TYPE: "worker", c.RAY_GROUP: group},
                        owner,
                        ns,
                        config.scheduler_name,
                    )
                )
    if isinstance(obj, RayJob) and obj.submission_mode == "K8sJobMode":
        template = obj.spec.submitter_pod_template or PodTemplateSpec(
            spec=PodSpec(containers=[Container(name="ray-job-submitter", resources=SUBMITTER_RESOURCES)])
        )
        pods.append(
            _pod(
                f"{obj.metadata.name}-submitter",
                template,
                {**queue, c.RAY_GROUP: c.RAY_SUBMITTER_GROUP},
                None,
                ns,
                config.scheduler_name,
            )
        )
    return pods

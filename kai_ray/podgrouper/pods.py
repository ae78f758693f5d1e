"""The pods KubeRay would create for a Ray CR, for the simulator, the scheduler's suspended gangs and tests.

Names are deterministic (``<cluster>-head``, ``<cluster>-<group>-worker-<i>``) where KubeRay adds random suffixes;
labels, resources and the autoscaler sidecar follow KubeRay (see ``kuberay.md`` section 2).
"""

from __future__ import annotations

from dataclasses import dataclass

from kai_ray import constants as c
from kai_ray.api.meta import Container, ObjectMeta, OwnerReference, Pod, PodSpec, PodTemplateSpec, ResourceRequirements
from kai_ray.api.ray import RayCluster, RayJob, RayObject
from kai_ray.podgrouper.grouper import GroupingError, effective_cluster_spec, gang_too_large
from kai_ray.podgrouper.grouper_config import PodgrouperConfig
from kai_ray.podgrouper.queue_rule import resolve_queue

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


@dataclass(frozen=True)
class PodTemplate:
    """One group's pod as KubeRay would create it, and how many of them: work per group, not per replica.

    ``pod`` is named like the first of its group's pods; ``hosts`` is the group's ``numOfHosts`` (names of a
    multi-host replica's pods end ``<replica>-<host>``)."""

    pod: Pod
    count: int
    group: str
    hosts: int = 1

    def name(self, i: int) -> str:
        """Name of the ``i``-th pod of the group (as :func:`expand_pods` names it)."""
        if self.count == 1 and self.group in (c.RAY_HEAD_GROUP, c.RAY_SUBMITTER_GROUP):
            return self.pod.metadata.name or ""
        base = (self.pod.metadata.name or "").rsplit("-worker-", 1)[0]
        r, h = divmod(i, self.hosts)
        return f"{base}-worker-{r}" if self.hosts == 1 else f"{base}-worker-{r}-{h}"


def pod_templates(
    obj: RayObject, *, cluster: RayCluster | None = None, config: PodgrouperConfig | None = None
) -> list[PodTemplate]:
    """Head, one template per worker group (count: desired replicas x numOfHosts; suspended groups count 0) and, for
    K8sJobMode, the submitter. Costs the same for 1 replica and for 10^9."""
    config = config or PodgrouperConfig()
    spec = effective_cluster_spec(obj, cluster)
    name = cluster_name(obj, cluster)
    ns = obj.metadata.namespace
    owner = OwnerReference(api_version="ray.io/v1", kind="RayCluster", name=name, uid=f"{name}-uid", controller=True)
    queue = {config.queue_label_key: resolve_queue(obj.metadata, None, config)}
    base = {c.RAY_CLUSTER: name, "ray.io/is-ray-node": "yes", **queue}
    out: list[PodTemplate] = []
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
        out.append(PodTemplate(head, 1, c.RAY_HEAD_GROUP))
    for i, wg in enumerate(spec.worker_group_specs):
        group = wg.group_name or f"worker-group-{i}"
        first = "0" if wg.hosts == 1 else "0-0"
        pod = _pod(
            f"{name}-{group.lower().replace('_', '-')}-worker-{first}",
            wg.template,
            {**base, c.RAY_NODE_TYPE: "worker", c.RAY_GROUP: group},
            owner,
            ns,
            config.scheduler_name,
        )
        out.append(PodTemplate(pod, wg.desired_replicas() * wg.hosts, group, wg.hosts))
    if isinstance(obj, RayJob) and obj.submission_mode == "K8sJobMode":
        template = obj.spec.submitter_pod_template or PodTemplateSpec(
            spec=PodSpec(containers=[Container(name="ray-job-submitter", resources=SUBMITTER_RESOURCES)])
        )
        pod = _pod(
            f"{obj.metadata.name}-submitter",
            template,
            {**queue, c.RAY_GROUP: c.RAY_SUBMITTER_GROUP},
            None,
            ns,
            config.scheduler_name,
        )
        out.append(PodTemplate(pod, 1, c.RAY_SUBMITTER_GROUP))
    return out


def expand_pods(
    obj: RayObject, *, cluster: RayCluster | None = None, config: PodgrouperConfig | None = None
) -> list[Pod]:
    """Head, workers (desired replicas x numOfHosts, suspended groups skipped) and, for K8sJobMode, the submitter.

    One object per pod, so it refuses (GroupingError naming the field) a Ray object with more pods than
    ``config.max_gang_pods``; code that only needs each group's pod uses :func:`pod_templates`."""
    config = config or PodgrouperConfig()
    templates = pod_templates(obj, cluster=cluster, config=config)
    total = sum(t.count for t in templates)
    if total > config.max_gang_pods:
        raise GroupingError(gang_too_large(obj, effective_cluster_spec(obj, cluster), total, config.max_gang_pods))
    pods: list[Pod] = []
    for t in templates:
        for i in range(t.count):
            pod = t.pod if i == 0 else t.pod.model_copy(deep=True)
            pod.metadata.name = t.name(i)
            pods.append(pod)
    return pods

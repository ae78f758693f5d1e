"""Ray custom resource -> one gang PodGroup, KAI's way, with the elastic ceilings KAI cannot express.

Pure: no API calls. The caller passes the top owner (RayCluster, RayJob or RayService) and, for RayJob/RayService,
optionally the RayCluster currently in effect; otherwise the embedded cluster spec is used.

Gang size follows KAI's Ray grouper: the head counts 1; each worker group contributes ``minReplicas x numOfHosts``,
or ``replicas x numOfHosts`` when ``minReplicas`` is 0; suspended groups and groups with replicas = minReplicas = 0
contribute nothing. Unlike KAI we clamp replicas into [min, max] as KubeRay does instead of failing, read the real
``suspend`` field, map non-DNS group names, and record max worker counts in annotations.

Bounded: the work is per worker group, never per replica. A gang of more than ``max_gang_pods`` pods (what KubeRay
would create now) is still grouped, so its PodGroup can say why it is refused (annotation :data:`~kai_ray.constants.
INVALID`, naming the field); elastic ceilings are capped at ``max_gang_pods``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from kai_ray import constants as c
from kai_ray.api.meta import ObjectMeta, OwnerReference, Pod, PodTemplateSpec
from kai_ray.api.podgroup import PodGroup, PodGroupSpec, SubGroup, TopologyConstraint
from kai_ray.api.ray import MAX_INT32, RayCluster, RayClusterSpec, RayJob, RayObject
from kai_ray.api.strict import container_resource_problems, fraction_problem
from kai_ray.podgrouper.grouper_config import PodgrouperConfig
from kai_ray.podgrouper.naming import subgroup_name
from kai_ray.podgrouper.queue_rule import resolve_queue
from kai_ray.podgrouper.rayresources import RayResourceError, accelerator_mismatches, ray_resources


class GroupingError(ValueError):
    """The Ray object cannot be grouped; the message names the object and the field."""


@dataclass(frozen=True)
class GroupPlan:
    """One worker group's contribution, before it becomes a subgroup."""

    group_name: str
    subgroup: str
    min_member: int
    max_member: int
    desired: int = 0  # pods KubeRay creates now: desired replicas x numOfHosts


def cluster_spec_path(obj: RayObject) -> str:
    return {"RayCluster": "spec", "RayJob": "spec.rayClusterSpec", "RayService": "spec.rayClusterConfig"}[obj.kind]


def effective_cluster_spec(obj: RayObject, cluster: RayCluster | None = None) -> RayClusterSpec:
    """The RayCluster spec that decides the gang: the live cluster if given, else the one embedded in the owner."""
    if cluster is not None:
        return cluster.spec
    if isinstance(obj, RayCluster):
        return obj.spec
    if isinstance(obj, RayJob):
        if obj.spec.ray_cluster_spec is None:
            what = "clusterSelector jobs use an existing RayCluster" if obj.spec.cluster_selector else "missing"
            raise GroupingError(f"RayJob {obj.metadata.name}: spec.rayClusterSpec: {what}")
        return obj.spec.ray_cluster_spec
    if obj.spec.ray_cluster_config is None:
        raise GroupingError(f"RayService {obj.metadata.name}: spec.rayClusterConfig: missing")
    return obj.spec.ray_cluster_config


def plan_groups(obj: RayObject, spec: RayClusterSpec) -> list[GroupPlan]:
    """Per worker group: subgroup name, gang minimum and elastic ceiling (pods, i.e. replicas x numOfHosts)."""
    path = cluster_spec_path(obj)
    if spec.head_group_spec is None:
        raise GroupingError(f"{obj.kind} {obj.metadata.name}: {path}.headGroupSpec: missing head group")
    autoscaling = bool(spec.enable_in_tree_autoscaling)
    plans: list[GroupPlan] = []
    seen: dict[str, str] = {}
    for i, wg in enumerate(spec.worker_group_specs):
        name = wg.group_name or f"worker-group-{i}"
        sg = subgroup_name(name)
        if sg == c.RAY_HEAD_GROUP or sg == c.SUBMITTER_SUBGROUP or sg in seen.values():
            raise GroupingError(
                f"{obj.kind} {obj.metadata.name}: {path}.workerGroupSpecs[{i}].groupName: {name!r} duplicates "
                "another group"
            )
        seen[name] = sg
        if wg.min_replicas is not None and wg.max_replicas is not None and wg.min_replicas > wg.max_replicas:
            raise GroupingError(  # KubeRay refuses such a cluster (creates none of its pods): say so
                f"{obj.kind} {obj.metadata.name}: {path}.workerGroupSpecs[{i}].minReplicas: {wg.min_replicas} is "
                f"greater than maxReplicas {wg.max_replicas}"
            )
        if wg.suspend or (not wg.replicas and not wg.min_replicas and not (autoscaling and wg.max > 0)):
            continue
        hosts = wg.hosts
        desired = wg.desired_replicas()
        minimum = (min(wg.min, wg.max) if wg.min > 0 else desired) * hosts
        ceiling = min(wg.max * hosts, MAX_INT32) if autoscaling else desired * hosts
        plans.append(GroupPlan(name, sg, minimum, max(ceiling, minimum), desired * hosts))
    return plans


def resource_problems(obj: RayObject, spec: RayClusterSpec) -> list[str]:
    """What Kubernetes would refuse in the pod templates' resources (a negative or fractional ``nvidia.com/gpu``, a
    request above its limit, a ``gpu-fraction`` outside (0, 1]), each as "<Kind> <name>: <field>: <problem>". The
    rules are :mod:`kai_ray.api.strict`'s, applied to the parsed templates so that every entry point (CLI,
    simulator, operator) refuses the same objects."""
    path = cluster_spec_path(obj)
    templates: list[tuple[str, PodTemplateSpec]] = []
    if spec.head_group_spec is not None:
        templates.append((f"{path}.headGroupSpec.template", spec.head_group_spec.template))
    templates += [
        (f"{path}.workerGroupSpecs[{i}].template", wg.template) for i, wg in enumerate(spec.worker_group_specs)
    ]
    if isinstance(obj, RayJob) and obj.spec.submitter_pod_template is not None:
        templates.append(("spec.submitterPodTemplate", obj.spec.submitter_pod_template))
    out: list[str] = []
    for where, template in templates:
        fraction = fraction_problem(template.metadata.annotations, f"{where}.metadata.annotations")
        found = [fraction] if fraction else []
        for list_name, containers in (
            ("containers", template.spec.containers),
            ("initContainers", template.spec.init_containers or []),
        ):
            for i, ctr in enumerate(containers):
                if ctr.resources is not None:
                    found += container_resource_problems(
                        ctr.resources.requests, ctr.resources.limits, f"{where}.spec.{list_name}[{i}].resources"
                    )
        out += [f"{obj.kind} {obj.metadata.name}: {err}" for err in found]
    return out


def _ray_groups(obj: RayObject, spec: RayClusterSpec) -> list[tuple[str, str, Any]]:
    """(field path, subgroup, group spec) for the head and each worker group."""
    path = cluster_spec_path(obj)
    out: list[tuple[str, str, Any]] = []
    if spec.head_group_spec is not None:
        out.append((f"{path}.headGroupSpec", c.RAY_HEAD_GROUP, spec.head_group_spec))
    for i, wg in enumerate(spec.worker_group_specs):
        out.append((f"{path}.workerGroupSpecs[{i}]", subgroup_name(wg.group_name or f"worker-group-{i}"), wg))
    return out


def gang_ray_resources(obj: RayObject, spec: RayClusterSpec, subgroups: set[str]) -> dict[str, dict[str, int | float]]:
    """Per subgroup of the gang, the Ray resources each of its pods advertises beyond CPU, GPU and memory
    (:mod:`~kai_ray.podgrouper.rayresources`); groups that advertise none are left out. A ``rayStartParams.resources``
    that ``ray start`` cannot read is a GroupingError naming it: every pod of the group would fail to start."""
    out: dict[str, dict[str, float]] = {}
    for where, sg, g in _ray_groups(obj, spec):
        try:
            found = ray_resources(g.ray_start_params, g.template, g.resources)
        except RayResourceError as exc:
            raise GroupingError(f"{obj.kind} {obj.metadata.name}: {where}.{exc.field}: {exc}") from None
        if found and sg in subgroups:
            out[sg] = {k: int(v) if float(v).is_integer() else v for k, v in found.items()}
    return out


def ray_resource_warnings(obj: RayObject, cluster: RayCluster | None = None) -> list[str]:
    """ "<field>: <problem>" for each group whose pods tell Ray of accelerators Kubernetes does not give them."""
    spec = effective_cluster_spec(obj, cluster)
    out = []
    for where, _, g in _ray_groups(obj, spec):
        try:
            found = ray_resources(g.ray_start_params, g.template, g.resources)
        except RayResourceError:
            continue  # group() refuses it
        for ray_name, problem in accelerator_mismatches(found, g.template):
            field = "resources" if ray_name in (g.resources or {}) else "rayStartParams.resources"
            out.append(f"{where}.{field}: {problem}")
    return out


def gang_too_large(obj: RayObject, spec: RayClusterSpec, pods: int, limit: int) -> str:
    """Why a gang of ``pods`` pods is refused, naming the worker group field that makes it so large."""
    where = f"{obj.kind} {obj.metadata.name}: {cluster_spec_path(obj)}"
    sizes = [(wg.desired_replicas() * wg.hosts, i, wg) for i, wg in enumerate(spec.worker_group_specs)]
    if not sizes:
        return f"{where}: {pods} pods in one gang; at most {limit} pods per gang (max-gang-pods)"
    n, i, wg = max(sizes, key=lambda t: t[0])
    replicas = wg.desired_replicas()
    field = "minReplicas" if wg.min > (wg.replicas or 0) and wg.min <= wg.max else "replicas"
    hosts = f" x numOfHosts {wg.hosts}" if wg.hosts > 1 else ""
    return (
        f"{where}.workerGroupSpecs[{i}].{field}: {replicas}{hosts} = {n} pods make a gang of {pods} pods; "
        f"at most {limit} pods per gang (max-gang-pods)"
    )


def _first_label(key: str, *metas: ObjectMeta | None) -> str | None:
    for meta in metas:
        if meta is not None and meta.labels.get(key):
            return meta.labels[key]
    return None


def resolve_priority(obj: RayObject, spec: RayClusterSpec, pod: Pod | None, config: PodgrouperConfig) -> str:
    """ray.io/priority-class-name on the top owner, then the priorityClassName label (owner, then pod), then the
    pod's spec.priorityClassName (or the head template's), then the per-kind default."""
    pod_meta = pod.metadata if pod else None
    found = _first_label(c.RAY_PRIORITY_LABEL, obj.metadata) or _first_label(c.PRIORITY_LABEL, obj.metadata, pod_meta)
    if found:
        return found
    if pod is not None and pod.spec.priority_class_name:
        return pod.spec.priority_class_name
    if spec.head_group_spec is not None and spec.head_group_spec.template.spec.priority_class_name:
        return spec.head_group_spec.template.spec.priority_class_name
    return config.default_priority.get(obj.kind, "train")


def suspend_blocker(kind: str, name: str | None, spec: Mapping[str, Any]) -> str | None:
    """Why kai-ray cannot preempt this Ray object gracefully (suspend it), naming the field; None when it can.

    A RayJob that kai-ray preempts is suspended, never has its pods evicted: KubeRay (>= 1.5) does not recreate a
    RayJob's head, so an evicted RayJob fails for good. KubeRay suspends a RayJob only with
    ``shutdownAfterJobFinishes: true`` (kai-ray sets it for the time of the suspension), which a
    ``deletionStrategy`` rules out; and a ``clusterSelector`` job shares a cluster it does not own."""
    if kind != "RayJob":
        return None
    if spec.get("clusterSelector"):
        return f"RayJob {name}: spec.clusterSelector: the job runs on a shared cluster, which kai-ray does not suspend"
    if spec.get("deletionStrategy") and not spec.get("shutdownAfterJobFinishes"):
        return (
            f"RayJob {name}: spec.deletionStrategy: KubeRay suspends a RayJob only with shutdownAfterJobFinishes "
            "true, which a deletionStrategy rules out; evicting its pods instead would fail it for good"
        )
    return None


def resolve_preemptibility(
    obj: RayObject, pod: Pod | None, priority_class: str, config: PodgrouperConfig
) -> str | None:
    if isinstance(obj, RayJob) and suspend_blocker(obj.kind, obj.metadata.name, obj.spec.to_dict()):
        return "non-preemptible"  # it cannot be preempted without failing it (the podgrouper says so in an Event)
    label = _first_label(c.PREEMPTIBILITY_LABEL, obj.metadata, pod.metadata if pod else None)
    if label is not None:
        if label not in c.PREEMPTIBILITY_VALUES:
            allowed = ", ".join(repr(v) for v in c.PREEMPTIBILITY_VALUES)
            raise GroupingError(
                f"{obj.kind} {obj.metadata.name}: metadata.labels[{c.PREEMPTIBILITY_LABEL}]: {label!r} is not one "
                f"of {allowed}"
            )
        return label
    value = config.priority_classes.get(priority_class)
    if value is None:
        return None  # unknown class: the scheduler derives it from the class value it sees
    return "preemptible" if value < c.PREEMPTIBLE_BELOW else "non-preemptible"


def _preemptibility_set(obj: RayObject, pod: Pod | None) -> bool:
    """Whether the preemptibility is the object's own (its or its pod's label) or forced (a RayJob kai-ray cannot
    suspend), not derived from the priority class."""
    if _first_label(c.PREEMPTIBILITY_LABEL, obj.metadata, pod.metadata if pod else None) is not None:
        return True
    return isinstance(obj, RayJob) and suspend_blocker(obj.kind, obj.metadata.name, obj.spec.to_dict()) is not None


def topology_from(annotations: dict[str, str], where: str) -> TopologyConstraint | None:
    topology = annotations.get(c.TOPOLOGY)
    required = annotations.get(c.TOPOLOGY_REQUIRED)
    preferred = annotations.get(c.TOPOLOGY_PREFERRED)
    if not (topology or required or preferred):
        return None
    if not topology:
        raise GroupingError(f"{where}.annotations[{c.TOPOLOGY}]: required when a topology placement level is set")
    return TopologyConstraint(topology=topology, required_topology_level=required, preferred_topology_level=preferred)


def podgroup_name(obj: RayObject) -> str:
    uid = obj.metadata.uid
    return f"pg-{obj.metadata.name}-{uid}" if uid else f"pg-{obj.metadata.name}"


def _owner_ref(obj: RayObject) -> list[OwnerReference] | None:
    if not obj.metadata.uid:
        return None
    return [
        OwnerReference(
            api_version=obj.api_version,
            kind=obj.kind,
            name=obj.metadata.name or "",
            uid=obj.metadata.uid,
            controller=False,
            block_owner_deletion=False,
        )
    ]


def group(
    obj: RayObject,
    *,
    cluster: RayCluster | None = None,
    pod: Pod | None = None,
    config: PodgrouperConfig | None = None,
) -> PodGroup:
    """Build the PodGroup for a Ray top owner. Raises GroupingError naming the field on bad input."""
    config = config or PodgrouperConfig()
    if not obj.metadata.name:
        raise GroupingError(f"{obj.kind}: metadata.name: required")
    spec = effective_cluster_spec(obj, cluster)
    plans = plan_groups(obj, spec)
    path = cluster_spec_path(obj)
    for problem in resource_problems(obj, spec):
        raise GroupingError(problem)

    head = spec.head_group_spec
    assert head is not None  # plan_groups raised otherwise
    head_topology = topology_from(head.template.metadata.annotations, f"{path}.headGroupSpec.template")
    subgroups = [SubGroup(name=c.RAY_HEAD_GROUP, min_member=1, topology_constraint=head_topology)]
    by_name = {wg.group_name or f"worker-group-{i}": wg for i, wg in enumerate(spec.worker_group_specs)}
    for i, plan in enumerate(plans):
        wg = by_name[plan.group_name]
        where = f"{path}.workerGroupSpecs[{i}].template"
        subgroups.append(
            SubGroup(
                name=plan.subgroup,
                min_member=min(plan.min_member, MAX_INT32),
                topology_constraint=topology_from(wg.template.metadata.annotations, where),
            )
        )
    submitter = isinstance(obj, RayJob) and obj.submission_mode == "K8sJobMode"
    if submitter:
        subgroups.append(SubGroup(name=c.SUBMITTER_SUBGROUP, min_member=0))

    limit = config.max_gang_pods
    min_member = min(1 + sum(p.min_member for p in plans), MAX_INT32)
    max_member = min(1 + sum(p.max_member for p in plans), limit)
    subgroup_max = {c.RAY_HEAD_GROUP: 1, **{p.subgroup: min(p.max_member, limit) for p in plans}}
    desired_pods = 1 + sum(p.desired for p in plans) + (1 if submitter else 0)
    if submitter:
        subgroup_max[c.SUBMITTER_SUBGROUP] = 1

    priority = resolve_priority(obj, spec, pod, config)
    preemptibility = resolve_preemptibility(obj, pod, priority, config)
    labels = dict(obj.metadata.labels)
    if preemptibility and _preemptibility_set(obj, pod):
        # explicit on the PodGroup too: the scheduler lets a queue's default replace only a derived value
        labels[c.PREEMPTIBILITY_LABEL] = preemptibility
    annotations = dict(obj.metadata.annotations)
    annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    for key in (
        c.INVALID,
        c.MAX_MEMBER,
        c.SUBGROUP_MAX,
        c.SUBGROUP_NAMES,
        c.MAX_PENDING_ACTED,
        c.RAY_RESOURCES,
        c.SUBGROUP_CORE,
    ):
        annotations.pop(key, None)  # ours to write, whatever the Ray object says
    annotations[c.TOP_OWNER_METADATA] = yaml.safe_dump(
        {
            "name": obj.metadata.name,
            "uid": obj.metadata.uid or "",
            "group": obj.api_version.split("/")[0],
            "version": obj.api_version.split("/")[-1],
            "kind": obj.kind,
        },
        sort_keys=True,
    )
    annotations[c.MAX_MEMBER] = str(max_member)
    annotations[c.SUBGROUP_MAX] = json.dumps(subgroup_max, sort_keys=True)
    if submitter:  # the submitter is core when semi-preemptible (its minMember is 0: it starts after the cluster)
        annotations[c.SUBGROUP_CORE] = json.dumps({c.SUBMITTER_SUBGROUP: 1}, sort_keys=True)
    if desired_pods > limit:
        annotations[c.INVALID] = gang_too_large(obj, spec, desired_pods, limit)
    renamed = {p.group_name: p.subgroup for p in plans if p.group_name != p.subgroup}
    shapes = gang_ray_resources(obj, spec, {c.RAY_HEAD_GROUP, *(p.subgroup for p in plans)})
    if shapes:
        annotations[c.RAY_RESOURCES] = json.dumps(shapes, sort_keys=True)
    if renamed:
        annotations[c.SUBGROUP_NAMES] = json.dumps(renamed, sort_keys=True)

    owner_where = f"{obj.kind} {obj.metadata.name}: metadata"
    action = obj.metadata.annotations.get(c.MAX_PENDING_ACTION)
    if action is not None and action not in c.MAX_PENDING_ACTIONS:
        allowed = ", ".join(repr(a) for a in c.MAX_PENDING_ACTIONS)
        raise GroupingError(f"{owner_where}.annotations[{c.MAX_PENDING_ACTION}]: {action!r} is not one of {allowed}")
    return PodGroup(
        metadata=ObjectMeta(
            name=podgroup_name(obj),
            namespace=obj.metadata.namespace,
            labels=labels,
            annotations=annotations,
            owner_references=_owner_ref(obj),
        ),
        spec=PodGroupSpec(
            min_member=min_member,
            sub_groups=subgroups,
            queue=resolve_queue(obj.metadata, pod, config),
            priority_class_name=priority,
            preemptibility=preemptibility,
            topology_constraint=topology_from(obj.metadata.annotations, owner_where),
            preemption_delay=obj.metadata.annotations.get(c.PREEMPTION_DELAY),
            staleness_grace_period=obj.metadata.annotations.get(c.STALENESS_GRACE),
        ),
    )


def placeholder_group(obj: ObjectMeta, kind: str, problem: str, config: PodgrouperConfig | None = None) -> PodGroup:
    """The PodGroup of a Ray object that cannot be grouped: a head-only gang marked :data:`~kai_ray.constants.INVALID`
    with ``problem``, so the scheduler explains on the PodGroup (and ``kai-ray explain`` on the pods) why nothing of
    it is scheduled. Built from metadata only: the spec is what could not be read."""
    config = config or PodgrouperConfig()
    api_version = "ray.io/v1"
    meta = ObjectMeta(name=obj.name, namespace=obj.namespace, uid=obj.uid, labels=dict(obj.labels))
    view = RayCluster(metadata=meta)
    priority = _first_label(c.RAY_PRIORITY_LABEL, obj) or _first_label(c.PRIORITY_LABEL, obj)
    owner = (
        [
            OwnerReference(
                api_version=api_version,
                kind=kind,
                name=obj.name or "",
                uid=obj.uid,
                controller=False,
                block_owner_deletion=False,
            )
        ]
        if obj.uid
        else None
    )
    top = {"name": obj.name, "uid": obj.uid or "", "group": "ray.io", "version": "v1", "kind": kind}
    return PodGroup(
        metadata=ObjectMeta(
            name=podgroup_name(view),
            namespace=obj.namespace,
            labels=dict(obj.labels),
            annotations={c.TOP_OWNER_METADATA: yaml.safe_dump(top, sort_keys=True), c.INVALID: problem},
            owner_references=owner,
        ),
        spec=PodGroupSpec(
            min_member=1,
            sub_groups=[SubGroup(name=c.RAY_HEAD_GROUP, min_member=1)],
            queue=resolve_queue(obj, None, config),
            priority_class_name=priority or config.default_priority.get(kind, "train"),
        ),
    )

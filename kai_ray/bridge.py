"""API objects -> scheduler snapshot: the one translation between the wire and the core.

Both adapters (the Kubernetes operators and the simulator) build their snapshot here, so a PodGroup means the same
thing to the core whichever world it came from. Nothing here raises on bad data: unparsable quantities count as
zero and are reported through ``problems``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import yaml

from kai_ray import constants as c
from kai_ray.api.meta import Pod as ApiPod
from kai_ray.api.podgroup import PodGroup, TopologyConstraint, leaf_min_member
from kai_ray.api.quantity import QuantityError, parse_quantity
from kai_ray.api.queue import Queue as ApiQueue
from kai_ray.durations import parse_duration, parse_rfc3339
from kai_ray.scheduler import snapshot as s


def parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return parse_rfc3339(text)
    except ValueError:
        return None


def _q(value: Any, problems: list[str], where: str) -> float:
    try:
        return parse_quantity(value)
    except QuantityError as exc:
        problems.append(f"{where}: {exc}")
        return 0.0


def container_resources(resources: Any, problems: list[str], where: str) -> s.Resources:
    """Requests, falling back to limits per resource (Kubernetes defaults requests to limits)."""
    return _as_resources(_requests(resources, problems, where))


def _requests(resources: Any, problems: list[str], where: str) -> dict[str, float]:
    """Every resource of one requests/limits pair, requests falling back to limits per resource (as the API
    server defaults them); quantities as plain numbers (cpu in cores, memory and storage in bytes)."""
    if resources is None:
        return {}
    if isinstance(resources, dict):
        limits, requests = resources.get("limits"), resources.get("requests")
    else:
        limits, requests = resources.limits, resources.requests
    merged: dict[str, Any] = {**(limits or {}), **(requests or {})}
    return {name: _q(v, problems, f"{where}[{name}]") for name, v in merged.items()}


def _add(total: dict[str, float], more: dict[str, float]) -> dict[str, float]:
    out = dict(total)
    for k, v in more.items():
        out[k] = out.get(k, 0.0) + v
    return out


def _max(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: max(a.get(k, 0.0), b.get(k, 0.0)) for k in a.keys() | b.keys()}


POD_LEVEL = ("cpu", "memory")  # what pod-level resources may set (and hugepages-*)


def _status_floor(pod: ApiPod, problems: list[str]) -> tuple[dict[str, dict[str, float]], bool]:
    """Per container, what its status says it holds (``allocatedResources``, ``resources``), and whether a resize
    of the pod is infeasible.

    Why: kube-scheduler (in-place pod resize) counts a container at the largest of its spec, its allocated and its
    actual resources, so that a resize under way never over-commits the node; an infeasible resize is not counted
    at all (its spec is ignored, what the container holds counts)."""
    status = pod.status
    if status is None:
        return {}, False
    extra = status.model_extra or {}
    out: dict[str, dict[str, float]] = {}
    for cs in (extra.get("containerStatuses") or []) + (extra.get("initContainerStatuses") or []):
        if not isinstance(cs, dict) or not cs.get("name"):
            continue
        where = f"Pod {pod.metadata.name} status.containerStatuses[{cs['name']}]"
        held = _requests({"requests": cs.get("allocatedResources")}, problems, f"{where}.allocatedResources")
        actual = _requests(cs.get("resources"), problems, f"{where}.resources")
        if held or actual:
            out[cs["name"]] = _max(held, actual)
    infeasible = any(
        isinstance(cd, dict) and cd.get("type") == "PodResizePending" and cd.get("reason") == "Infeasible"
        for cd in extra.get("conditions") or []
    )
    return out, infeasible


def _container_request(
    ctr: Any, floor: tuple[dict[str, dict[str, float]], bool], problems: list[str], where: str
) -> dict[str, float]:
    held, infeasible = floor
    req = _requests(ctr.resources, problems, where)
    status = held.get(ctr.name)
    if status is None:
        return req
    return status if infeasible else _max(req, status)


def effective_requests(pod: ApiPod, problems: list[str] | None = None) -> dict[str, float]:
    """What kube-scheduler counts for a pod, every resource: the regular containers summed (each at least what its
    status says it holds: an in-place resize), sidecars (restartable init containers) added, at least each
    plain init container plus the sidecars started before it; pod-level requests replace cpu, memory and
    hugepages where set; then the RuntimeClass overhead."""
    problems = problems if problems is not None else []
    name = pod.metadata.name
    floor = _status_floor(pod, problems)
    total: dict[str, float] = {}
    for i, ctr in enumerate(pod.spec.containers):
        total = _add(total, _container_request(ctr, floor, problems, f"Pod {name} containers[{i}]"))
    sidecars: dict[str, float] = {}
    init_peak: dict[str, float] = {}
    for i, ctr in enumerate(pod.spec.init_containers or []):
        req = _container_request(ctr, floor, problems, f"Pod {name} initContainers[{i}]")
        if ctr.restart_policy == "Always":
            total = _add(total, req)
            sidecars = _add(sidecars, req)
            init_peak = _max(init_peak, sidecars)
        else:
            init_peak = _max(init_peak, _add(sidecars, req))
    total = _max(total, init_peak)
    pod_level = _requests(pod.spec.resources, problems, f"Pod {name} spec.resources")
    for k, v in pod_level.items():
        if k in POD_LEVEL or k.startswith("hugepages-"):
            total[k] = v
    if pod.spec.overhead:
        total = _add(total, _requests({"requests": pod.spec.overhead}, problems, f"Pod {name} spec.overhead"))
    return total


def _as_resources(req: dict[str, float]) -> s.Resources:
    return s.Resources(
        gpu=req.get(c.GPU_RESOURCE, 0.0), cpu=req.get("cpu", 0.0) * 1000.0, memory=req.get("memory", 0.0)
    )


def extended_of(req: dict[str, float]) -> dict[str, float]:
    """Every resource beyond the three KAI divides, by its Kubernetes name, zero amounts left out."""
    return {k: v for k, v in req.items() if k not in BASE_RESOURCES and v != 0}


BASE_RESOURCES = frozenset((c.GPU_RESOURCE, "cpu", "memory", "pods"))


def pod_request(pod: ApiPod, problems: list[str] | None = None) -> s.Resources:
    """Effective request of gpu, cpu and memory (``effective_requests``); the gpu-fraction replaces the GPUs."""
    return _with_fraction(pod, _as_resources(effective_requests(pod, problems)), problems)


def _with_fraction(pod: ApiPod, total: s.Resources, problems: list[str] | None) -> s.Resources:
    fraction = gpu_fraction(pod, problems)
    if fraction is not None:
        total = s.Resources(fraction, total.cpu, total.memory)
    return total


def gpu_fraction(pod: ApiPod, problems: list[str] | None = None) -> float | None:
    raw = pod.metadata.annotations.get(c.GPU_FRACTION)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0.0 < value <= 1.0:
        if problems is not None:
            problems.append(f"Pod {pod.metadata.name} annotations[{c.GPU_FRACTION}]: {raw!r} is not in (0, 1]")
        return None
    return value


def _affinity_terms(pod: ApiPod) -> list[list[s.NodeSelectorRequirement]]:
    aff = pod.spec.affinity or {}
    required = (aff.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms: list[list[s.NodeSelectorRequirement]] = []
    for term in required.get("nodeSelectorTerms") or []:
        terms.append(
            [
                s.NodeSelectorRequirement(e.get("key", ""), e.get("operator", "In"), tuple(e.get("values") or ()))
                for e in term.get("matchExpressions") or []
            ]
        )
    return terms


def pod_phase(pod: ApiPod) -> s.PodPhase:
    if pod.metadata.deletion_timestamp:
        return s.PodPhase.RELEASING
    phase = pod.status.phase if pod.status else None
    if phase in ("Succeeded", "Failed"):
        return s.PodPhase(phase)
    if pod.spec.node_name:
        return s.PodPhase.RUNNING
    return s.PodPhase.PENDING


def pod_from_api(pod: ApiPod, job_key: str, problems: list[str] | None = None) -> s.Pod:
    meta = pod.metadata
    try:
        task_priority = int(meta.labels.get(c.TASK_PRIORITY_LABEL, "0"))
    except ValueError:
        task_priority = 0
    gpu_mem = meta.annotations.get(c.GPU_MEMORY)
    if gpu_mem is not None and not gpu_mem.isdigit() and problems is not None:
        problems.append(f"Pod {meta.name} annotations[{c.GPU_MEMORY}]: {gpu_mem!r} is not a whole number of MiB")
    req = effective_requests(pod, problems)
    return s.Pod(
        uid=meta.uid or f"{meta.namespace}/{meta.name}",
        name=meta.name or "",
        namespace=meta.namespace or "",
        job=job_key,
        request=_with_fraction(pod, _as_resources(req), problems),
        extended=extended_of(req),
        phase=pod_phase(pod),
        node=pod.spec.node_name,
        subgroup=meta.labels.get(c.SUBGROUP_LABEL),
        task_priority=task_priority,
        is_ray_head=meta.labels.get(c.RAY_NODE_TYPE) == "head",
        gpu_fraction=gpu_fraction(pod),
        gpu_memory_mib=int(gpu_mem) if gpu_mem and gpu_mem.isdigit() else None,
        node_selector=dict(pod.spec.node_selector or {}),
        required_affinity=_affinity_terms(pod),
        tolerations=[
            s.Toleration(t.key or "", t.operator or "Equal", t.value or "", t.effect or "")
            for t in pod.spec.tolerations or []
        ],
        start_time=parse_time(pod.status.start_time if pod.status else None),
        gated=bool(pod.spec.scheduling_gates),
        quota_gated=[g.get("name") for g in pod.spec.scheduling_gates or []] == [c.QUEUE_ADMISSION_GATE],
        admitted_at=parse_time(meta.annotations.get(c.QUEUE_ADMITTED)),
        ready=pod_ready(pod),
        bound_at=pod_bound_at(pod) if pod.spec.node_name else None,
    )


def _topology(tc: TopologyConstraint | None) -> s.TopologyConstraint | None:
    if tc is None or not tc.topology:
        return None
    return s.TopologyConstraint(tc.topology, tc.required_topology_level, tc.preferred_topology_level)


def job_from_podgroup(
    pg: PodGroup,
    pods: Iterable[ApiPod],
    priority_classes: dict[str, int] | None = None,
    problems: list[str] | None = None,
) -> s.Job:
    """A PodGroup and its pods as a scheduler Job (priority from the class table, unknown class -> 50 as KAI)."""
    classes = c.PRIORITY_CLASSES if priority_classes is None else priority_classes
    meta, spec = pg.metadata, pg.spec
    key = f"{meta.namespace}/{meta.name}"
    sub_max: dict[str, int] = {}
    try:
        sub_max = {str(k): int(v) for k, v in json.loads(meta.annotations.get(c.SUBGROUP_MAX, "{}")).items()}
    except (ValueError, AttributeError):
        if problems is not None:
            problems.append(f"PodGroup {meta.name} annotations[{c.SUBGROUP_MAX}]: not a JSON map of integers")
    parents = {sg.parent for sg in spec.sub_groups or [] if sg.parent}
    max_member: int | None = None
    raw_max = meta.annotations.get(c.MAX_MEMBER)
    if raw_max is not None:
        try:
            max_member = int(raw_max) + (sub_max.get(c.SUBMITTER_SUBGROUP, 0))
        except ValueError:
            if problems is not None:
                problems.append(f"PodGroup {meta.name} annotations[{c.MAX_MEMBER}]: {raw_max!r} is not an integer")
    pclass = spec.priority_class_name or ""
    preempt = None
    if spec.preemptibility:
        preempt = s.Preemptibility(spec.preemptibility)
    core = _subgroup_core(pg, problems)
    return s.Job(
        namespace=meta.namespace or "",
        name=meta.name or "",
        uid=meta.uid or "",
        queue=spec.queue or c.DEFAULT_QUEUE,
        priority=classes.get(pclass, c.DEFAULT_PRIORITY_VALUE),
        priority_class=pclass,
        preemptibility=preempt,
        # kai-ray's Ray podgrouper writes the value it derived from the priority class when the Ray object has no
        # preemptibility label: the queue's default preemptibility may replace it, an explicit setting never
        preemptibility_derived=c.PREEMPTIBILITY_LABEL not in meta.labels and _ray_grouped(pg),
        min_member=spec.min_member if spec.min_member is not None else (0 if spec.min_sub_group is not None else 1),
        min_subgroup=spec.min_sub_group,
        subgroups=[
            s.SubGroup(
                name=sg.name,
                min_member=leaf_min_member(sg, sg.name in parents),
                min_subgroup=sg.min_sub_group,
                parent=sg.parent,
                max_member=sub_max.get(sg.name),
                core=core.get(sg.name),
                topology=_topology(sg.topology_constraint),
            )
            for sg in spec.sub_groups or []
        ],
        max_member=max_member,
        topology=_topology(spec.topology_constraint),
        created_at=parse_time(meta.creation_timestamp) or 0.0,
        last_start=parse_time(meta.annotations.get(c.LAST_START)),
        preemption_delay=parse_duration(spec.preemption_delay, go=True),
        staleness_grace=parse_duration(spec.staleness_grace_period, go=True),
        kind=_top_owner_kind(pg),
        pods=[pod_from_api(p, key, problems) for p in pods],
        raynative=raynative_facts(pg, problems),
    )


RAY_KINDS = ("RayCluster", "RayJob", "RayService")


def _ray_grouped(pg: PodGroup) -> bool:
    """Whether kai-ray's Ray podgrouper made this PodGroup: its owner is a Ray object (by owner reference, or by the
    top-owner annotation where the object has no uid, as in the simulator)."""
    if pg.metadata.owner_references:
        return _top_owner_kind(pg) in RAY_KINDS
    raw = pg.metadata.annotations.get(c.TOP_OWNER_METADATA)
    if not raw:
        return False
    try:
        top = yaml.safe_load(raw)
    except yaml.YAMLError:
        return False
    return isinstance(top, dict) and top.get("kind") in RAY_KINDS


def _subgroup_core(pg: PodGroup, problems: list[str] | None) -> dict[str, int]:
    """``kai-ray.io/subgroup-core``: per leaf subgroup, its non-preemptible pods when semi-preemptible."""
    raw = pg.metadata.annotations.get(c.SUBGROUP_CORE)
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
        if isinstance(parsed, dict) and all(isinstance(v, int) and not isinstance(v, bool) for v in parsed.values()):
            return {str(k): int(v) for k, v in parsed.items()}
    except ValueError:
        pass
    if problems is not None:
        problems.append(f"PodGroup {pg.metadata.name} annotations[{c.SUBGROUP_CORE}]: not a JSON map of integers")
    return {}


def _duration_annotation(pg: PodGroup, key: str, problems: list[str] | None) -> float | None:
    raw = pg.metadata.annotations.get(key)
    if raw is None:
        return None
    value = parse_duration(raw)
    if value is None and problems is not None:
        problems.append(f"PodGroup {pg.metadata.name} annotations[{key}]: {raw!r} is not a duration (e.g. 10m)")
    return value


def raynative_facts(pg: PodGroup, problems: list[str] | None = None) -> s.RayNativeFacts | None:
    """The Ray-native facts and limits of a PodGroup, from annotations; None when it has none."""
    ann = pg.metadata.annotations
    facts = s.RayNativeFacts(
        last_checkpoint=parse_time(ann.get(c.LAST_CHECKPOINT)),
        ready_timeout=_duration_annotation(pg, c.READY_TIMEOUT, problems),
        max_pending_time=_duration_annotation(pg, c.MAX_PENDING_TIME, problems),
        max_runtime=_duration_annotation(pg, c.MAX_RUNTIME, problems),
        backoff_until=parse_time(ann.get(c.REQUEUE_AFTER)),
        upgrade_of=f"{pg.metadata.namespace}/{ann[c.UPGRADE_SURGE_OF]}" if ann.get(c.UPGRADE_SURGE_OF) else None,
    )
    if c.LAST_CHECKPOINT in ann and facts.last_checkpoint is None and problems is not None:
        problems.append(f"PodGroup {pg.metadata.name} annotations[{c.LAST_CHECKPOINT}]: not an RFC 3339 time")
    try:
        facts.admitted_seconds = float(ann[c.ADMITTED_SECONDS]) if c.ADMITTED_SECONDS in ann else None
    except ValueError:
        facts.admitted_seconds = None
    _max_pending_action(pg, facts, problems)
    if facts == s.RayNativeFacts():
        return None
    if facts.max_pending_time is not None:  # waiting since its last eviction, else since it was created
        facts.pending_since = parse_time(ann.get(c.LAST_EVICTION))
    return facts


def _max_pending_action(pg: PodGroup, facts: s.RayNativeFacts, problems: list[str] | None) -> None:
    """``kai-ray.io/max-pending-action`` (what to do past the max-pending-time) and the adapter's record of having
    done it (``kai-ray.io/max-pending-acted``, JSON with ``action`` and ``at``)."""
    ann = pg.metadata.annotations
    action = ann.get(c.MAX_PENDING_ACTION)
    if action is not None and action not in c.MAX_PENDING_ACTIONS:
        if problems is not None:
            allowed = ", ".join(repr(a) for a in c.MAX_PENDING_ACTIONS)
            problems.append(
                f"PodGroup {pg.metadata.name} annotations[{c.MAX_PENDING_ACTION}]: {action!r} is not one of {allowed}"
            )
    elif action:
        facts.max_pending_action = action
    raw = ann.get(c.MAX_PENDING_ACTED)
    if not raw:
        return
    try:
        acted = json.loads(raw)
    except ValueError:
        acted = None
    at = parse_time(acted.get("at")) if isinstance(acted, dict) and isinstance(acted.get("at"), str) else None
    if at is None or not isinstance(acted, dict):
        if problems is not None:
            problems.append(f"PodGroup {pg.metadata.name} annotations[{c.MAX_PENDING_ACTED}]: not JSON with an 'at'")
        return
    facts.max_pending_acted = at
    facts.max_pending_failed = acted.get("action") == "fail"
    if acted.get("suspended") is False:
        facts.max_pending_refused = str(acted.get("refused") or "it cannot be suspended")


def pod_ready(pod: ApiPod) -> bool | None:
    """The pod's Ready condition (None when the status has none yet)."""
    extra = (pod.status.model_extra or {}) if pod.status is not None else {}
    for cond in extra.get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return None


def pod_bound_at(pod: ApiPod) -> float | None:
    """When the pod was bound: its ``PodScheduled`` condition's transition time (set by the API server's binding)."""
    extra = (pod.status.model_extra or {}) if pod.status is not None else {}
    for cond in extra.get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "PodScheduled" and cond.get("status") == "True":
            return parse_time(cond.get("lastTransitionTime"))
    return None


def _top_owner_kind(pg: PodGroup) -> str:
    refs = pg.metadata.owner_references or []
    return refs[0].kind if refs else ""


_MB = 1e6


def queue_from_api(q: ApiQueue) -> s.Queue:
    """Queue units: memory MB -> bytes; cpu stays millicores; -1 stays -1 (unlimited)."""
    res = q.spec.resources

    def vec(attr: str) -> s.Resources:
        if res is None:
            default = {"quota": 0.0, "limit": s.UNLIMITED, "over_quota_weight": 1.0}[attr]
            return s.Resources(default, default, default)
        mem = getattr(res.memory, attr)
        if attr != "over_quota_weight" and mem != -1:
            mem = mem * _MB
        return s.Resources(getattr(res.gpu, attr), getattr(res.cpu, attr), mem)

    return s.Queue(
        name=q.name,
        parent=q.spec.parent_queue or None,
        priority=q.spec.priority if q.spec.priority is not None else 100,
        quota=vec("quota"),
        limit=vec("limit"),
        over_quota_weight=vec("over_quota_weight"),
        preempt_min_runtime=parse_duration(q.spec.preempt_min_runtime, go=True),
        reclaim_min_runtime=parse_duration(q.spec.reclaim_min_runtime, go=True),
        created_at=parse_time(q.metadata.creation_timestamp) or 0.0,
        uid=q.metadata.uid or q.name,
        default_preemptibility=queue_default_preemptibility(q),
        admission_gating=(q.metadata.labels or {}).get(c.QUEUE_ADMISSION_GATING_LABEL) == "true",
    )


def queue_default_preemptibility(q: ApiQueue) -> s.Preemptibility | None:
    """The queue's ``kai-ray.io/default-preemptibility`` (None when absent or not a known value: ``Queue.validate_spec``
    reports that one)."""
    raw = q.metadata.annotations.get(c.DEFAULT_PREEMPTIBILITY)
    return s.Preemptibility(raw) if raw in c.PREEMPTIBILITY_VALUES else None


def node_from_api(node: dict[str, Any], problems: list[str] | None = None) -> s.Node:
    """A v1 Node (as a dict from the API) -> scheduler Node."""
    problems = problems if problems is not None else []
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    name = meta.get("name", "")
    labels = dict(meta.get("labels") or {})
    ready = any(cond.get("type") == "Ready" and cond.get("status") == "True" for cond in status.get("conditions") or [])
    gpu_mem = labels.get(c.GPU_MEMORY_NODE_LABEL, "0")
    return s.Node(
        name=name,
        allocatable=s.Resources(
            gpu=_q(alloc.get(c.GPU_RESOURCE, 0), problems, f"Node {name} allocatable[{c.GPU_RESOURCE}]"),
            cpu=_q(alloc.get("cpu", 0), problems, f"Node {name} allocatable[cpu]") * 1000.0,
            memory=_q(alloc.get("memory", 0), problems, f"Node {name} allocatable[memory]"),
        ),
        max_pods=int(_q(alloc.get("pods", 110), problems, f"Node {name} allocatable[pods]")),
        extended=extended_of(
            {k: _q(v, problems, f"Node {name} allocatable[{k}]") for k, v in alloc.items() if k not in BASE_RESOURCES}
        ),
        labels=labels,
        taints=[
            s.Taint(t.get("key", ""), t.get("value", "") or "", t.get("effect", "NoSchedule"))
            for t in spec.get("taints") or []
        ],
        gpu_memory_mib=int(gpu_mem) if str(gpu_mem).isdigit() else 0,
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready if status.get("conditions") else True,
    )

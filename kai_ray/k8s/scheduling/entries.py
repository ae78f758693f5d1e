"""What the scheduler cache keeps of each watched object, read once when its watch event arrives.

Why apart from :mod:`kai_ray.k8s.scheduling.cache`: reading an object (parsing, validating, converting it through
:mod:`kai_ray.bridge`) depends on nothing but the object and a few settings, while the cache's job is to keep the
entries current and indexed and to assemble snapshots from them. The signatures here say which changes of an object
the core can see, so every other change (a status write, a resourceVersion) costs a comparison, not a parse.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from pydantic import ValidationError

from kai_ray import constants as c
from kai_ray.api.loader import ManifestError, parse_object
from kai_ray.api.meta import Pod as ApiPod
from kai_ray.api.podgroup import PodGroup
from kai_ray.api.queue import Queue as ApiQueue
from kai_ray.bridge import job_from_podgroup, parse_time, pod_from_api, pod_request, queue_from_api
from kai_ray.k8s.scheduling import upstream_gangs
from kai_ray.podgrouper.defaultgrouper import own_group_name
from kai_ray.scheduler import snapshot as s

log = logging.getLogger("kai_ray.k8s.scheduling.cache")  # a pod it cannot read is the cache's line, as before


class PodSig(NamedTuple):
    """What of a pod the core can see: a change elsewhere (a status write, a resourceVersion) is not a change."""

    node: str | None
    ours: bool
    group: str | None
    terminal: bool
    deleting: bool
    gated: bool
    request: s.Resources
    subgroup: str | None
    task_priority: str | None
    ready: bool | None  # the Ready condition, as kai-ray.io/ready-timeout reads it


@dataclass(slots=True)
class PodEntry:
    key: str
    uid: str
    namespace: str
    name: str
    node: str | None
    ours: bool
    group: str | None  # pod-group-name annotation, or the pod's own PodGroup when it is its own top owner
    terminal: bool
    deleting: bool
    request: s.Resources
    spod: s.Pod | None  # set for our grouped pods
    sig: PodSig
    job_key: str | None = None  # "<namespace>/<pod-group-name>" for our grouped pods
    created: float = 0.0
    raw: tuple[Any, ...] = ()  # the parts of the object the entry was built from
    problems: tuple[str, ...] = ()  # bad fields of one of our grouped pods (its gang is not scheduled until fixed)


@dataclass(slots=True)
class PgEntry:
    """A KAI PodGroup. Its parsed model is kept only until the job template is built from it: at tens of thousands
    of PodGroups the models were the scheduler's largest memory. What the cycle's reporting and dispatch read of it
    every cycle (queue, markUnschedulable) is kept apart; the rare readers of the whole model parse ``raw`` again."""

    key: str
    uid: str
    namespace: str
    name: str
    raw: dict[str, Any]
    parsed: bool  # the PodGroup is well-formed: :attr:`model` can be read (again) from ``raw``
    errors: list[str]
    template: s.Job | None
    pc_generation: int
    sig: tuple[Any, ...]
    queue: str | None = None
    mark_unschedulable: bool = False
    kept: PodGroup | None = None  # the model, until the template is built

    @property
    def model(self) -> PodGroup | None:
        if self.kept is not None or not self.parsed:
            return self.kept
        return parse_podgroup(self.raw, self.key)

    @property
    def annotations(self) -> dict[str, str]:
        return (self.raw.get("metadata") or {}).get("annotations") or {}


@dataclass(slots=True)
class UpstreamEntry:
    """An upstream Kubernetes PodGroup (``scheduling.k8s.io/v1beta1``); kai-ray only reads it."""

    key: str
    raw: dict[str, Any]
    workload: str | None  # "<namespace>/<name>" of its Workload (spec.workloadRef)
    sig: tuple[Any, ...]
    template: upstream_gangs.UpstreamTemplate | None = None
    errors: list[str] = field(default_factory=list)
    pc_generation: int = -1  # priority classes and Workload labels it was built from


@dataclass(slots=True)
class QueueEntry:
    name: str
    uid: str
    raw: dict[str, Any]
    model: ApiQueue | None
    queue: s.Queue | None
    errors: list[str]
    sig: tuple[Any, ...]


@dataclass(slots=True)
class Assumed:
    node: str
    uid: str
    until: float


@dataclass
class SnapshotView:
    """A snapshot plus what the operator needs to act on its decisions."""

    snapshot: s.Snapshot
    pods_by_uid: dict[str, PodEntry]
    invalid_jobs: dict[str, list[str]] = field(default_factory=dict)  # PodGroup key -> field errors
    invalid_queues: dict[str, list[str]] = field(default_factory=dict)
    active_before: dict[str, int] = field(default_factory=dict)  # job key -> active pods at snapshot time
    pending: int = 0  # pods of scheduled PodGroups waiting for a node
    node_generation: int = 0  # the cache's count of node changes when the snapshot was built


def bound_entry(old: PodEntry, raw: tuple[Any, ...]) -> PodEntry | None:
    """The entry after a binding (only ``spec.nodeName`` and the start time changed), derived from the old one
    without parsing the pod again; None when anything else changed."""
    if old.spod is None or old.raw[0] != raw[0] or old.raw[2] != raw[2] or old.node:
        return None
    spec, old_spec = raw[1] or {}, old.raw[1] or {}
    node = spec.get("nodeName")
    if not node or len(spec) != len(old_spec) + ("nodeName" not in old_spec):
        return None
    if any(v != old_spec.get(k) for k, v in spec.items() if k != "nodeName"):
        return None
    spod = old.spod
    if spod.phase is s.PodPhase.PENDING:
        spod = replace(spod, phase=s.PodPhase.RUNNING, node=node, start_time=parse_time(raw[3]))
    else:
        spod = replace(spod, node=node, start_time=parse_time(raw[3]))
    return replace(old, node=node, spod=spod, sig=old.sig._replace(node=node))


def stamped_entry(old: PodEntry, raw: tuple[Any, ...]) -> PodEntry | None:
    """The old entry when the only change is the podgrouper stamping the PodGroup the pod was already counted
    in (no labels: a subgroup label changes the pod); None otherwise."""
    if old.group is None or raw[1:] != old.raw[1:]:
        return None
    meta, old_meta = dict(raw[0]), dict(old.raw[0])
    annotations = dict(meta.pop("annotations", None) or {})
    old_annotations = dict(old_meta.pop("annotations", None) or {})
    if annotations.pop(c.PODGROUP_ANNOTATION, None) != old.group or c.PODGROUP_ANNOTATION in old_annotations:
        return None
    if annotations != old_annotations or meta != old_meta:
        return None
    return replace(old)


def only_deleting_differs(old: PodSig, new: PodSig) -> bool:
    """Two signatures of one pod that differ at most in whether it is being deleted."""
    return old._replace(deleting=False) == new._replace(deleting=False)


def pod_entry(key: str, obj: dict[str, Any], scheduler_name: str, namespaces: AbstractSet[str]) -> PodEntry:
    """A pod as the cache keeps it: parsed (through :mod:`kai_ray.bridge`) only when it is ours to schedule in a
    PodGroup, or holds a node; ``namespaces`` empty: every namespace is the scheduler's."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    ns = meta.get("namespace", "")
    uid = meta.get("uid") or key
    ours = spec.get("schedulerName") == scheduler_name and (not namespaces or ns in namespaces)
    group = (
        upstream_gangs.pod_group_name(spec)
        or (meta.get("annotations") or {}).get(c.PODGROUP_ANNOTATION)
        or (own_group_name(meta) if ours else None)
    )
    phase = status.get("phase")
    terminal = phase in ("Succeeded", "Failed")
    deleting = bool(meta.get("deletionTimestamp"))
    node = spec.get("nodeName") or None
    request = s.ZERO
    spod: s.Pod | None = None
    problems: list[str] = []
    try:
        if not ((ours and group) or (node and not terminal)):
            raise _NothingToRead
        api = ApiPod.model_validate(obj)
        if ours and group:
            spod = pod_from_api(api, f"{ns}/{group}", problems)
            spod.created_at = parse_time(meta.get("creationTimestamp")) or 0.0
            request = spod.request
        elif node and not terminal:
            request = pod_request(api)
    except _NothingToRead:
        pass  # not ours to schedule and holding no node: nothing the snapshot needs
    except ValidationError as exc:
        log.info("pod %s: cannot read (%s); treated as holding nothing", key, exc.errors()[0].get("msg"))
    labels = meta.get("labels") or {}
    sig = PodSig(
        node,
        ours,
        group,
        terminal,
        deleting,
        bool(spec.get("schedulingGates")),
        request,
        labels.get(c.SUBGROUP_LABEL),
        labels.get(c.TASK_PRIORITY_LABEL),
        spod.ready if spod is not None else None,
    )
    return PodEntry(
        key=key,
        uid=uid,
        namespace=ns,
        name=meta.get("name", ""),
        node=node,
        ours=ours,
        group=group,
        terminal=terminal,
        deleting=deleting,
        request=request,
        spod=spod,
        sig=sig,
        created=parse_time(meta.get("creationTimestamp")) or 0.0,
        job_key=f"{ns}/{group}" if ours and group and spod is not None else None,
        problems=tuple(problems),
    )


def job_template(model: PodGroup, priority_classes: dict[str, int], global_default: int | None) -> s.Job:
    """The core job a valid PodGroup stands for, without its pods (they are added per snapshot)."""
    job = job_from_podgroup(model, (), priority_classes, [])
    if job.priority_class not in priority_classes and global_default is not None:
        job.priority = global_default
    job.stale_since = parse_time(model.metadata.annotations.get(c.STALE_SINCE))
    return job


def charge(used: dict[str, list[float]], node: str, p: PodEntry, sign: int = 1) -> float:
    """Add what a pod holds to its node's use (gpu, cpu, memory, pods), or take it back (``sign=-1``); returns the
    pods left counted on the node."""
    u = used.setdefault(node, [0.0, 0.0, 0.0, 0.0])
    u[0] += sign * p.request.gpu
    u[1] += sign * p.request.cpu
    u[2] += sign * p.request.memory
    u[3] += sign
    return u[3]


def nodes_with_room(
    nodes: Mapping[str, s.Node], foreign: Mapping[str, list[float]], held: Iterable[PodEntry]
) -> list[s.Node]:
    """The nodes as the core sees them: what pods that are no job hold is taken off their allocatable. ``foreign``
    (node -> gpu, cpu, memory, pods) is what other schedulers' pods hold; ``held`` are our pods whose PodGroup is
    missing or invalid, which still hold their node."""
    used = {node: list(u) for node, u in foreign.items()}
    for p in held:
        if p.node and not p.terminal:
            charge(used, p.node, p)
    out = []
    for name, node in nodes.items():
        usage = used.get(name)
        if usage is not None:
            node = replace(
                node,
                allocatable=node.allocatable - s.Resources(usage[0], usage[1], usage[2]),
                max_pods=max(0, node.max_pods - int(usage[3])),
            )
        out.append(node)
    return out


def pg_entry(key: str, obj: dict[str, Any], sig: tuple[Any, ...], max_gang_pods: int) -> PgEntry:
    """A KAI PodGroup, validated once: a bad one keeps its field errors (its gang is reported, not scheduled)."""
    meta = obj.get("metadata") or {}
    entry = PgEntry(
        key=key,
        uid=meta.get("uid", ""),
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        raw=obj,
        parsed=False,
        errors=[],
        template=None,
        pc_generation=-1,
        sig=sig,
    )
    try:
        model = parse_podgroup(obj, key)
        entry.parsed = True
        entry.kept = model
        entry.queue = model.spec.queue
        entry.mark_unschedulable = bool(model.spec.mark_unschedulable)
        entry.errors = [str(e) for e in model.validate_spec()] + gang_size_errors(model, max_gang_pods)
    except ManifestError as exc:
        entry.errors = [str(exc)]
    return entry


def parse_podgroup(obj: dict[str, Any], key: str) -> PodGroup:
    """The PodGroup model of a watched object (the watch's objects carry no apiVersion or kind when slimmed)."""
    model = parse_object({**obj, "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup"}, key)
    assert isinstance(model, PodGroup)
    return model


def queue_entry(key: str, obj: dict[str, Any], sig: tuple[Any, ...]) -> QueueEntry:
    """A KAI Queue, validated once and converted to the core's queue when it is valid."""
    meta = obj.get("metadata") or {}
    entry = QueueEntry(name=key, uid=meta.get("uid", ""), raw=obj, model=None, queue=None, errors=[], sig=sig)
    try:
        model = parse_object({**obj, "apiVersion": "scheduling.run.ai/v2", "kind": "Queue"}, f"Queue {key}")
        assert isinstance(model, ApiQueue)
        entry.model = model
        entry.errors = [str(e) for e in model.validate_spec()]
        if not entry.errors:
            entry.queue = queue_from_api(model)
    except ManifestError as exc:
        entry.errors = [str(exc)]
    return entry


def gang_size_errors(pg: PodGroup, limit: int) -> list[str]:
    """Why a PodGroup is refused for its size: the podgrouper's finding (:data:`~kai_ray.constants.INVALID`, naming
    the Ray object's field), or a minimum beyond ``limit`` pods however the PodGroup was written."""
    problem = pg.metadata.annotations.get(c.INVALID)
    if problem:
        return [problem]
    out = []
    spec = pg.spec
    if spec.min_member is not None and spec.min_member > limit:
        out.append(f"spec.minMember: {spec.min_member} pods; at most {limit} pods per gang (max-gang-pods)")
    leaves = [sg.min_member or 0 for sg in spec.sub_groups or [] if sg.min_member is not None]
    if sum(leaves) > limit and not (spec.min_member is not None and spec.min_member > limit):
        out.append(
            f"spec.subGroups[].minMember: {sum(leaves)} pods in all; at most {limit} pods per gang (max-gang-pods)"
        )
    return out


class _NothingToRead(Exception):
    pass


def pod_fingerprint(obj: dict[str, Any]) -> tuple[Any, ...]:
    """Everything of a (slimmed) pod that a PodEntry depends on: its metadata but the resourceVersion, its spec,
    whether it finished, and its start time."""
    meta = dict(obj.get("metadata") or {})
    meta.pop("resourceVersion", None)
    status = obj.get("status") or {}
    phase = status.get("phase")
    ready = next((cd.get("status") for cd in status.get("conditions") or [] if cd.get("type") == "Ready"), None)
    return (
        meta,
        obj.get("spec"),
        phase if phase in ("Succeeded", "Failed") else None,
        status.get("startTime"),
        ready,
    )


def node_sig(n: s.Node) -> tuple[Any, ...]:
    return (
        n.allocatable,
        n.max_pods,
        tuple(sorted(n.labels.items())),
        tuple(n.taints),
        n.unschedulable,
        n.ready,
        n.gpu_memory_mib,
    )


OWN_STAMPS = (c.LAST_START, c.LAST_EVICTION)


def unstamped(sig: tuple[Any, ...]) -> tuple[Any, ...]:
    """A PodGroup's signature without the timestamps the scheduler itself writes after acting: re-read, but no
    reason to wake the loop (a burst of bindings would otherwise trigger a cycle per second of stamps)."""
    return (*sig[:2], tuple(kv for kv in sig[2] if kv[0] not in OWN_STAMPS), *sig[3:])


def freeze(d: dict[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((d or {}).items()))

"""The scheduler's picture of the cluster, kept current by watch events and turned into a core Snapshot per cycle.

Why incremental: a cycle must not re-list or re-parse thousands of pods. Each pod, PodGroup, Queue and Node is
converted to the core's dataclasses once, when its watch event arrives (through :mod:`kai_ray.bridge`, the one
translation between the wire and the core); a cycle only assembles them. Two overlays make in-flight work visible
before the watch confirms it: *assumed* bindings (a pod we have sent to a node counts as running there, so the next
cycle neither binds it again nor gives its room away) and *evicting* pods (they still hold their node until they
are gone, like KAI's releasing pods).

Pods of other schedulers, and ours that are not (yet) in a PodGroup we schedule, still occupy their nodes: their
requests are subtracted from the node's allocatable instead of becoming jobs.

A pod's PodGroup is the upstream Kubernetes PodGroup it names (``spec.schedulingGroup``, :mod:`.upstream`), else its
``pod-group-name`` annotation or, for a pod that is its own top owner, the one the podgrouper always gives it
(:func:`~kai_ray.podgrouper.defaultgrouper.own_group_name`): such a pod is schedulable as soon as that
PodGroup exists, without waiting for the podgrouper's stamp - never before, since jobs come only from PodGroups.
"""

from __future__ import annotations

import copy
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from kai_ray import constants as c
from kai_ray.api.loader import ManifestError, parse_object
from kai_ray.api.meta import Pod as ApiPod
from kai_ray.api.podgroup import PodGroup
from kai_ray.api.queue import Queue as ApiQueue
from kai_ray.bridge import job_from_podgroup, node_from_api, parse_time, pod_from_api, pod_request, queue_from_api
from kai_ray.k8s.base.informer import DELETE
from kai_ray.k8s.config import OperatorConfig
from kai_ray.k8s.ray.elastic import SUSPEND_ANNOTATION
from kai_ray.k8s.scheduling import upstream
from kai_ray.k8s.scheduling.dra import DraStore
from kai_ray.podgrouper.defaultgrouper import own_group_name
from kai_ray.scheduler import snapshot as s

log = logging.getLogger(__name__)


ASSUME_TTL = 30.0  # seconds a binding the API server answered stays assumed until the watch confirms it
EVICT_TTL = 60.0


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
    sig: tuple[Any, ...]
    job_key: str | None = None  # "<namespace>/<pod-group-name>" for our grouped pods
    created: float = 0.0
    raw: tuple[Any, ...] = ()  # the parts of the object the entry was built from
    problems: tuple[str, ...] = ()  # bad fields of one of our grouped pods (its gang is not scheduled until fixed)


@dataclass(slots=True)
class PgEntry:
    key: str
    uid: str
    namespace: str
    name: str
    raw: dict[str, Any]
    model: PodGroup | None
    errors: list[str]
    template: s.Job | None
    pc_generation: int
    sig: tuple[Any, ...]


@dataclass(slots=True)
class UpstreamEntry:
    """An upstream Kubernetes PodGroup (``scheduling.k8s.io/v1beta1``); kai-ray only reads it."""

    key: str
    raw: dict[str, Any]
    workload: str | None  # "<namespace>/<name>" of its Workload (spec.workloadRef)
    sig: tuple[Any, ...]
    template: upstream.UpstreamTemplate | None = None
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


class SchedulerCache:
    def __init__(self, config: OperatorConfig, on_change: Callable[[], None] = lambda: None) -> None:
        self.config = config
        self.on_change = on_change
        self.lock = threading.RLock()
        self.ray_activity: dict[str, s.RayActivity] = {}  # pod key -> Ray's idle/busy answer
        self.nodes: dict[str, s.Node] = {}
        self.pods: dict[str, PodEntry] = {}
        self.uid_to_key: dict[str, str] = {}
        self.pgs: dict[str, PgEntry] = {}
        self.queues: dict[str, QueueEntry] = {}
        self.priority_classes: dict[str, int] = {}
        self.global_default: int | None = None
        self.pc_generation = 0
        self.assumed: dict[str, Assumed] = {}
        self.evicting: dict[str, float] = {}
        self.changes = 0
        self.namespaces = set(config.namespaces)
        # incremental snapshot state: members per job, built jobs, foreign usage per node
        self.members: dict[str, dict[str, PodEntry]] = {}
        self.by_uid: dict[str, PodEntry] = {}
        self.foreign: dict[str, list[float]] = {}
        self._jobs: dict[str, tuple[s.Job, s.Job, int, int]] = {}  # key -> (job, template used, active, pending)
        self._dirty: set[str] = set()
        self.suspended: set[str] = set()  # PodGroups whose owner kai-ray suspended (kai-ray.io/suspended)
        self.problems: dict[str, dict[str, tuple[str, ...]]] = {}  # job -> pod key -> bad fields of the pod
        self.dra: DraStore | None = None  # DRA devices and claims (the operator sets it)
        self.upstream: dict[str, UpstreamEntry] = {}  # upstream PodGroups by "<namespace>/<name>"
        self.workload_labels: dict[str, dict[str, str]] = {}  # their Workloads' labels (the queue label)

    def _changed(self) -> None:
        self.changes += 1
        self.on_change()

    def schedulable_namespace(self, ns: str) -> bool:
        return not self.namespaces or ns in self.namespaces

    # --- event handlers (informer threads) -----------------------------------------------------------------------

    def on_node(self, kind: str, key: str, obj: dict[str, Any]) -> None:
        with self.lock:
            if kind == DELETE:
                if self.nodes.pop(key, None) is not None:
                    self._changed()
                return
            node = node_from_api(obj)
            old = self.nodes.get(key)
            self.nodes[key] = node
            if old is None or _node_sig(old) != _node_sig(node):
                self._changed()

    def on_priority_class(self, kind: str, key: str, obj: dict[str, Any]) -> None:
        with self.lock:
            before = (dict(self.priority_classes), self.global_default)
            if kind == DELETE:
                self.priority_classes.pop(key, None)
                if obj.get("globalDefault"):
                    self.global_default = None
            else:
                self.priority_classes[key] = int(obj.get("value") or 0)
                if obj.get("globalDefault"):
                    self.global_default = int(obj.get("value") or 0)
            if (self.priority_classes, self.global_default) != before:
                self.pc_generation += 1
                self._changed()

    def on_pod(self, kind: str, key: str, obj: dict[str, Any]) -> None:
        with self.lock:
            old = self.pods.get(key)
            if kind == DELETE:
                if old is not None:
                    self._unindex(old)
                    del self.pods[key]
                    self.uid_to_key.pop(old.uid, None)
                    self.assumed.pop(key, None)
                    self.evicting.pop(key, None)
                    self._changed()
                return
            raw = _pod_fingerprint(obj)
            if old is not None and old.raw == raw:
                return  # e.g. the kubelet (KWOK) reporting Running: nothing the core reads changed
            entry = (self._bound_entry(old, obj, raw) or self._stamped_entry(old, raw)) if old is not None else None
            if entry is None:
                entry = self._pod_entry(key, obj)
            entry.raw = raw
            if old is not None:
                self._unindex(old)
                if old.uid != entry.uid:
                    self.uid_to_key.pop(old.uid, None)
                    self.assumed.pop(key, None)
                    self.evicting.pop(key, None)
            self.pods[key] = entry
            self.uid_to_key[entry.uid] = key
            self._index(entry)
            relevant = old is None or old.sig != entry.sig
            a = self.assumed.get(key)
            if a is not None and (entry.node or entry.terminal or a.uid != entry.uid):
                del self.assumed[key]  # the watch now tells the truth
                if entry.node == a.node and old is not None and old.sig[1:] == entry.sig[1:]:
                    relevant = False  # confirmed exactly what we assumed
            if entry.deleting or entry.terminal:
                self.evicting.pop(key, None)
            if relevant:
                self._changed()

    def _index(self, p: PodEntry) -> None:
        if p.job_key is not None:
            self.members.setdefault(p.job_key, {})[p.key] = p
            if p.problems and not p.terminal:
                self.problems.setdefault(p.job_key, {})[p.key] = p.problems
            if p.spod is not None:
                self.by_uid[p.spod.uid] = p
            self._dirty.add(p.job_key)
        elif p.node and not p.terminal:
            u = self.foreign.setdefault(p.node, [0.0, 0.0, 0.0, 0.0])
            u[0] += p.request.gpu
            u[1] += p.request.cpu
            u[2] += p.request.memory
            u[3] += 1

    def _unindex(self, p: PodEntry) -> None:
        if p.job_key is not None:
            group = self.members.get(p.job_key)
            if group is not None:
                group.pop(p.key, None)
                if not group:
                    del self.members[p.job_key]
            bad = self.problems.get(p.job_key)
            if bad is not None:
                bad.pop(p.key, None)
                if not bad:
                    del self.problems[p.job_key]
            if p.spod is not None and self.by_uid.get(p.spod.uid) is p:
                del self.by_uid[p.spod.uid]
            self._dirty.add(p.job_key)
        elif p.node and not p.terminal:
            u = self.foreign.get(p.node)
            if u is not None:
                u[0] -= p.request.gpu
                u[1] -= p.request.cpu
                u[2] -= p.request.memory
                u[3] -= 1
                if u[3] <= 0:
                    del self.foreign[p.node]

    def _touch(self, key: str) -> None:
        entry = self.pods.get(key)
        if entry is not None and entry.job_key is not None:
            self._dirty.add(entry.job_key)

    def _bound_entry(self, old: PodEntry, obj: dict[str, Any], raw: tuple[Any, ...]) -> PodEntry | None:
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
        return replace(old, node=node, spod=spod, sig=(node, *old.sig[1:]))

    def _stamped_entry(self, old: PodEntry, raw: tuple[Any, ...]) -> PodEntry | None:
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

    def _pod_entry(self, key: str, obj: dict[str, Any]) -> PodEntry:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        ns = meta.get("namespace", "")
        uid = meta.get("uid") or key
        ours = spec.get("schedulerName") == self.config.scheduler_name and self.schedulable_namespace(ns)
        group = (
            upstream.pod_group_name(spec)
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
        sig = (
            node,
            ours,
            group,
            terminal,
            deleting,
            bool(spec.get("schedulingGates")),
            request,
            labels.get(c.SUBGROUP_LABEL),
            labels.get(c.TASK_PRIORITY_LABEL),
            spod.ready if spod is not None else None,  # kai-ray.io/ready-timeout reads it
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

    def on_podgroup(self, kind: str, key: str, obj: dict[str, Any]) -> None:
        with self.lock:
            old = self.pgs.get(key)
            if kind == DELETE:
                self.suspended.discard(key)
                if old is not None:
                    del self.pgs[key]
                    self._changed()
                return
            meta = obj.get("metadata") or {}
            if SUSPEND_ANNOTATION in (meta.get("annotations") or {}):
                self.suspended.add(key)
            else:
                self.suspended.discard(key)
            sig = (
                meta.get("uid"),
                meta.get("generation"),
                _freeze(meta.get("annotations")),
                _freeze(meta.get("labels")),
            )
            if old is not None and old.sig == sig:
                old.raw = obj  # status only: nothing the core reads
                return
            entry = PgEntry(
                key=key,
                uid=meta.get("uid", ""),
                namespace=meta.get("namespace", ""),
                name=meta.get("name", ""),
                raw=obj,
                model=None,
                errors=[],
                template=None,
                pc_generation=-1,
                sig=sig,
            )
            try:
                model = parse_object({**obj, "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup"}, key)
                assert isinstance(model, PodGroup)
                entry.model = model
                entry.errors = [str(e) for e in model.validate_spec()] + gang_size_errors(
                    model, self.config.max_gang_pods
                )
            except ManifestError as exc:
                entry.errors = [str(exc)]
            self.pgs[key] = entry
            self._dirty.add(key)
            if old is None or _unstamped(old.sig) != _unstamped(sig):
                self._changed()

    def on_upstream_podgroup(self, kind: str, key: str, obj: dict[str, Any]) -> None:
        """An upstream PodGroup: re-read when anything but its status changed (kube-scheduler may write that)."""
        with self.lock:
            old = self.upstream.get(key)
            if kind == DELETE:
                if self.upstream.pop(key, None) is not None:
                    self._dirty.add(key)
                    self._changed()
                return
            meta = obj.get("metadata") or {}
            sig = (meta.get("uid"), meta.get("generation"), _freeze(meta.get("labels")))
            if old is not None and old.sig == sig:
                old.raw = obj
                return
            wl = upstream.workload_name(obj)
            self.upstream[key] = UpstreamEntry(key, obj, f"{meta.get('namespace', '')}/{wl}" if wl else None, sig)
            self._dirty.add(key)
            self._changed()

    def on_workload(self, kind: str, key: str, obj: dict[str, Any]) -> None:
        """A Workload: only its labels matter (the queue label of the PodGroups made from it)."""
        with self.lock:
            labels = {} if kind == DELETE else dict((obj.get("metadata") or {}).get("labels") or {})
            if kind == DELETE:
                if self.workload_labels.pop(key, None) is None:
                    return
            elif self.workload_labels.get(key) == labels:
                return
            else:
                self.workload_labels[key] = labels
            for entry in self.upstream.values():
                if entry.workload == key:
                    entry.template = None
                    self._dirty.add(entry.key)
            self._changed()

    def on_queue(self, kind: str, key: str, obj: dict[str, Any]) -> None:
        with self.lock:
            old = self.queues.get(key)
            if kind == DELETE:
                if old is not None:
                    del self.queues[key]
                    self._changed()
                return
            meta = obj.get("metadata") or {}
            # the generation and the one annotation the scheduler reads (a metadata change bumps no generation)
            sig = (
                meta.get("uid"),
                meta.get("generation"),
                (meta.get("annotations") or {}).get(c.DEFAULT_PREEMPTIBILITY),
            )
            if old is not None and old.sig == sig:
                old.raw = obj
                return
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
            self.queues[key] = entry
            self._changed()

    # --- overlays (scheduler thread, binder threads) -------------------------------------------------------------

    def assume(self, key: str, uid: str, node: str) -> bool:
        """Record a binding about to be queued; False if the pod is already bound or assumed (never bind twice).

        It holds while the binding waits in the binder's queue (thousands may wait behind each other in a fill) and
        for ``ASSUME_TTL`` once the API server has answered (:meth:`sent`), or until :meth:`forget`."""
        with self.lock:
            entry = self.pods.get(key)
            if entry is None or entry.uid != uid or entry.node or key in self.assumed:
                return False
            self.assumed[key] = Assumed(node, uid, math.inf)
            self._touch(key)
            return True

    def sent(self, key: str, uid: str) -> None:
        """The API server answered the binding: the watch should confirm it within ``ASSUME_TTL``."""
        with self.lock:
            a = self.assumed.get(key)
            if a is not None and a.uid == uid:
                a.until = time.monotonic() + ASSUME_TTL

    def assume_many(self, binds: list[tuple[str, str, str]]) -> list[bool]:
        """``assume`` for a cycle's (key, uid, node) bindings under one lock."""
        with self.lock:
            return [self.assume(key, uid, node) for key, uid, node in binds]

    def forget(self, key: str, uid: str) -> None:
        """A binding failed: the pod is pending again."""
        with self.lock:
            a = self.assumed.get(key)
            if a is not None and a.uid == uid:
                del self.assumed[key]
                self._touch(key)
                self._changed()

    def mark_evicting(self, key: str, uid: str) -> bool:
        with self.lock:
            entry = self.pods.get(key)
            if entry is None or entry.uid != uid or entry.deleting or key in self.evicting:
                return False
            self.evicting[key] = time.monotonic() + EVICT_TTL
            self._touch(key)
            return True

    def unmark_evicting(self, key: str) -> None:
        with self.lock:
            if self.evicting.pop(key, None) is not None:
                self._touch(key)
                self._changed()

    def inflight(self) -> int:
        with self.lock:
            return len(self.assumed)

    # --- snapshot ------------------------------------------------------------------------------------------------

    def _template(self, pg: PgEntry) -> s.Job | None:
        if pg.model is None or pg.errors:
            return None
        if pg.template is None or pg.pc_generation != self.pc_generation:
            problems: list[str] = []
            job = job_from_podgroup(pg.model, (), self.priority_classes, problems)
            pclass = job.priority_class
            if pclass not in self.priority_classes and self.global_default is not None:
                job.priority = self.global_default
            stale = pg.model.metadata.annotations.get(c.STALE_SINCE)
            job.stale_since = parse_time(stale)
            pg.template = job
            pg.pc_generation = self.pc_generation
        return pg.template

    def _upstream_template(self, entry: UpstreamEntry) -> upstream.UpstreamTemplate | None:
        if entry.template is None or entry.pc_generation != self.pc_generation:
            labels = self.workload_labels.get(entry.workload) if entry.workload else None
            entry.template, entry.errors = upstream.template(
                entry.raw, labels, self.priority_classes, self.global_default, self.config.max_gang_pods
            )
            entry.pc_generation = self.pc_generation
        return entry.template

    def _build_upstream_job(self, key: str, tmpl: upstream.UpstreamTemplate) -> tuple[s.Job, s.Job, int, int]:
        """:meth:`_build_job`, then what the pods settle: the queue label and the priority when the PodGroup and
        its Workload say nothing (the pods of one gang normally share both; the first pod by name decides the
        queue, the highest priority wins)."""
        job, _, active, pending = self._build_job(key, tmpl.job)
        members = sorted((self.members.get(key) or {}).values(), key=lambda p: p.key)
        if tmpl.queue_from_pods:
            queue = next((q for p in members if (q := ((p.raw[0] or {}).get("labels") or {}).get(c.QUEUE_LABEL))), None)
            job.queue = queue or c.DEFAULT_QUEUE
        if tmpl.priority_from_pods:
            values = [v for p in members if isinstance(v := (p.raw[1] or {}).get("priority"), int)]
            if values:
                job.priority = max(values)
        return job, tmpl.job, active, pending

    def upstream_queue(self, key: str) -> str | None:
        """The queue an upstream gang was last built with (its PodGroup, Workload or pods decide); None if unknown."""
        with self.lock:
            built = self._jobs.get(key) if key in self.upstream else None
            return built[0].queue if built is not None else None

    def set_ray_activity(self, facts: Mapping[str, s.RayActivity]) -> None:
        """Ray's latest idle/busy answer per pod key; pods left out have none."""
        with self.lock:
            for key in set(self.ray_activity) ^ set(facts) | {k for k in facts if self.ray_activity.get(k) != facts[k]}:
                self._touch(key)
            self.ray_activity = dict(facts)

    def clear_overlays(self) -> None:
        with self.lock:
            for key in list(self.assumed) + list(self.evicting):
                self._touch(key)
            self.assumed.clear()
            self.evicting.clear()

    def _build_job(self, key: str, tmpl: s.Job) -> tuple[s.Job, s.Job, int, int]:
        job = copy.copy(tmpl)
        pods: list[s.Pod] = []
        active = pending = 0
        for pkey, p in (self.members.get(key) or {}).items():
            spod = p.spod
            if spod is None:
                continue
            a = self.assumed.get(pkey)
            if a is not None and a.uid == p.uid:
                spod = replace(spod, phase=s.PodPhase.RUNNING, node=a.node)
            if pkey in self.evicting and spod.phase is s.PodPhase.RUNNING:
                spod = replace(spod, phase=s.PodPhase.RELEASING)
            act = self.ray_activity.get(pkey)
            if act is not None and spod.phase is s.PodPhase.RUNNING:
                spod = replace(spod, ray_activity=act)
            pods.append(spod)
            if spod.phase is s.PodPhase.RUNNING:
                active += 1
            elif spod.phase is s.PodPhase.PENDING:
                pending += 1
        job.pods = pods
        return job, tmpl, active, pending

    def build(
        self,
        config: s.SchedulerConfig,
        now: float | None = None,
        extra: Mapping[str, list[s.Pod]] | None = None,
    ) -> SnapshotView:
        """Assemble the core's Snapshot. Incremental: only jobs whose pods, PodGroup or overlays changed since the
        last build are rebuilt; the core never mutates a snapshot, so unchanged jobs are shared between cycles.
        ``extra``: pods that do not exist, added to their jobs for this snapshot only (a suspended gang's)."""
        mono = time.monotonic()
        with self.lock:
            for key in [k for k, a in self.assumed.items() if a.until < mono]:
                log.warning("binding of %s not confirmed in %.0fs; treating it as pending again", key, ASSUME_TTL)
                del self.assumed[key]
                self._touch(key)
            for key in [k for k, until in self.evicting.items() if until < mono]:
                del self.evicting[key]
                self._touch(key)
            dirty = self._dirty
            self._dirty = set()
            jobs: list[s.Job] = []
            invalid: dict[str, list[str]] = {}
            active: dict[str, int] = {}
            pending = 0
            valid: set[str] = set()
            for key, pg in self.pgs.items():
                if not self.schedulable_namespace(pg.namespace):
                    continue
                tmpl = self._template(pg)
                if tmpl is None:
                    invalid[key] = pg.errors
                    continue
                bad_pods = self.problems.get(key)
                if bad_pods:
                    invalid[key] = sorted({text for texts in bad_pods.values() for text in texts})[:5]
                    continue
                valid.add(key)
                built = self._jobs.get(key)
                if built is None or key in dirty or built[1] is not tmpl:
                    built = self._jobs[key] = self._build_job(key, tmpl)
                if extra and key in extra:
                    jobs.append(replace(built[0], pods=[*built[0].pods, *extra[key]]))
                else:
                    jobs.append(built[0])
                if built[2]:
                    active[key] = built[2]
                pending += built[3]
            for key, entry in self.upstream.items():
                if not self.schedulable_namespace(key.partition("/")[0]):
                    continue
                if key in self.pgs:
                    continue  # a KAI PodGroup of the same name: its pods are that gang's
                utmpl = self._upstream_template(entry)
                if utmpl is None:
                    invalid[key] = entry.errors
                    continue
                bad_pods = self.problems.get(key)
                if bad_pods:
                    invalid[key] = sorted({text for texts in bad_pods.values() for text in texts})[:5]
                    continue
                valid.add(key)
                built = self._jobs.get(key)
                if built is None or key in dirty or built[1] is not utmpl.job:
                    built = self._jobs[key] = self._build_upstream_job(key, utmpl)
                if extra and key in extra:
                    jobs.append(replace(built[0], pods=[*built[0].pods, *extra[key]]))
                else:
                    jobs.append(built[0])
                if built[2]:
                    active[key] = built[2]
                pending += built[3]
            for key in [k for k in self._jobs if k not in valid]:
                del self._jobs[key]
            used = {node: list(u) for node, u in self.foreign.items()}
            for key, group in self.members.items():
                if key in valid:
                    continue
                for p in group.values():  # ours, but its PodGroup is missing or invalid: it still holds its node
                    if p.node and not p.terminal:
                        u = used.setdefault(p.node, [0.0, 0.0, 0.0, 0.0])
                        u[0] += p.request.gpu
                        u[1] += p.request.cpu
                        u[2] += p.request.memory
                        u[3] += 1
            nodes = []
            for name, node in self.nodes.items():
                usage = used.get(name)
                if usage is not None:
                    node = replace(
                        node,
                        allocatable=node.allocatable - s.Resources(usage[0], usage[1], usage[2]),
                        max_pods=max(0, node.max_pods - int(usage[3])),
                    )
                nodes.append(node)
            queues = []
            bad_queues: dict[str, list[str]] = {}
            for name, q in self.queues.items():
                if q.queue is not None:
                    queues.append(q.queue)
                else:
                    bad_queues[name] = q.errors
            by_uid = dict(self.by_uid)
        snap = s.Snapshot(
            nodes=sorted(nodes, key=lambda n: n.name),
            queues=queues,
            jobs=jobs,
            now=time.time() if now is None else now,
            config=config,
        )
        if self.dra is not None:
            snap = self.dra.attach(snap)
        return SnapshotView(snap, by_uid, invalid, bad_queues, active, pending)


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


def _pod_fingerprint(obj: dict[str, Any]) -> tuple[Any, ...]:
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


def _node_sig(n: s.Node) -> tuple[Any, ...]:
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


def _unstamped(sig: tuple[Any, ...]) -> tuple[Any, ...]:
    """A PodGroup's signature without the timestamps the scheduler itself writes after acting: re-read, but no
    reason to wake the loop (a burst of bindings would otherwise trigger a cycle per second of stamps)."""
    return (*sig[:2], tuple(kv for kv in sig[2] if kv[0] not in OWN_STAMPS), *sig[3:])


def _freeze(d: dict[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((d or {}).items()))

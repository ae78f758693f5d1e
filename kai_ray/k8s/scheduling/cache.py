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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from kai_ray import constants as c
from kai_ray.bridge import node_from_api
from kai_ray.k8s.base.informer import DELETE
from kai_ray.k8s.config import OperatorConfig
from kai_ray.k8s.ray.elastic import SUSPEND_ANNOTATION
from kai_ray.k8s.scheduling import upstream_gangs
from kai_ray.k8s.scheduling.changes import ChangeRecorder
from kai_ray.k8s.scheduling.dra_claims import DraStore
from kai_ray.k8s.scheduling.entries import (
    Assumed,
    PgEntry,
    PodEntry,
    QueueEntry,
    SnapshotView,
    UpstreamEntry,
    bound_entry,
    charge,
    freeze,
    job_template,
    node_sig,
    nodes_with_room,
    only_deleting_differs,
    pg_entry,
    pod_entry,
    pod_fingerprint,
    queue_entry,
    stamped_entry,
    unstamped,
)
from kai_ray.scheduler import snapshot as s

log = logging.getLogger(__name__)

Built = tuple[s.Job, s.Job, int, int]  # a job as last built: (job, the template it was built from, active, pending)


ASSUME_TTL = 30.0  # seconds a binding the API server answered stays assumed until the watch confirms it
EVICT_TTL = 60.0


class SchedulerCache:
    def __init__(
        self, config: OperatorConfig, on_change: Callable[[], None] = lambda: None, dra: DraStore | None = None
    ) -> None:
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
        self.node_generation = 0  # node changes seen (a release plan made before one is not bound early)
        self.namespaces = set(config.namespaces)
        # incremental snapshot state: members per job, built jobs, foreign usage per node
        self.members: dict[str, dict[str, PodEntry]] = {}
        self.by_uid: dict[str, PodEntry] = {}
        self.foreign: dict[str, list[float]] = {}
        self.on_nodes: dict[str, set[str]] = {}  # node -> keys of the pods that name it (bind on release reads it)
        self._jobs: dict[str, Built] = {}  # key -> (job, template used, active, pending)
        self._dirty: set[str] = set()
        self.suspended: set[str] = set()  # PodGroups whose owner kai-ray suspended (kai-ray.io/suspended)
        self.problems: dict[str, dict[str, tuple[str, ...]]] = {}  # job -> pod key -> bad fields of the pod
        self.dra = dra  # DRA devices and claims
        self.upstream: dict[str, UpstreamEntry] = {}  # upstream PodGroups by "<namespace>/<name>"
        self.workload_labels: dict[str, dict[str, str]] = {}  # their Workloads' labels (the queue label)
        self.recorder = ChangeRecorder()  # what changed since the last cycle, for the leader's kept session

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
                    self.node_generation += 1
                    self.recorder.nodes()
                    self._changed()
                return
            node = node_from_api(obj)
            old = self.nodes.get(key)
            self.nodes[key] = node
            if old is None or node_sig(old) != node_sig(node):
                self.node_generation += 1
                self.recorder.nodes()
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
                self.recorder.everything()
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
            raw = pod_fingerprint(obj)
            if old is not None and old.raw == raw:
                return  # e.g. the kubelet (KWOK) reporting Running: nothing the core reads changed
            entry = (bound_entry(old, raw) or stamped_entry(old, raw)) if old is not None else None
            if entry is None:
                entry = pod_entry(key, obj, self.config.scheduler_name, self.namespaces)
            entry.raw = raw
            self_evicted = key in self.evicting
            if old is not None:
                self._unindex(old)
                if old.uid != entry.uid:
                    self.uid_to_key.pop(old.uid, None)
                    self.assumed.pop(key, None)
                    self.evicting.pop(key, None)
            self.pods[key] = entry
            self.uid_to_key[entry.uid] = key
            self._index(entry)
            relevant = (old is None or old.sig != entry.sig) and self._may_matter(old, entry, self_evicted)
            a = self.assumed.get(key)
            if a is not None and (entry.node or entry.terminal or a.uid != entry.uid):
                del self.assumed[key]  # the watch now tells the truth
                if entry.node == a.node and old is not None and old.sig[1:] == entry.sig[1:]:  # all but the node
                    relevant = False  # confirmed exactly what we assumed
            if entry.deleting or entry.terminal:
                self.evicting.pop(key, None)
            if relevant:
                self._changed()

    def _may_matter(self, old: PodEntry | None, new: PodEntry, self_evicted: bool) -> bool:
        """Whether a pod's change can alter a cycle's decisions, so that it is worth waking the loop for. Two
        changes cannot, and each used to cost a whole cycle (seconds at thousands of nodes) on the way of a
        preemption: a pod that holds no node and whose PodGroup does not exist yet (the podgrouper creates it next,
        and that wakes the loop), and a pod this scheduler is evicting that now says it is being deleted (the
        eviction overlay already showed it as releasing). A pod becoming Ready does not either: after a fill at
        thousands of nodes the kubelets' Ready updates kept the loop cycling for minutes. The change is still
        recorded: the next cycle reads it."""
        key = new.job_key
        unplaced = new.node is None and (old is None or old.node is None)
        if unplaced and key is not None and key not in self.pgs and key not in self.upstream:
            return old is not None and old.job_key != key
        if self_evicted and old is not None and new.deleting and not old.deleting:
            return not only_deleting_differs(old.sig, new.sig)
        # becoming Ready only lifts a ready-timeout, whose clock keeps the periodic cycle going
        return old is None or new.sig.ready is not True or old.sig._replace(ready=True) != new.sig

    def _index(self, p: PodEntry) -> None:
        if p.node:
            self.on_nodes.setdefault(p.node, set()).add(p.key)
        if p.job_key is not None:
            self.members.setdefault(p.job_key, {})[p.key] = p
            if p.problems and not p.terminal:
                self.problems.setdefault(p.job_key, {})[p.key] = p.problems
            if p.spod is not None:
                self.by_uid[p.spod.uid] = p
            self._dirty.add(p.job_key)
        elif p.node and not p.terminal:
            charge(self.foreign, p.node, p)

    def _unindex(self, p: PodEntry) -> None:
        if p.node:
            keys = self.on_nodes.get(p.node)
            if keys is not None:
                keys.discard(p.key)
                if not keys:
                    del self.on_nodes[p.node]
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
        elif p.node and p.node in self.foreign and not p.terminal:
            left = charge(self.foreign, p.node, p, -1)
            if left <= 0:
                del self.foreign[p.node]

    def _touch(self, key: str) -> None:
        entry = self.pods.get(key)
        if entry is not None and entry.job_key is not None:
            self._dirty.add(entry.job_key)

    def on_podgroup(self, kind: str, key: str, obj: dict[str, Any]) -> None:
        with self.lock:
            old = self.pgs.get(key)
            if kind == DELETE:
                self.suspended.discard(key)
                self.recorder.job(key)
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
                freeze(meta.get("annotations")),
                freeze(meta.get("labels")),
            )
            if old is not None and old.sig == sig:
                old.raw = obj  # status only: nothing the core reads
                return
            entry = self.pgs[key] = pg_entry(key, obj, sig, self.config.max_gang_pods)
            self._template(entry)  # now, so that its parsed model need not be kept until the next cycle
            self._dirty.add(key)
            if old is None or unstamped(old.sig) != unstamped(sig):
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
            sig = (meta.get("uid"), meta.get("generation"), freeze(meta.get("labels")))
            if old is not None and old.sig == sig:
                old.raw = obj
                return
            wl = upstream_gangs.workload_name(obj)
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
            # the generation and the metadata the scheduler reads (a metadata change bumps no generation)
            sig = (
                meta.get("uid"),
                meta.get("generation"),
                (meta.get("annotations") or {}).get(c.DEFAULT_PREEMPTIBILITY),
                (meta.get("labels") or {}).get(c.QUEUE_ADMISSION_GATING_LABEL),
            )
            if old is not None and old.sig == sig:
                old.raw = obj
                return
            self.queues[key] = queue_entry(key, obj, sig)
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
        if not pg.parsed or pg.errors:
            return None
        if pg.template is None or pg.pc_generation != self.pc_generation:
            model = pg.model
            assert model is not None
            pg.template = job_template(model, self.priority_classes, self.global_default)
            pg.pc_generation = self.pc_generation
            pg.kept = None  # read again from raw if the priority classes change
        return pg.template

    def _upstream_template(self, entry: UpstreamEntry) -> upstream_gangs.UpstreamTemplate | None:
        if entry.template is None or entry.pc_generation != self.pc_generation:
            labels = self.workload_labels.get(entry.workload) if entry.workload else None
            entry.template, entry.errors = upstream_gangs.template(
                entry.raw, labels, self.priority_classes, self.global_default, self.config.max_gang_pods
            )
            entry.pc_generation = self.pc_generation
        return entry.template

    def _build_upstream_job(self, key: str, tmpl: upstream_gangs.UpstreamTemplate) -> Built:
        """:meth:`_build_job`, then what the pods settle (:func:`~kai_ray.k8s.scheduling.upstream_gangs.settle`)."""
        job, _, active, pending = self._build_job(key, tmpl.job)
        members = sorted((self.members.get(key) or {}).values(), key=lambda p: p.key)
        upstream_gangs.settle(job, tmpl, [(p.raw[0] or {}, p.raw[1] or {}) for p in members])
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

    def _gangs(self) -> Iterator[tuple[str, str, PgEntry | UpstreamEntry]]:
        """Every PodGroup a job may come from, KAI's and upstream ones alike (key, namespace, entry)."""
        for key, pg in self.pgs.items():
            yield key, pg.namespace, pg
        for key, entry in self.upstream.items():
            if key not in self.pgs:  # a KAI PodGroup of the same name: its pods are that gang's
                yield key, key.partition("/")[0], entry

    def _gang_template(self, entry: PgEntry | UpstreamEntry) -> tuple[s.Job | None, list[str]]:
        """A PodGroup's job template, or None and why it is invalid."""
        if isinstance(entry, PgEntry):
            return self._template(entry), entry.errors
        utmpl = self._upstream_template(entry)
        return (utmpl.job if utmpl is not None else None), entry.errors

    def _gang_job(self, key: str, entry: PgEntry | UpstreamEntry, tmpl: s.Job) -> Built:
        """The job of a valid PodGroup, from its template and its pods (an upstream gang's pods also settle its
        queue and priority)."""
        if isinstance(entry, UpstreamEntry) and entry.template is not None:
            return self._build_upstream_job(key, entry.template)
        return self._build_job(key, tmpl)

    def _build_job(self, key: str, tmpl: s.Job) -> Built:
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
            self.recorder.jobs(dirty)  # rebuilt now (new objects), told again to the next cycle's kept session
            jobs: list[s.Job] = []
            invalid: dict[str, list[str]] = {}
            active: dict[str, int] = {}
            pending = 0
            valid: set[str] = set()
            for key, ns, entry in self._gangs():
                if not self.schedulable_namespace(ns):
                    continue
                tmpl, errors = self._gang_template(entry)
                if tmpl is None:
                    invalid[key] = errors
                    continue
                bad_pods = self.problems.get(key)
                if bad_pods:
                    invalid[key] = sorted({text for texts in bad_pods.values() for text in texts})[:5]
                    continue
                valid.add(key)
                built = self._jobs.get(key)
                if built is None or key in dirty or built[1] is not tmpl:
                    built = self._jobs[key] = self._gang_job(key, entry, tmpl)
                if extra and key in extra:
                    jobs.append(replace(built[0], pods=[*built[0].pods, *extra[key]]))
                else:
                    jobs.append(built[0])
                if built[2]:
                    active[key] = built[2]
                pending += built[3]
            for key in [k for k in self._jobs if k not in valid]:
                del self._jobs[key]
            held = [p for key, group in self.members.items() if key not in valid for p in group.values()]
            nodes = nodes_with_room(self.nodes, self.foreign, held)
            queues = []
            bad_queues: dict[str, list[str]] = {}
            for name, q in self.queues.items():
                if q.queue is not None:
                    queues.append(q.queue)
                else:
                    bad_queues[name] = q.errors
            by_uid = dict(self.by_uid)
            node_generation = self.node_generation
        snap = s.Snapshot(
            nodes=sorted(nodes, key=lambda n: n.name),
            queues=queues,
            jobs=jobs,
            now=time.time() if now is None else now,
            config=config,
        )
        if self.dra is not None:
            snap = self.dra.attach(snap)
        return SnapshotView(snap, by_uid, invalid, bad_queues, active, pending, node_generation)

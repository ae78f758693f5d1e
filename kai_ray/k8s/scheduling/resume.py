"""Gangs that kai-ray suspended stay in the scheduler's picture as pending gangs, and are resumed when admitted.

Why: a suspended RayJob (or RayCluster) has no pods, so a scheduler that only sees pods would forget it, and nothing
would ever lift the suspend. So, while the owner is suspended by kai-ray (its PodGroup carries
:data:`~kai_ray.k8s.ray.elastic.SUSPEND_ANNOTATION`), KubeRay has finished suspending it and none of its pods is left,
the pods KubeRay would create (:func:`kai_ray.podgrouper.pod_templates`, stamped like the podgrouper stamps them) join
the snapshot as *virtual* pending pods: the core weighs the gang like any pending gang (queue order, fair share,
quota, reclaim), never binds them (they do not exist), and when it places the whole gang without waiting for
victims, the operator lifts ``spec.suspend`` (:func:`~kai_ray.k8s.ray.elastic.apply_resume`) so KubeRay creates a fresh
cluster. Until that cluster's pods exist, the missing ones stay virtual, so the room the core found is not given away
in the meantime.

Against flapping: a gang is not considered for :data:`RESUME_HOLDOFF` seconds after it was suspended (so the pods of
its preemptor are pending and ordered first), nor while KubeRay is still suspending it or its pods are terminating; a
resumed gang is protected by the queues' min-runtimes like any other (its start time is stamped when it binds).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kai_ray import constants as c
from kai_ray.api.loader import ManifestError, parse_object
from kai_ray.api.meta import Container
from kai_ray.api.podgroup import PodGroup
from kai_ray.api.ray import RayCluster, RayJob, RayService
from kai_ray.bridge import parse_time, pod_from_api
from kai_ray.k8s.base.informer import DELETE, Informer
from kai_ray.k8s.base.isolate import Guard
from kai_ray.k8s.base.rest import RAY_PLURALS, Kube, ray_path, resource_version
from kai_ray.k8s.ray.elastic import SUSPEND_ANNOTATION, apply_resume, record_on_podgroup
from kai_ray.k8s.ray.rayplan import NOTHING_TO_DO, ray_owner
from kai_ray.k8s.scheduling.cache import SchedulerCache
from kai_ray.k8s.scheduling.entries import PgEntry
from kai_ray.podgrouper import PodgrouperConfig, effective_cluster_spec, gang_too_large, pod_templates, stamp
from kai_ray.podgrouper.pods import SUBMITTER_RESOURCES
from kai_ray.scheduler import snapshot as s
from kai_ray.scheduler.decisions import CycleResult

log = logging.getLogger(__name__)

VIRTUAL = "kai-ray-virtual"  # marks the uid of a pod that does not exist (yet)
RESUME_HOLDOFF = 5.0  # seconds after a suspend before the gang may be resumed
RESUME_RESERVE = 120.0  # seconds the room of a resumed gang stays reserved while KubeRay creates its pods
RESUME_RETRY = 5.0  # seconds before a failed resume is tried again
STALE_RECORD_AFTER = 30.0  # seconds after which a suspend record on a running owner is removed


def is_virtual(uid: str) -> bool:
    return f"/{VIRTUAL}/" in uid


def suspend_settled(kind: str, owner: dict[str, Any]) -> bool:
    """KubeRay has finished suspending the owner (a RayJob in ``Suspending`` still deletes its cluster)."""
    if not (owner.get("spec") or {}).get("suspend"):
        return False
    status = owner.get("status") or {}
    if kind == "RayJob":
        return status.get("jobDeploymentStatus") == "Suspended"
    if kind == "RayCluster":
        return any(
            cond.get("type") == "RayClusterSuspended" and cond.get("status") == "True"
            for cond in status.get("conditions") or []
        )
    return True


def owner_pods(
    kind: str,
    owner: dict[str, Any],
    podgroup: PodGroup,
    job_key: str,
    config: PodgrouperConfig,
    *,
    every_group: bool = False,
) -> list[s.Pod]:
    """The core's view of the pods KubeRay would create for ``owner``, stamped for ``podgroup`` (subgroup labels),
    with virtual uids. ``every_group`` gives one pod per group instead, scaled to zero or not (templates for headroom
    probes). Work is per group: each group's pod is read once and copied. Raises ManifestError when the owner cannot
    be read, ValueError when the gang has more than ``config.max_gang_pods`` pods."""
    raw = dict(owner)
    raw["kind"] = kind
    raw.setdefault("apiVersion", "ray.io/v1")
    raw["spec"] = {k: v for k, v in (owner.get("spec") or {}).items() if k != "suspend"}  # the pods once resumed
    obj = parse_object(raw, f"{kind} {(owner.get('metadata') or {}).get('name')}")
    assert isinstance(obj, RayCluster | RayJob | RayService)
    templates = pod_templates(obj, config=config)
    total = sum(t.count for t in templates)
    if not every_group and total > config.max_gang_pods:
        raise ValueError(gang_too_large(obj, effective_cluster_spec(obj), total, config.max_gang_pods))
    out: list[s.Pod] = []
    for t in templates:
        n = 1 if every_group else t.count
        if n == 0:
            continue
        pod = t.pod
        if isinstance(obj, RayJob) and obj.submission_mode == "SidecarMode" and t.group == c.RAY_HEAD_GROUP:
            pod.spec.containers.append(Container(name="ray-job-submitter", resources=SUBMITTER_RESOURCES))
        st = stamp(pod, podgroup)
        pod.metadata.labels.update(st.labels)
        pod.metadata.annotations.update(st.annotations)
        pod.metadata.uid = f"{job_key}/{VIRTUAL}/{len(out)}"
        first = pod_from_api(pod, job_key)
        out.append(first)
        for i in range(1, n):
            out.append(dataclasses.replace(first, uid=f"{job_key}/{VIRTUAL}/{len(out)}", name=t.name(i)))
    return out


@dataclass
class _Gang:
    """What we know of one suspended (or just resumed) gang."""

    kind: str
    name: str
    owner_rv: int = 0
    pods: list[s.Pod] = field(default_factory=list)
    error: str = ""
    resumed_at: float | None = None  # monotonic; set while the resume is in flight or reserving room
    retry_at: float = 0.0


@dataclass
class Resume:
    job: str
    kind: str
    namespace: str
    name: str


class SuspendedGangs:
    """Virtual pods for suspended gangs, and the resume decision after each cycle (scheduler loop thread).

    ``submit(key, work)`` runs API work off the loop (the operator's dispatcher); ``wake()`` asks for a cycle.
    """

    def __init__(
        self,
        kube: Kube,
        cache: SchedulerCache,
        *,
        kinds: tuple[str, ...],
        namespaces: tuple[str, ...],
        grouper_config: PodgrouperConfig,
        submit: Callable[[str, Callable[[], None]], None],
        wake: Callable[[], None],
        is_leader: Callable[[], bool] = lambda: True,
    ) -> None:
        self.kube = kube
        self.cache = cache
        self.kinds = kinds
        self.grouper_config = grouper_config
        self.submit = submit
        self.wake = wake
        self.is_leader = is_leader
        self.owners: dict[str, list[Informer]] = {k: [] for k in c.RAY_KINDS}
        for ns in namespaces or (None,):
            for kind in c.RAY_KINDS:
                self.owners[kind].append(
                    Informer(
                        kube,
                        ray_path(kind, ns),
                        name=f"{RAY_PLURALS[kind]}-{ns or 'all'}",
                        handler=self._on_owner,
                        missing_ok=True,
                    )
                )
        self.informers = [i for infs in self.owners.values() for i in infs]
        self._gangs: dict[str, _Gang] = {}
        self._templates: dict[str, tuple[int, dict[str, s.Pod]]] = {}
        self._dropping: set[str] = set()
        self.guard = Guard("suspended gang", log)
        self.resumed: list[tuple[str, float]] = []  # (job, monotonic) of every resume sent, newest last (bounded)

    # --- owners -------------------------------------------------------------------------------------------------

    def _on_owner(self, event: str, key: str, obj: dict[str, Any]) -> None:
        if event != DELETE and (obj.get("spec") or {}).get("suspend"):
            self.wake()  # e.g. KubeRay finished suspending: the gang may now be considered

    def owner(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        for inf in self.owners.get(kind, []):
            obj = inf.get(f"{namespace}/{name}")
            if obj is not None:
                return obj
        return None

    # --- before the cycle ---------------------------------------------------------------------------------------

    def virtual_pods(self, now_wall: float | None = None) -> dict[str, list[s.Pod]]:
        """Job key -> virtual pods to add to this cycle's snapshot."""
        now_wall = time.time() if now_wall is None else now_wall
        mono = time.monotonic()
        out: dict[str, list[s.Pod]] = {}
        with self.cache.lock:
            suspended = {k: self.cache.pgs.get(k) for k in self.cache.suspended}
            live = {k: self._live_by_subgroup(k) for k in set(suspended) | set(self._gangs)}
        for key, pg in suspended.items():
            pods = self.guard(key, self._waiting_gang, key, pg, bool(live.get(key)), now_wall, mono, default=None)
            if pods is not None:
                out[key] = pods
        for key, gang in list(self._gangs.items()):
            if gang.resumed_at is None:
                if key not in suspended:
                    del self._gangs[key]  # the suspend was lifted by someone else
                continue
            if mono - gang.resumed_at > RESUME_RESERVE:
                del self._gangs[key]
                continue
            have = dict(live.get(key) or {})
            missing = []
            for p in gang.pods:  # the pods KubeRay has not created yet keep their room
                if have.get(p.subgroup, 0) > 0:
                    have[p.subgroup or ""] -= 1
                else:
                    missing.append(p)
            if not missing:
                del self._gangs[key]
                continue
            out[key] = missing
        return out

    def _waiting_gang(
        self, key: str, pg: PgEntry | None, has_pods: bool, now_wall: float, mono: float
    ) -> list[s.Pod] | None:
        """The virtual pods of one suspended gang that may be resumed now, or None."""
        if pg is None or not pg.parsed or (key in self._gangs and self._gangs[key].resumed_at is not None):
            return None
        record = _record(pg.raw)
        owner_ref = _owner_from_record(record) or ray_owner(pg.raw)
        if owner_ref is None or owner_ref[0] not in self.kinds:
            return None
        kind, name = owner_ref
        owner = self.owner(kind, pg.namespace, name)
        at = parse_time(str(record.get("at") or "")) if record else None
        if owner is not None and not (owner.get("spec") or {}).get("suspend"):
            self._drop_stale_record(key, pg.namespace, pg.name, at, now_wall, kind, name)
            return None
        if owner is None or not suspend_settled(kind, owner) or has_pods:
            return None
        if at is not None and now_wall - at < RESUME_HOLDOFF:
            return None  # just suspended: its preemptor goes first
        gang = self._gang(key, kind, name, owner, pg)
        if gang is None or mono < gang.retry_at:
            return None
        return gang.pods

    def _drop_stale_record(
        self, key: str, namespace: str, name: str, at: float | None, now_wall: float, kind: str, owner: str
    ) -> None:
        """The owner runs again (someone lifted the suspend, or our resume's record removal failed): the record is
        stale, and a RayJob gets its own ``shutdownAfterJobFinishes`` back
        (:func:`~kai_ray.k8s.ray.rayplan.plan_resume`).
        Not before :data:`STALE_RECORD_AFTER`, since the owner's watch event may lag the PodGroup's."""
        if key in self._dropping or (at is not None and now_wall - at < STALE_RECORD_AFTER):
            return
        self._dropping.add(key)

        def work() -> None:
            try:
                out = apply_resume(self.kube, kind, namespace, owner, reason="Unsuspended", podgroup=name)
                if out.code == NOTHING_TO_DO or not out.applied:
                    record_on_podgroup(self.kube, namespace, name, SUSPEND_ANNOTATION, None)
            except Exception as exc:
                log.info("dropping the stale suspend record of %s: %s", key, exc)
            finally:
                self._dropping.discard(key)

        self.submit(f"unsuspended/{key}", work)

    def _live_by_subgroup(self, key: str) -> dict[str | None, int]:
        counts: dict[str | None, int] = {}
        for p in (self.cache.members.get(key) or {}).values():
            if not p.terminal and p.spod is not None:
                counts[p.spod.subgroup] = counts.get(p.spod.subgroup, 0) + 1
        return counts

    def _gang(self, key: str, kind: str, name: str, owner: dict[str, Any], pg: PgEntry) -> _Gang | None:
        rv = resource_version(owner)
        gang = self._gangs.get(key)
        if gang is not None and gang.owner_rv == rv and gang.kind == kind:
            return gang if gang.pods else None
        gang = _Gang(kind, name, rv)
        model = pg.model  # parsed again from the stored object: only when the owner changed
        assert model is not None
        try:
            gang.pods = owner_pods(kind, owner, model, key, self.grouper_config)
        except (ManifestError, ValueError) as exc:
            gang.error = str(exc)
            log.warning("suspended %s %s: cannot build its pods to resume it: %s", kind, key, exc)
        self._gangs[key] = gang
        return gang if gang.pods else None

    def probe_templates(self, jobs: list[str]) -> dict[str, dict[str, s.Pod]]:
        """Per job, per worker subgroup, a pod as KubeRay would create it from the owner's template: the headroom
        probe for subgroups scaled to zero (which have no pod to copy)."""
        out: dict[str, dict[str, s.Pod]] = {}
        for key in jobs:
            with self.cache.lock:
                pg = self.cache.pgs.get(key)
            if pg is None or not pg.parsed:
                continue
            ref = ray_owner(pg.raw)
            owner = self.owner(ref[0], pg.namespace, ref[1]) if ref is not None else None
            if ref is None or owner is None:
                continue
            rv = resource_version(owner)
            hit = self._templates.get(key)
            if hit is not None and hit[0] == rv:
                out[key] = hit[1]
                continue
            found: dict[str, s.Pod] = {}
            model = pg.model  # parsed again from the stored object: only when the owner changed
            assert model is not None
            try:
                for p in owner_pods(ref[0], owner, model, key, self.grouper_config, every_group=True):
                    if not p.is_ray_head and p.subgroup and p.subgroup not in found:
                        found[p.subgroup] = p
            except (ManifestError, ValueError) as exc:
                log.info("headroom templates of %s: %s", key, exc)
            except Exception as exc:
                self.guard.failed(key, exc)
            self._templates[key] = (rv, found)
            if len(self._templates) > 5000:
                self._templates.clear()
            out[key] = found
        return out

    # --- after the cycle ----------------------------------------------------------------------------------------

    def after_cycle(self, result: CycleResult, injected: dict[str, list[s.Pod]]) -> list[Resume]:
        """Resume every suspended gang the core placed whole with nothing left to wait for."""
        out: list[Resume] = []
        binds: dict[str, list[bool]] = {}
        for b in result.binds:
            if b.job in injected:
                binds.setdefault(b.job, []).append(b.pipelined)
        for key in injected:
            gang = self._gangs.get(key)
            if gang is None or gang.resumed_at is not None:
                continue
            verdict = result.jobs.get(key)
            placed = binds.get(key) or []
            if verdict is None or not verdict.scheduled or not placed or any(placed):
                continue
            gang.resumed_at = time.monotonic()
            ns, _, pg_name = key.partition("/")
            out.append(Resume(key, gang.kind, ns, gang.name))
            self.submit(f"resume/{key}", partial(self._resume, out[-1], pg_name))
        return out

    def _resume(self, r: Resume, podgroup: str) -> None:
        if not self.is_leader():
            self._failed(r.job)
            return
        try:
            outcome = apply_resume(
                self.kube,
                r.kind,
                r.namespace,
                r.name,
                reason="Admitted",
                message="the scheduler admitted the gang again",
                podgroup=podgroup,
            )
            if outcome.applied and outcome.code == NOTHING_TO_DO:  # lifted already (an earlier try): drop the record
                record_on_podgroup(self.kube, r.namespace, podgroup, SUSPEND_ANNOTATION, None)
        except Exception as exc:
            log.warning("resume of %s %s/%s failed: %s", r.kind, r.namespace, r.name, exc)
            self._failed(r.job)
            return
        if not outcome.applied:
            log.warning("resume of %s %s/%s refused: %s", r.kind, r.namespace, r.name, outcome.message)
            self._failed(r.job)
            return
        log.info("resumed %s %s/%s: the scheduler admitted its gang", r.kind, r.namespace, r.name)
        self.resumed.append((r.job, time.monotonic()))
        del self.resumed[:-1000]

    def _failed(self, job: str) -> None:
        gang = self._gangs.get(job)
        if gang is not None:
            gang.resumed_at = None
            gang.retry_at = time.monotonic() + RESUME_RETRY
        self.wake()

    def clear(self) -> None:
        """Leadership lost: forget in-flight state (a new leader starts from the PodGroups' annotations)."""
        self._gangs.clear()


def _record(raw: dict[str, Any]) -> dict[str, Any]:
    text = ((raw.get("metadata") or {}).get("annotations") or {}).get(SUSPEND_ANNOTATION)
    if not text:
        return {}
    try:
        body = json.loads(text)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _owner_from_record(record: dict[str, Any]) -> tuple[str, str] | None:
    kind, _, name = str(record.get("owner") or "").partition("/")
    return (kind, name) if kind and name else None

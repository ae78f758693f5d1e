"""The podgrouper operator: pods of our scheduler and Ray CRs in, PodGroups and stamped pods out.

For each pod whose ``schedulerName`` is ours, it walks ``ownerReferences`` up to the top owner (Pod -> RayCluster ->
RayJob/RayService, through a batch Job for a RayJob's submitter), builds the PodGroup with the pure grouper
(:func:`kai_ray.podgrouper.group`, or a single-pod group when the top owner is not a Ray object), creates or updates
it keeping what KAI keeps, and then stamps the pod (``pod-group-name`` annotation, subgroup label) - in that order,
so the scheduler never sees a stamped pod without its group. Ray CRs are watched too: their PodGroup is created as
soon as the CR exists and follows spec changes; a CR that cannot be grouped gets a Warning Event naming the field and
is not retried until it changes (no crash loop, no hot loop).

In KAI-coexistence mode (``kai_coexistence``: KAI's scheduler schedules, kai-ray only groups) the Ray top owner and
every pod it stamps also get ``kai.scheduler/skip-podgrouper: "true"`` (with ``kai-ray.io/skip-podgrouper-by``, so
kai-ray does not mistake its own mark for a user's request), and KAI's podgrouper leaves them to us.

A K8sJobMode RayJob's submitter pod carries no Ray label: it is recognised by its owners (pod -> batch Job -> RayJob,
:func:`~kai_ray.podgrouper.is_submitter`) and stamped into the RayJob's ``submitter`` subgroup. KubeRay labels the
Jobs it creates (``app.kubernetes.io/created-by: kuberay-operator``), so those come from an informer filtered on that
label; any other Job (another controller's pods under our scheduler) is read with a GET, cached briefly.

Everything is level-triggered from informer caches through a keyed work queue, so restarts and duplicate events are
harmless: an up-to-date PodGroup and stamp cost no write.

A pod that is its own top owner is schedulable once its PodGroup exists (the scheduler knows the group's name from the
pod, :func:`~kai_ray.podgrouper.defaultgrouper.own_group_name`), so its stamp is off the critical path: it is written by
a
separate pool that waits while PodGroups are being created (the API server's CPU goes to creating groups and binding
pods first), at most :data:`STAMP_MAX_DELAY` seconds. Ray pods, and every pod in KAI-coexistence mode (where KAI's
components read the stamp), are stamped at once as before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from pydantic import ValidationError

from kai_ray import constants as c
from kai_ray.api.loader import ManifestError, parse_object
from kai_ray.api.meta import ObjectMeta, Pod
from kai_ray.api.podgroup import PodGroup
from kai_ray.api.ray import RayCluster, RayJob, RayService
from kai_ray.api.strict import LAST_APPLIED, object_unknown_fields
from kai_ray.k8s.base.events import NORMAL, WARNING, EventRecorder, object_ref
from kai_ray.k8s.base.informer import DELETE, Informer, wait_all_synced
from kai_ray.k8s.base.isolate import Guard
from kai_ray.k8s.base.leader import LeaderElector, LeaseConfig
from kai_ray.k8s.base.metrics import PodgrouperMetrics
from kai_ray.k8s.base.pruning import PruneGuard, strip
from kai_ray.k8s.base.rest import RAY_PLURALS, ApiError, Kube, podgroups_path, pods_path, ray_path, resource_version
from kai_ray.k8s.base.servingcert import shared_serving_cert
from kai_ray.k8s.base.slim import slim_pod
from kai_ray.k8s.base.workqueue import Dispatcher
from kai_ray.k8s.config import OperatorConfig
from kai_ray.k8s.podgrouping import admission
from kai_ray.k8s.podgrouping.quotagate import quota_gate
from kai_ray.k8s.podgrouping.upstream_writer import UpstreamGangs
from kai_ray.k8s.ray.elastic import SUSPEND_ANNOTATION
from kai_ray.podgrouper import (
    SUBMITTER_JOB,
    GroupingError,
    PodgrouperConfig,
    PodStamp,
    group,
    is_submitter,
    placeholder_group,
    ray_resource_warnings,
    stamp,
    suspend_blocker,
)
from kai_ray.podgrouper.defaultgrouper import (
    GENERIC_OWNERS,
    controller_ref,
    differs,
    group_name_for_pod,
    has_skip_marks,
    merge_existing,
    own_group_name,
    refuses_zero_min_member,
    single_pod_group,
    skip_marks,
    skip_requested,
    update_body,
    without_zero_min_member,
)
from kai_ray.podgrouper.explain import explain
from kai_ray.podgrouper.upgrade import own_podgroup_name, service_cluster_group
from kai_ray.podgrouper.upstream import scheduling_group_patch

log = logging.getLogger(__name__)

COMPONENT = "kai-podgrouper"
MAX_OWNER_DEPTH = 8
STAMP_HOLDOFF = 0.5  # seconds without PodGroup writes before deferred stamps go
STAMP_MAX_DELAY = 10.0  # a deferred stamp waits at most this long for a quiet moment
STAMP_WORKERS = 8
OWNER_GRACE = 30.0  # seconds a pod's owner may be missing (created after it, watch lag) before it is explained
KUBERAY_JOBS = "app.kubernetes.io/created-by=kuberay-operator"  # the label KubeRay puts on its submitter Jobs


class OwnerError(Exception):
    """The owner chain cannot be followed yet (an owner is missing or its UID does not match); retried."""


class PodgrouperOperator:
    def __init__(self, config: OperatorConfig, kube: Kube | None = None) -> None:
        self.config = config.validate()
        self._owns_kube = kube is None
        self.kube = kube or Kube.connect(config.kubeconfig, config.context, pool_size=config.bind_workers + 24)
        base = PodgrouperConfig.kai_compatible() if config.kai_compatible_priorities else PodgrouperConfig()
        self.grouper_config = base.model_copy(
            update={
                "scheduler_name": config.scheduler_name,
                "queue_label_key": config.queue_label_key,
                "default_priority": {**base.default_priority, **config.default_priority},
                "max_gang_pods": config.max_gang_pods,
            }
        )
        self.metrics = PodgrouperMetrics()
        self.queue = Dispatcher("podgrouper", config.bind_workers)
        self.writer = Dispatcher("podgrouper-events", 2)
        self.stamper = Dispatcher(
            "podgrouper-stamps", STAMP_WORKERS, gate=self._stamps_may_go, gate_max_wait=STAMP_MAX_DELAY
        )
        self._last_group_write = 0.0
        self._deferred: dict[str, tuple[tuple[Any, ...], float]] = {}  # pod key -> (unstamped fingerprint, since)
        self._deferred_lock = threading.Lock()
        self.events = EventRecorder(
            self.kube, COMPONENT, config.identity, self.writer, counter=self.metrics.status_writes
        )
        self._leading = threading.Event()
        self._stop = threading.Event()
        self._local_pgs: dict[str, dict[str, Any]] = {}  # our own recent writes, until the watch catches up
        self._local_lock = threading.Lock()
        self._owner_cache: dict[tuple[str, str, str], tuple[float, dict[str, Any] | None]] = {}
        self._reported: dict[str, str] = {}  # Ray CR key -> last error reported (one Event per distinct error)
        self.guard = Guard("reconcile", log)
        self._orphans: dict[str, float] = {}  # pod key -> since when its owner chain cannot be followed
        self.owner_grace = OWNER_GRACE
        self._warned: dict[str, str] = {}  # Ray CR key -> admission warning given (once per distinct warning)
        self._fields_checked: dict[str, tuple[Any, ...]] = {}  # Ray CR key -> the version whose fields were checked
        self._explained: dict[str, tuple[Any, ...]] = {}  # Ray CR key -> the version whose gang was explained
        self._done: dict[str, tuple[Any, ...]] = {}  # pod key -> fingerprint of its last complete reconcile
        self._omit_zero_min = False  # the installed PodGroup CRD refuses minMember 0 (KAI v0.12): omit it
        self.pruned = PruneGuard()
        self.upstream = UpstreamGangs(self.kube) if config.upstream_gangs else None
        self.admission: admission.AdmissionServer | None = None
        self.quota_gate = quota_gate(self.kube, config, self.grouper_config.default_queue, self.owner_chain)
        self._priority_values: dict[str, int | None] = {}
        self.pods: list[Informer] = []
        self.pgs: list[Informer] = []
        self.ray: dict[str, list[Informer]] = {k: [] for k in c.RAY_KINDS}
        self.jobs: list[Informer] = []
        for ns in config.namespaces or (None,):
            sel = f"spec.schedulerName={config.scheduler_name}"
            label = ns or "all"
            self.pods.append(
                Informer(
                    self.kube,
                    pods_path(ns),
                    name=f"pods-{label}",
                    handler=self._on_pod,
                    field_selector=sel,
                    transform=slim_pod,
                )
            )
            self.pgs.append(
                Informer(self.kube, podgroups_path(ns), name=f"podgroups-{label}", handler=self._on_pg, missing_ok=True)
            )
            self.jobs.append(
                Informer(
                    self.kube,
                    f"/apis/batch/v1/namespaces/{ns}/jobs" if ns else "/apis/batch/v1/jobs",
                    name=f"kuberay-jobs-{label}",
                    label_selector=KUBERAY_JOBS,
                    transform=_slim_job,
                )
            )
            for kind in c.RAY_KINDS:
                self.ray[kind].append(
                    Informer(
                        self.kube,
                        ray_path(kind, ns),
                        name=f"{RAY_PLURALS[kind]}-{label}",
                        handler=self._ray_handler(kind),
                        missing_ok=True,
                    )
                )
        self.informers = [*self.pods, *self.pgs, *self.jobs, *(i for infs in self.ray.values() for i in infs)]
        self.elector: LeaderElector | None = None
        if config.leader_elect:
            name, lns = config.lease("podgrouper")
            self.elector = LeaderElector(
                self.kube,
                LeaseConfig(
                    name, lns, config.identity, config.lease_duration, config.renew_deadline, config.retry_period
                ),
                on_start=self._on_elected,
                on_stop=self._on_deposed,
            )

    # --- lifecycle ----------------------------------------------------------------------------------------------

    def start(self) -> PodgrouperOperator:
        self.metrics.serve(self.config.metrics_port, self.config.bind_address)
        for inf in self.informers:
            inf.start()
        if self.config.upstream_gangs or self.quota_gate is not None:
            self._serve_admission()
        self.queue.start()
        self.writer.start()
        self.stamper.start()
        if self.elector is not None:
            self.elector.start()
        else:
            threading.Thread(target=self._on_elected, name="podgrouper-start", daemon=True).start()
        return self

    def stop(self, release: bool = True) -> None:
        self._stop.set()
        self._leading.clear()
        if self.elector is not None:
            self.elector.stop(release=release)
        if self.admission is not None:
            self.admission.stop()
        self.queue.stop()
        self.stamper.stop()
        self.writer.stop()
        for inf in self.informers:
            inf.stop()
        if self._owns_kube:
            self.kube.reachability.close()
        self.metrics.close()

    def is_leader(self) -> bool:
        return self._leading.is_set()

    def _serve_admission(self) -> None:
        """Serve the admission webhook (every replica, one certificate) and point the API server at it."""
        cfg = self.config
        _, namespace = cfg.lease("podgrouper")
        if cfg.webhook_url:
            host = cfg.webhook_url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
            hosts = [host]
            client: dict[str, Any] = {"url": cfg.webhook_url}
        else:
            svc = cfg.webhook_service
            hosts = [f"{svc}.{namespace}.svc", f"{svc}.{namespace}.svc.cluster.local"]
            client = {"service": {"namespace": namespace, "name": svc, "path": admission.PATH, "port": 443}}
        cert = shared_serving_cert(self.kube, namespace, f"{cfg.webhook_service}-tls", hosts)
        routes: dict[str, admission.Decide] = {admission.PATH: self.admit} if cfg.upstream_gangs else {}
        if self.quota_gate is not None:
            routes[admission.GATE_PATH] = self.quota_gate.decide
        self.admission = admission.AdmissionServer(routes, cert, bind=cfg.bind_address, port=cfg.webhook_port).start()
        admission.register(
            self.kube, admission.webhook_configuration(client, cert.ca_pem, cfg.namespaces, paths=tuple(routes))
        )
        log.info("admission webhook on port %d: %s", self.admission.port, ", ".join(routes))

    def admit(self, raw: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
        """The admission decision for a Ray pod being created: the JSON patch naming its gang's upstream PodGroup."""
        meta = raw.setdefault("metadata", {})
        meta.setdefault("namespace", namespace)
        if not meta.get("name"):
            meta["name"] = f"{meta.get('generateName') or 'pod-'}admission"
        if (raw.get("spec") or {}).get("schedulerName") != self.config.scheduler_name:
            return []
        chain = self.owner_chain(raw)
        if any(skip_requested(o.get("metadata") or {}) for o in chain):
            return []
        top = chain[-1]
        kind = str(top.get("kind") or "")
        if top is raw or kind not in c.RAY_KINDS:
            return []
        desired = self._ray_group(kind, top, chain, Pod.model_validate(raw))
        if desired is None:
            return []
        if kind == "RayService" and self.config.upgrade_surge:
            desired = self._service_cluster_group(top, chain, desired)
        pclass = desired.spec.priority_class_name
        return scheduling_group_patch(raw, desired.metadata.name or "", pclass, self._priority_value(pclass))

    def _priority_value(self, name: str | None) -> int | None:
        """A PriorityClass's value (read once per class and remembered; None when it does not exist)."""
        if not name:
            return None
        if name not in self._priority_values:
            try:
                value = self.kube.get(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}").get("value")
            except ApiError as exc:
                if not exc.not_found:
                    raise
                return None
            self._priority_values[name] = int(value) if isinstance(value, int) else None
        return self._priority_values[name]

    def synced(self) -> bool:
        return all(inf.synced.is_set() for inf in self.informers)

    def health(self) -> dict[str, Any]:
        return {"leader": self.is_leader(), "synced": self.synced(), "queued": self.queue.pending()}

    def _on_elected(self) -> None:
        def begin() -> None:
            if not wait_all_synced(self.informers, self._stop):
                return
            if self._stop.is_set() or (self.elector is not None and not self.elector.is_leader()):
                return
            self._leading.set()
            self.metrics.leader.labels("podgrouper").set(1)
            self.resync()

        threading.Thread(target=begin, name="podgrouper-elected", daemon=True).start()

    def _on_deposed(self) -> None:
        self._leading.clear()
        self.metrics.leader.labels("podgrouper").set(0)

    def resync(self) -> None:
        """Reconcile everything we know (on becoming leader: events seen while not leading were not acted on)."""
        for kind, infs in self.ray.items():
            for inf in infs:
                for key in inf.list_keys():
                    self._enqueue(f"ray/{kind}/{key}")
        for inf in self.pods:
            for key in inf.list_keys():
                self._enqueue(f"pod/{key}")

    # --- events -------------------------------------------------------------------------------------------------

    def _enqueue(self, key: str, delay: float = 0.0) -> None:
        if self._leading.is_set():
            self.queue.submit(key, lambda: self._reconcile(key), delay=delay)

    def _on_pod(self, kind: str, key: str, obj: dict[str, Any]) -> None:
        if kind == DELETE:
            self._done.pop(key, None)
            self._reported.pop(f"Pod/{key}", None)
            self._orphans.pop(key, None)
            with self._deferred_lock:
                self._deferred.pop(key, None)
            return
        fp = _pod_fingerprint(obj)
        if self._done.get(key) == fp:
            return
        with self._deferred_lock:
            deferred = self._deferred.get(key)
        if deferred is None or deferred[0] != fp:
            self._enqueue(f"pod/{key}")

    def _on_pg(self, kind: str, key: str, obj: dict[str, Any]) -> None:
        with self._local_lock:
            local = self._local_pgs.get(key)
            if local is not None and (kind == DELETE or resource_version(obj) >= resource_version(local)):
                del self._local_pgs[key]
        if kind == DELETE:
            ns, _, name = key.partition("/")
            for inf in self.pods:
                for pkey in inf.list_keys():
                    pmeta = (inf.get(pkey) or {}).get("metadata") or {}
                    if pmeta.get("namespace") == ns and (
                        (pmeta.get("annotations") or {}).get(c.PODGROUP_ANNOTATION) == name
                        or own_group_name(pmeta) == name
                    ):
                        self._done.pop(pkey, None)
                        self._enqueue(f"pod/{pkey}")

    def _ray_handler(self, kind: str) -> Any:
        def handle(event: str, key: str, obj: dict[str, Any]) -> None:
            if event == DELETE:
                self._reported.pop(f"{kind}/{key}", None)
                self._warned.pop(f"{kind}/{key}", None)
                self._orphans.pop(f"ray/{kind}/{key}", None)
                self._fields_checked.pop(f"{kind}/{key}", None)
                self._explained.pop(f"{kind}/{key}", None)
                return
            self._enqueue(f"ray/{kind}/{key}")

        return handle

    # --- reconcile ----------------------------------------------------------------------------------------------

    def _reconcile(self, key: str) -> None:
        if not self._leading.is_set():
            return
        try:
            if key.startswith("pod/"):
                self.reconcile_pod(key[4:])
            else:
                _, kind, rest = key.split("/", 2)
                self.reconcile_ray(kind, rest)
            self.queue.forget(key)
        except (ApiError, OwnerError) as exc:
            self.metrics.reconcile_errors.labels(key.split("/", 1)[0]).inc()
            if isinstance(exc, OwnerError):
                self._orphaned(key[4:] if key.startswith("pod/") else key, exc)
            if isinstance(exc, ApiError) and exc.status in (400, 422):
                self._rejected(key, exc)  # the API server refuses what this object asks for: retrying cannot help
                self.queue.forget(key)
                return
            if not self._leading.is_set():
                return
            delay = self.queue.retry(key, lambda: self._reconcile(key))
            level = logging.INFO if isinstance(exc, OwnerError) or getattr(exc, "conflict", False) else logging.WARNING
            log.log(level, "%s: %s; retrying in %.1fs", key, exc, delay)
        except Exception as exc:  # a bug: its traceback once per key and error; retried with backoff
            self.guard.failed(key, exc)
            if self._leading.is_set():
                self.queue.retry(key, lambda: self._reconcile(key))

    def _orphaned(self, key: str, exc: OwnerError) -> None:
        """An object's owner chain still cannot be followed after :data:`OWNER_GRACE` seconds (a dangling owner
        reference): a pod gets its own PodGroup, a Ray object a placeholder, marked :data:`~kai_ray.constants.INVALID`
        with the reason (the scheduler explains it in a condition and schedules nothing of it), and a Warning Event.
        ``key`` is a pod key or ``ray/<kind>/<ns>/<name>``. The reconcile goes on being retried with backoff: once the
        owner exists, the object joins its real PodGroup and the stand-in goes (:meth:`_adopted`)."""
        first = self._orphans.setdefault(key, time.monotonic())
        if time.monotonic() - first < self.owner_grace or self.config.kai_coexistence:
            return
        if key.startswith("ray/"):
            _, kind, rest = key.split("/", 2)
            raw = self._get_cached(self.ray.get(kind, []), rest)
            if raw is None or (raw.get("metadata") or {}).get("deletionTimestamp"):
                return
            message = f"{kind} {(raw.get('metadata') or {}).get('name')}: metadata.ownerReferences: {exc}"
            placeholder = self._placeholder(raw, kind, message)
            try:
                if placeholder is not None:
                    self.apply(placeholder)
            except ApiError as err:
                log.info("%s: cannot mark it as orphaned: %s", key, err)
                return
            self._report_bad_cr(f"{kind}/{rest}", raw, kind, message)
            return
        raw = self._get_cached(self.pods, key)
        meta = (raw or {}).get("metadata") or {}
        if raw is None or meta.get("deletionTimestamp"):
            return
        try:
            pod = Pod.model_validate(raw)
            desired = single_pod_group(pod, self.grouper_config)
            message = (
                f"Pod {pod.metadata.name}: metadata.ownerReferences: {exc}; nothing of it is scheduled until it does"
            )
            desired.metadata.annotations[c.INVALID] = message
            pg = self.apply(desired)
            self._stamp(pod, pg)
        except (ValidationError, ApiError) as err:
            log.info("pod %s: cannot mark it as orphaned: %s", key, err)
            return
        what = f"Pod/{key}"
        if self._reported.get(what) != message:
            self._reported[what] = message
            log.warning("%s", message)
            self.events.emit(object_ref(raw, kind="Pod"), WARNING, "OwnerNotFound", message)

    def _adopted(self, key: str, raw: dict[str, Any], group: str | None) -> None:
        """An object that had a stand-in PodGroup for a dangling owner now has its real one (``group``, or None when
        its owner groups it): the stand-in goes. ``key`` as for :meth:`_orphaned`."""
        if self._orphans.pop(key, None) is None:
            return
        meta = raw.get("metadata") or {}
        self._reported.pop(f"Pod/{key}", None)
        own = group_name_for_pod(meta.get("name"), meta.get("uid"))
        ns = meta.get("namespace", "")
        stand_in = self._get_pg(f"{ns}/{own}")
        if (
            own == group
            or stand_in is None
            or c.INVALID not in ((stand_in.get("metadata") or {}).get("annotations") or {})
        ):
            return
        try:
            self.kube.delete(podgroups_path(ns, own))
        except ApiError as exc:
            if not exc.not_found:
                log.info("deleting the stand-in PodGroup %s/%s: %s", ns, own, exc)

    def _rejected(self, key: str, exc: ApiError) -> None:
        """A write for this object was refused as invalid: say so on the object, once per distinct message (its
        next change is reconciled again)."""
        kind, _, rest = key.partition("/")
        if kind == "pod":
            obj, obj_kind, what = self._get_cached(self.pods, rest), "Pod", f"Pod/{rest}"
        else:
            obj_kind, _, rest = rest.partition("/")
            obj, what = self._get_cached(self.ray.get(obj_kind, []), rest), f"{obj_kind}/{rest}"
        message = f"the API server refused the PodGroup written for it: {exc.message or exc}"
        if obj is None:
            return
        if obj_kind == "Pod":
            if self._reported.get(what) != message:
                log.warning("%s: %s", what, message)
            self._reported[what] = message
            self.events.emit(object_ref(obj, kind="Pod"), WARNING, "PodGroupError", message)
        else:
            self._report_bad_cr(what, obj, obj_kind, message)

    def _get_cached(self, infs: list[Informer], key: str) -> dict[str, Any] | None:
        for inf in infs:
            obj = inf.get(key)
            if obj is not None:
                return obj
        return None

    def _get_pg(self, key: str) -> dict[str, Any] | None:
        obj = self._get_cached(self.pgs, key)
        with self._local_lock:
            local = self._local_pgs.get(key)
        if local is not None and (obj is None or resource_version(local) > resource_version(obj)):
            return local
        return obj

    def _owner(self, ns: str, ref: dict[str, Any]) -> dict[str, Any] | None:
        """The owner object a reference points to (Ray kinds and KubeRay's Jobs from caches, a few built-in kinds by
        GET)."""
        kind, name, api = ref.get("kind", ""), ref.get("name", ""), ref.get("apiVersion", "")
        if kind in c.RAY_KINDS and api.startswith("ray.io/"):
            obj = self._get_cached(self.ray[kind], f"{ns}/{name}")
            if obj is None:
                try:
                    obj = self.kube.get(ray_path(kind, ns, name, api.split("/", 1)[1]))
                except ApiError as exc:
                    if exc.not_found:
                        raise OwnerError(f"{kind} {ns}/{name} (owner) not found") from None
                    raise
            return obj
        template = GENERIC_OWNERS.get((api, kind))
        if template is None:
            return None
        if (api, kind) == SUBMITTER_JOB:
            cached = self._get_cached(self.jobs, f"{ns}/{name}")
            if cached is not None and (not ref.get("uid") or (cached.get("metadata") or {}).get("uid") == ref["uid"]):
                return cached
        cache_key = (kind, ns, name)
        hit = self._owner_cache.get(cache_key)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        try:
            obj = self.kube.get(template.format(ns=ns, name=name))
        except ApiError as exc:
            if not exc.not_found:
                raise
            obj = None
        self._owner_cache[cache_key] = (time.monotonic() + 30.0, obj)
        if len(self._owner_cache) > 5000:
            self._owner_cache.clear()
        return obj

    def owner_chain(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        """``[obj, owner, owner's owner, ...]`` up to the first object without a (known) owner."""
        chain = [obj]
        ns = (obj.get("metadata") or {}).get("namespace", "")
        while len(chain) <= MAX_OWNER_DEPTH:
            ref = controller_ref(chain[-1].get("metadata") or {})
            if ref is None:
                break
            owner = self._owner(ns, ref)
            if owner is None:
                break
            uid = (owner.get("metadata") or {}).get("uid")
            if ref.get("uid") and uid and ref["uid"] != uid:
                raise OwnerError(f"owner {ref.get('kind')} {ns}/{ref.get('name')} has UID {uid}, not {ref['uid']}")
            chain.append(owner)
        return chain

    def reconcile_pod(self, key: str) -> None:
        raw = self._get_cached(self.pods, key)
        if raw is None:
            return
        meta = raw.get("metadata") or {}
        if meta.get("deletionTimestamp") or (raw.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return
        spec = raw.get("spec") or {}
        if spec.get("schedulerName") != self.config.scheduler_name:
            return
        chain = self.owner_chain(raw)
        if any(skip_requested(o.get("metadata") or {}) for o in chain):
            return
        named = (spec.get("schedulingGroup") or {}).get("podGroupName")
        if named and not (self.upstream is not None and chain[-1].get("kind") in c.RAY_KINDS):
            return  # an upstream gang: the Kubernetes PodGroup the pod names is its gang (scheduling/upstream.py)
        try:
            pod = Pod.model_validate(raw)
        except ValidationError as exc:
            log.info("pod %s cannot be read: %s", key, exc.errors()[0].get("msg"))
            return
        top = chain[-1]
        top_kind = top.get("kind") or ("Pod" if top is raw else "")
        submitter = False
        if top_kind in c.RAY_KINDS:
            submitter = is_submitter(_owner_kinds(chain))
            desired = self._ray_group(top_kind, top, chain, pod)
            if desired is None:
                return
            if top_kind == "RayService" and self.config.upgrade_surge:
                desired = self._service_cluster_group(top, chain, desired)
            self._mark_owner(top_kind, top)
        else:
            desired = single_pod_group(pod, self.grouper_config)
        pg = self.apply(desired)
        if self._may_defer_stamp(raw, pod, pg):
            with self._deferred_lock:
                since = self._deferred.get(key, (None, time.monotonic()))[1]
                self._deferred[key] = (_pod_fingerprint(raw), since)
            self.stamper.submit(f"stamp/{key}", partial(self._stamp_later, key, pg))
            return
        done = self._stamp(pod, pg, submitter)
        self._done[key] = _pod_fingerprint(done)
        if self._orphans:
            self._adopted(key, raw, pg.metadata.name)

    def _may_defer_stamp(self, raw: dict[str, Any], pod: Pod, pg: PodGroup) -> bool:
        """Whether the scheduler can place this pod without its stamp (see the module docstring)."""
        if self.config.kai_coexistence or own_group_name(raw.get("metadata") or {}) != pg.metadata.name:
            return False
        return bool(stamp(pod, pg).missing_on(pod))

    def _stamps_may_go(self) -> bool:
        if not self.queue.busy() and time.monotonic() - self._last_group_write > STAMP_HOLDOFF:
            return True
        with self._deferred_lock:
            oldest = next(iter(self._deferred.values()), None)
        return oldest is not None and time.monotonic() - oldest[1] > STAMP_MAX_DELAY

    def _stamp_later(self, key: str, pg: PodGroup) -> None:
        """Write a deferred stamp, against the pod as it is now (it may have changed or gone meanwhile)."""
        if not self._leading.is_set():
            with self._deferred_lock:
                self._deferred.pop(key, None)
            return
        raw = self._get_cached(self.pods, key)
        meta = (raw or {}).get("metadata") or {}
        if raw is None or meta.get("deletionTimestamp") or own_group_name(meta) != pg.metadata.name:
            with self._deferred_lock:
                self._deferred.pop(key, None)
            return
        try:
            done = self._stamp(Pod.model_validate(raw), pg)
        except ValidationError:
            with self._deferred_lock:
                self._deferred.pop(key, None)
            return  # changed into something unreadable: its next reconcile says so
        except ApiError as exc:
            if exc.not_found:
                with self._deferred_lock:
                    self._deferred.pop(key, None)
                return
            delay = self.stamper.retry(f"stamp/{key}", partial(self._stamp_later, key, pg))
            log.info("stamp %s: %s; retrying in %.1fs", key, exc, delay)
            return
        self.stamper.forget(f"stamp/{key}")
        self._done[key] = _pod_fingerprint(done)
        with self._deferred_lock:
            self._deferred.pop(key, None)

    def _ray_group(
        self, kind: str, top: dict[str, Any], chain: list[dict[str, Any]], pod: Pod | None
    ) -> PodGroup | None:
        """The Ray top owner's PodGroup, or None after reporting why it cannot be built (an Event on the CR)."""
        ckey = f"{kind}/{(top.get('metadata') or {}).get('namespace')}/{(top.get('metadata') or {}).get('name')}"
        try:
            obj = parse_object({**top, "kind": kind}, f"{kind} {(top.get('metadata') or {}).get('name')}")
            assert isinstance(obj, RayCluster | RayJob | RayService)
            cluster = self._effective_cluster(obj, chain)
            desired = group(obj, cluster=cluster, pod=pod, config=self.grouper_config)
        except (ManifestError, GroupingError) as exc:
            self._report_bad_cr(ckey, top, kind, str(exc))
            return self._placeholder(top, kind, str(exc))
        problem = desired.metadata.annotations.get(c.INVALID)
        if problem:
            self._report_bad_cr(ckey, top, kind, problem)
        elif self._reported.pop(ckey, None) is not None:
            self.events.emit(object_ref(top, kind=kind), NORMAL, "PodGroupValid", "the Ray object can be grouped again")
        blocker = suspend_blocker(kind, obj.metadata.name, top.get("spec") or {})
        if blocker is not None and self._warned.get(ckey) != blocker:
            self._warned[ckey] = blocker
            self.events.emit(
                object_ref(top, kind=kind),
                WARNING,
                "NotPreemptible",
                f"{blocker}; kai-ray schedules it as non-preemptible (within its queue's quota) and never preempts it",
            )
        elif blocker is None:
            self._warned.pop(ckey, None)
        return desired

    def _service_cluster_group(self, top: dict[str, Any], chain: list[dict[str, Any]], main: PodGroup) -> PodGroup:
        """A RayService pod's PodGroup: the service's, or its upgrade surge's (:mod:`kai_ray.podgrouper.upgrade`)."""
        raw = next((o for o in chain if o.get("kind") == "RayCluster"), None)
        if raw is None:
            return main
        try:
            service = parse_object({**top, "kind": "RayService"}, "RayService")
            cluster = parse_object({**raw, "kind": "RayCluster"}, "RayCluster")
        except ManifestError:
            return main
        if not isinstance(service, RayService) or not isinstance(cluster, RayCluster):
            return main
        ns = service.metadata.namespace or ""
        try:
            return service_cluster_group(
                service, cluster, main, lambda name: self._get_pg(f"{ns}/{name}") is not None, self.grouper_config
            )
        except GroupingError:
            return main

    def _placeholder(self, top: dict[str, Any], kind: str, problem: str) -> PodGroup | None:
        """A PodGroup that says why the Ray object cannot be scheduled (see :func:`placeholder_group`). Not in
        KAI-coexistence mode: KAI's scheduler does not read our :data:`~kai_ray.constants.INVALID` mark."""
        if self.config.kai_coexistence:
            return None
        try:
            meta = ObjectMeta.model_validate(top.get("metadata") or {})
        except ValidationError:
            return None
        if not meta.name or not meta.namespace:
            return None
        return placeholder_group(meta, kind, problem, self.grouper_config)

    def _effective_cluster(
        self, obj: RayCluster | RayJob | RayService, chain: list[dict[str, Any]]
    ) -> RayCluster | None:
        """The live RayCluster that sizes the gang: the active one of a RayService, the RayJob's, or the pod's."""
        ns = obj.metadata.namespace or ""
        name: str | None = None
        if isinstance(obj, RayJob) and obj.status is not None:
            name = obj.status.ray_cluster_name
        elif isinstance(obj, RayService) and obj.status is not None:
            for svc in (obj.status.active_service_status, obj.status.pending_service_status):
                if svc is not None and svc.ray_cluster_name:
                    name = svc.ray_cluster_name
                    break
        raw = self._get_cached(self.ray["RayCluster"], f"{ns}/{name}") if name else None
        if raw is None:
            raw = next((o for o in chain if o.get("kind") == "RayCluster"), None)
        if raw is None or isinstance(obj, RayCluster):
            return None
        try:
            cluster = parse_object({**raw, "kind": "RayCluster"}, f"RayCluster {name}")
        except ManifestError:
            return None  # the embedded spec is used instead
        return cluster if isinstance(cluster, RayCluster) else None

    def _report_bad_cr(self, ckey: str, obj: dict[str, Any], kind: str, message: str) -> None:
        self.metrics.findings.labels(kind).inc()
        if self._reported.get(ckey) != message:
            log.warning("%s: %s", ckey, message)
        self._reported[ckey] = message
        self.events.emit(object_ref(obj, kind=kind), WARNING, "PodGroupError", message)

    def _check_fields(self, kind: str, raw: dict[str, Any]) -> None:
        """One Warning Event per version of a Ray CR naming its unknown fields (kept by the object, or pruned by the
        API server but remembered by kubectl's last-applied annotation). Resources Kubernetes would refuse (a bad
        quantity, a negative or fractional GPU count) make the object ungroupable: :meth:`_ray_group` reports them."""
        meta = raw.get("metadata") or {}
        ckey = f"{kind}/{meta.get('namespace')}/{meta.get('name')}"
        version = (meta.get("uid"), meta.get("generation"), (meta.get("annotations") or {}).get(LAST_APPLIED))
        if self._fields_checked.get(ckey) == version:
            return
        self._fields_checked[ckey] = version
        ref = object_ref(raw, kind=kind)
        unknown = object_unknown_fields(raw, kind)
        if unknown:
            self.metrics.findings.labels(kind).inc()
            self.events.emit(ref, WARNING, "UnknownField", f"{'; '.join(map(str, unknown))}; ignored by kai-ray")

    def _explain(self, kind: str, raw: dict[str, Any], pg: PodGroup, existing: dict[str, Any] | None) -> None:
        """Events on a Ray object saying what its gang became where that is likely not what its author expects
        (:mod:`kai_ray.podgrouper.explain`), and a priority class the cluster does not define. Once per version."""
        meta = raw.get("metadata") or {}
        by_kai = bool(
            {SUSPEND_ANNOTATION, c.MAX_PENDING_ACTED}
            & set(((existing or {}).get("metadata") or {}).get("annotations") or {})
        )
        annotations = meta.get("annotations") or {}
        version = (meta.get("uid"), meta.get("generation"), annotations.get(c.STALENESS_GRACE), by_kai)
        ckey = f"{kind}/{meta.get('namespace')}/{meta.get('name')}"
        if self._explained.get(ckey) == version:
            return
        self._explained[ckey] = version
        obj = parse_object({**raw, "kind": kind}, f"{kind} {meta.get('name')}")
        assert isinstance(obj, RayCluster | RayJob | RayService)
        ref = object_ref(raw, kind=kind)
        try:
            findings = explain(obj, pg, suspended_by_kai=by_kai)
            mismatches = ray_resource_warnings(obj)
        except GroupingError:  # no embedded cluster spec (a clusterSelector RayJob): nothing of its own to explain
            findings, mismatches = [], []
        for finding in findings:
            self.events.emit(ref, finding.type, finding.reason, finding.message)
        for problem in mismatches:
            self.events.emit(ref, WARNING, "RayResourceMismatch", problem)
        pclass = pg.spec.priority_class_name
        if pclass and not self._priority_class_exists(pclass):
            self.events.emit(
                ref,
                WARNING,
                "PriorityClassNotFound",
                f"priority class {pclass!r}: no such PriorityClass in the cluster; the gang gets the default "
                f"priority {c.DEFAULT_PRIORITY_VALUE}",
            )

    def _priority_class_exists(self, name: str) -> bool:
        """Whether the cluster defines the PriorityClass (True when the API server cannot say)."""
        try:
            self.kube.get(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")
        except ApiError as exc:
            return exc.status != 404
        return True

    def reconcile_ray(self, kind: str, key: str) -> None:
        raw = self._get_cached(self.ray[kind], key)
        if raw is None:
            return
        meta = raw.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return
        ns = meta.get("namespace", "")
        ref = controller_ref(meta)
        if kind == "RayCluster" and ref is not None and ref.get("kind") in ("RayJob", "RayService"):
            self._owner(ns, ref)  # an owner that does not exist raises OwnerError (a dangling owner reference)
            self._enqueue(f"ray/{ref['kind']}/{ns}/{ref.get('name')}")
            if self._orphans:
                self._adopted(f"ray/{kind}/{key}", raw, None)
            return
        chain = self.owner_chain(raw)
        if any(skip_requested(o.get("metadata") or {}) for o in chain):
            return
        self._check_fields(kind, raw)
        desired = self._ray_group(kind, raw, chain, None)
        if desired is None:
            return
        self._mark_owner(kind, raw)
        pg_key = f"{ns}/{desired.metadata.name}"
        existing = self._get_pg(pg_key)
        self.apply(desired, existing_raw=existing)
        if c.INVALID not in desired.metadata.annotations:
            self._explain(kind, raw, desired, existing)
        if self._orphans:
            self._adopted(f"ray/{kind}/{key}", raw, desired.metadata.name)
        # pods may need a new subgroup label after a spec change
        for inf in self.pods:
            for pkey in inf.list_keys():
                pod = inf.get(pkey) or {}
                pmeta = pod.get("metadata") or {}
                stamped = (pmeta.get("annotations") or {}).get(c.PODGROUP_ANNOTATION)
                if (
                    pmeta.get("namespace") == ns
                    and stamped in (None, desired.metadata.name, _cluster_group(pod, raw, kind))
                    and _belongs(pod, raw, kind)
                ):
                    self._enqueue(f"pod/{pkey}")

    # --- writes -------------------------------------------------------------------------------------------------

    def apply(self, desired: PodGroup, existing_raw: dict[str, Any] | None = None) -> PodGroup:
        """Create or update the PodGroup (:meth:`apply_kai`) and, with ``--upstream-gangs``, its upstream twin."""
        stored = self.apply_kai(desired, existing_raw)
        if self.upstream is not None and not stored.metadata.annotations.get(c.INVALID):
            self.upstream.apply(stored)
        return stored

    def apply_kai(self, desired: PodGroup, existing_raw: dict[str, Any] | None = None) -> PodGroup:
        """Create the PodGroup, or update it keeping what KAI keeps. Returns what is now stored.

        What is written is what the installed CRD stores (:meth:`_storable`): a ``minMember`` of 0 is omitted once
        the CRD has refused it (KAI v0.12's minimum is 1), and fields its schema prunes are no longer sent, so an
        update never chases a field the server drops."""
        ns = desired.metadata.namespace or ""
        name = desired.metadata.name or ""
        key = f"{ns}/{name}"
        desired = self._storable(desired)
        existing_raw = existing_raw if existing_raw is not None else self._get_pg(key)
        if existing_raw is None:
            self._last_group_write = time.monotonic()
            try:
                created = self._write_pg(desired, lambda pg: self.kube.create(podgroups_path(ns), pg.to_dict()))
                self._remember(key, created)
                self.metrics.podgroups.labels("created").inc()
                return desired
            except ApiError as exc:
                if not exc.conflict:
                    raise
                existing_raw = self.kube.get(podgroups_path(ns, name))
        assert existing_raw is not None
        existing = PodGroup.model_validate(
            {**existing_raw, "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup"}
        )
        merged = merge_existing(existing, desired, self.grouper_config)
        if not differs(existing, merged):
            return existing
        updated = self._write_pg(
            merged, lambda pg: self.kube.replace(podgroups_path(ns, name), update_body(existing_raw, pg))
        )
        self._remember(key, updated)
        self.metrics.podgroups.labels("updated").inc()
        return merged

    def _storable(self, pg: PodGroup) -> PodGroup:
        """``pg`` as the installed CRD stores it (see :meth:`apply`)."""
        if self._omit_zero_min:
            pg = without_zero_min_member(pg)
        pruned = self.pruned.known("PodGroup")
        if pruned:
            pg = PodGroup.model_validate(strip(pg.to_dict(), pruned))
        return pg

    def _write_pg(self, pg: PodGroup, write: Callable[[PodGroup], Any]) -> dict[str, Any]:
        """One create or replace. A CRD that refuses ``minMember: 0`` switches the podgrouper to omitting it (logged
        once) and the write is retried so; what the answer lacks of the spec that was sent is recorded as pruned."""
        try:
            stored: dict[str, Any] = write(pg)
        except ApiError as exc:
            lean = without_zero_min_member(pg)
            if lean is pg or not refuses_zero_min_member(exc):
                raise
            if not self._omit_zero_min:
                self._omit_zero_min = True
                log.warning(
                    "the installed PodGroup CRD refuses minMember 0 (%s), as KAI v0.12's does (minimum 1): kai-ray "
                    "now leaves a zero minMember out, which that CRD stores as 0. Install kai-ray's CRDs "
                    "(helm/kai-ray/crds) to write it explicitly.",
                    exc.message,
                )
            pg = lean
            stored = write(pg)
        self.pruned.check("PodGroup", {"spec": pg.to_dict()["spec"]}, stored, f"PodGroup {pg.metadata.name}")
        return stored

    def _remember(self, key: str, obj: dict[str, Any]) -> None:
        with self._local_lock:
            self._local_pgs[key] = obj

    def _mark_owner(self, kind: str, obj: dict[str, Any]) -> None:
        """KAI-coexistence: tell KAI's podgrouper to leave this Ray object (and so its pods) to kai-ray."""
        meta = obj.get("metadata") or {}
        if not self.config.kai_coexistence or has_skip_marks(meta):
            return
        self.kube.merge_patch(
            ray_path(kind, meta.get("namespace"), meta.get("name")), {"metadata": {"annotations": skip_marks()}}
        )
        self.metrics.owners_marked.inc()

    def _stamp(self, pod: Pod, pg: PodGroup, submitter: bool = False) -> dict[str, Any]:
        """Write what is missing of the stamp; returns the pod's metadata as it now is. ``submitter``: the pod is a
        RayJob's submitter by its owners."""
        full = stamp(pod, pg, submitter)
        if self.config.kai_coexistence:
            full = PodStamp({**full.annotations, **skip_marks()}, full.labels)
        missing = full.missing_on(pod)
        if not missing:
            return {"metadata": pod.metadata.to_dict()}
        updated = self.kube.merge_patch(pods_path(pod.metadata.namespace, pod.metadata.name), missing.as_patch())
        self.metrics.pods_stamped.inc()
        return dict(updated)


def _pod_fingerprint(obj: dict[str, Any]) -> tuple[Any, ...]:
    """What grouping reads from a pod: identity, labels, annotations, owners (not its status or node)."""
    meta = obj.get("metadata") or {}
    return (
        meta.get("uid"),
        _frozen(meta.get("labels")),
        _frozen(meta.get("annotations")),
        tuple((r.get("kind"), r.get("uid")) for r in meta.get("ownerReferences") or []),
        bool(meta.get("deletionTimestamp")),
    )


def _owner_kinds(chain: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """``(apiVersion, kind)`` of each controlling owner along ``chain`` (``[pod, owner, ...]``), nearest first, as
    the references name them (cached objects need not carry their own kind)."""
    out = []
    for obj in chain[:-1]:
        ref = controller_ref(obj.get("metadata") or {}) or {}
        out.append((str(ref.get("apiVersion", "")), str(ref.get("kind", ""))))
    return out


def _slim_job(obj: dict[str, Any]) -> dict[str, Any]:
    """What the owner chain reads of a Job: its identity and owners (not its pod template or status)."""
    meta = obj.get("metadata") or {}
    keep = ("name", "namespace", "uid", "labels", "ownerReferences", "deletionTimestamp", "resourceVersion")
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {k: meta[k] for k in keep if k in meta}}


def _frozen(d: dict[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((d or {}).items()))


def _cluster_group(pod: dict[str, Any], owner: dict[str, Any], kind: str) -> str | None:
    """For a RayService's pod, the PodGroup its cluster has had since it was an upgrade surge: a status change (the
    switch that makes the surge the active cluster) must reach those pods too, so the surge mark is cleared."""
    cluster = ((pod.get("metadata") or {}).get("labels") or {}).get(c.RAY_CLUSTER)
    if kind != "RayService" or not cluster:
        return None
    return own_podgroup_name(str(cluster), (owner.get("metadata") or {}).get("uid"))


def _belongs(pod: dict[str, Any], owner: dict[str, Any], kind: str) -> bool:
    """Whether a pod belongs to this Ray CR (through its RayCluster's name label)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    cluster = labels.get(c.RAY_CLUSTER)
    name = (owner.get("metadata") or {}).get("name")
    if kind == "RayCluster":
        return cluster == name
    status = owner.get("status") or {}
    names = {status.get("rayClusterName")}
    for svc in ("activeServiceStatus", "pendingServiceStatus"):
        names.add((status.get(svc) or {}).get("rayClusterName"))
    return cluster is not None and (cluster in names or str(cluster).startswith(f"{name}-"))

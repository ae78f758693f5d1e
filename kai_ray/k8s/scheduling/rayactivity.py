"""Ray's idle/busy answers for the scheduler's victim order (docs/ray-native.md).

Every ``--ray-activity-interval`` a thread asks the GCS of each RayCluster that has our running pods what its Ray
nodes are doing (the autoscaler state Ray's own autoscaler reads: ``idle_duration_ms``), turns the answers into
``Pod.ray_activity`` facts and hands them to the cache. The core ignores an answer older than
``ray_activity_max_age``, so a cluster whose GCS cannot be reached (or an image without ``ray``) falls back to KAI's
victim order by itself; nothing here ever blocks a scheduling cycle.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kai_ray import constants as c
from kai_ray.k8s.base.rest import ApiError, Kube, pods_path, ray_path
from kai_ray.k8s.ray.raygcs import ActivityTracker, gcs_address_for, ray_node_activity
from kai_ray.k8s.scheduling.cache import SchedulerCache
from kai_ray.scheduler.snapshot import RayActivity

log = logging.getLogger(__name__)


class RayActivityPoller:
    def __init__(self, kube: Kube, cache: SchedulerCache, interval: float, is_leader: Callable[[], bool]) -> None:
        self.kube = kube
        self.cache = cache
        self.interval = interval
        self.is_leader = is_leader
        self.trackers: dict[tuple[str, str], ActivityTracker] = {}  # per RayCluster: pod names are unique there
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ray-activity", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if not self.is_leader():
                continue
            try:
                self.poll_once()
            except Exception:
                log.exception("reading Ray activity failed; the next poll retries")

    def clusters(self) -> dict[tuple[str, str], list[tuple[str, str]]]:
        """(namespace, RayCluster) -> [(pod key, pod name)] of our bound Ray pods."""
        out: dict[tuple[str, str], list[tuple[str, str]]] = {}
        with self.cache.lock:
            for key, p in self.cache.pods.items():
                if not p.ours or not p.node or p.terminal or p.deleting or not p.raw:
                    continue
                meta = p.raw[0] if isinstance(p.raw[0], dict) else {}
                cluster = (meta.get("labels") or {}).get(c.RAY_CLUSTER)
                if cluster:
                    out.setdefault((p.namespace, cluster), []).append((key, p.name))
        return out

    def poll_once(self) -> dict[str, RayActivity]:
        facts: dict[str, RayActivity] = {}
        clusters = self.clusters()
        for gone in set(self.trackers) - set(clusters):
            del self.trackers[gone]
        for (ns, cluster), pods in clusters.items():
            try:
                rc = self.kube.get(ray_path("RayCluster", ns, cluster))
                heads = self.kube.get(pods_path(ns), labelSelector=f"{c.RAY_CLUSTER}={cluster},{c.RAY_NODE_TYPE}=head")
            except ApiError as exc:
                log.debug("Ray activity of %s/%s: %s", ns, cluster, exc)
                continue
            address = gcs_address_for(rc, heads.get("items") or [])
            nodes = ray_node_activity(address) if address else None
            if nodes is None:
                continue
            names = {name: key for key, name in pods}
            tracker = self.trackers.setdefault((ns, cluster), ActivityTracker())
            seen = tracker.update(time.time(), list(names), nodes)
            tracker.forget(seen)
            for name, act in seen.items():
                facts[names[name]] = act
        self.cache.set_ray_activity(facts)
        return facts

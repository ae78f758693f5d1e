"""Writes the podgrouper's gangs in Kubernetes' own workload API, beside KAI's PodGroup (``--upstream-gangs``).

The objects are :func:`kai_ray.podgrouper.workload_api.upstream_gang`'s. A ``Workload``'s templates are immutable, so it
is created once; the ``PodGroup``'s gang ``minCount`` follows the Ray object (an autoscaling cluster's
``minReplicas`` edited, a worker group added). What was last written is remembered per gang, so a reconcile that
changes nothing sends nothing.
"""

from __future__ import annotations

import logging
import threading

from kai_ray.api.podgroup import PodGroup
from kai_ray.k8s.base.rest import ApiError, Kube
from kai_ray.podgrouper.workload_api import VERSION, min_count, upstream_gang

log = logging.getLogger(__name__)


def upstream_path(plural: str, namespace: str, name: str | None = None) -> str:
    base = f"/apis/{VERSION}/namespaces/{namespace}/{plural}"
    return f"{base}/{name}" if name else base


class UpstreamGangs:
    """Creates and updates the upstream Workload and PodGroup of each gang the podgrouper applies."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._written: dict[str, int] = {}  # namespace/name -> minCount last written or read
        self._lock = threading.Lock()

    def apply(self, pg: PodGroup) -> None:
        ns, name = pg.metadata.namespace or "", pg.metadata.name or ""
        key = f"{ns}/{name}"
        workload, podgroup = upstream_gang(pg)
        want = min_count(podgroup)
        with self._lock:
            if self._written.get(key) == want:
                return
        self._create(upstream_path("workloads", ns), workload)
        existing = self._create(upstream_path("podgroups", ns), podgroup)
        if existing is not None and min_count(existing) != want:
            try:
                self.kube.merge_patch(
                    upstream_path("podgroups", ns, name), {"spec": {"schedulingPolicy": {"gang": {"minCount": want}}}}
                )
            except ApiError as exc:
                log.info("upstream PodGroup %s: minCount %s not written: %s", key, want, exc.message)
                return
        with self._lock:
            self._written[key] = want if want is not None else 0

    def _create(self, path: str, body: dict[str, object]) -> dict[str, object] | None:
        """Create ``body``; None when created, the stored object when it already exists."""
        try:
            self.kube.create(path, body)
            return None
        except ApiError as exc:
            if not exc.conflict:
                raise
        stored: dict[str, object] = self.kube.get(f"{path}/{body['metadata']['name']}")  # type: ignore[index]
        return stored

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._written.pop(f"{namespace}/{name}", None)

"""The scheduler operator's headroom publication for the autoscaler hook, after its cycles.

Apart from the reclaim in :mod:`kai_ray.k8s.ray.elastic`: reclaim takes pods away from Ray, this module tells Ray's
autoscaler how many more it may ask for (``kai-ray.io/headroom`` on each PodGroup, read by :mod:`kai_ray.autoscaler`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from kai_ray.headroom.compute import autoscaling_jobs, compute_headroom
from kai_ray.headroom.contract import headroom_annotations
from kai_ray.k8s.base.rest import ApiError, Kube, podgroups_path

log = logging.getLogger(__name__)


def write_headroom(kube: Kube, job: str, subgroups: Mapping[str, Any], now: float | None = None) -> None:
    """Merge-patch one PodGroup's ``kai-ray.io/headroom`` annotation (a vanished PodGroup is not an error)."""
    ns, _, name = job.partition("/")
    try:
        kube.merge_patch(podgroups_path(ns, name), {"metadata": {"annotations": headroom_annotations(subgroups, now)}})
    except ApiError as exc:
        if not exc.not_found:
            log.info("publishing headroom on PodGroup %s: %s", job, exc)


class HeadroomPublisher:
    """The scheduler operator's headroom publication for the autoscaler hook.

    At most every ``interval`` seconds, it computes the headroom of every job that may still grow with the core
    (:func:`kai_ray.headroom.compute.compute_headroom`) and hands a write to ``submit`` only for PodGroups whose
    numbers changed, or whose last write is older than ``refresh_s`` (the hook treats old numbers as unknown).
    ``templates(job_keys)`` supplies probe pods for subgroups scaled to zero.
    """

    def __init__(
        self,
        kube: Kube,
        interval: float,
        submit: Callable[[str, Callable[[], None]], None],
        *,
        refresh_s: float = 60.0,
        templates: Callable[[list[str]], Mapping[str, Mapping[str, Any]]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.interval = interval
        self.submit = submit
        self.refresh_s = refresh_s
        self.templates = templates
        self.clock = clock
        self._last_run = float("-inf")
        self._written: dict[str, tuple[dict[str, tuple[int, int]], float]] = {}
        self.writes = 0

    def due(self) -> bool:
        return self.interval > 0 and self.clock() - self._last_run >= self.interval

    def maybe_publish(self, snapshot: Any) -> dict[str, Any] | None:
        """Publish if due; returns what was computed (None when not due or nothing may grow)."""
        if not self.due():
            return None
        now = self.clock()
        self._last_run = now
        jobs = autoscaling_jobs(snapshot)
        for key in [k for k in self._written if k not in jobs]:
            del self._written[key]
        if not jobs:
            return None
        templates = dict(self.templates(jobs)) if self.templates is not None else None
        result = compute_headroom(snapshot, jobs, templates=templates)
        wall = time.time()
        for key, subgroups in result.items():
            numbers = {sg: (h.pods, h.headroom) for sg, h in subgroups.items()}
            last = self._written.get(key)
            if last is not None and last[0] == numbers and now - last[1] < self.refresh_s:
                continue
            self._written[key] = (numbers, now)
            self.writes += 1
            self.submit(f"headroom/{key}", partial(write_headroom, self.kube, key, subgroups, wall))
        return result

    def forget(self) -> None:
        self._written.clear()
        self._last_run = float("-inf")

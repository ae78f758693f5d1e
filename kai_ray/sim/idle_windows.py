"""Idle windows: spans where GPUs sit free while workloads wait for GPUs (``EngineOptions.track_idle``).

Why a window and not a sample: the question the report answers is "did the scheduler leave GPUs idle that a waiting
workload could have used, and for how long", so a window opens when the set of waiting workloads (and whether each
would fit) changes, and closes when it changes again; spans no longer than the scheduler's own latency are dropped.
"""

from __future__ import annotations

from typing import Any

from kai_ray.sim.cluster import Cluster
from kai_ray.sim.workloads import COMPLETED, WorkloadBase


class IdleWindows:
    """The windows closed so far, and the one open now."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.windows: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None

    def check(self, t: float, cluster: Cluster, with_pending: dict[str, WorkloadBase]) -> None:
        """Open, extend or close an idle window: GPUs are free while workloads wait for GPUs. For each waiting
        workload: the GPUs of its next step (the pods its gang minimum lacks, else one elastic pod) and whether
        that step would fit on the free capacity as it stands."""
        waiting: dict[str, tuple[float, bool]] = {}
        if cluster.free_gpus > 1e-9:
            for w in with_pending.values():
                if w.state == COMPLETED or w.job is None:
                    continue
                step = w.missing_pods()
                need = sum(p.request.gpu for p in step)
                if need > 0:
                    waiting[w.key] = (need, cluster.fits_all(step))
        cur = self._open
        if cur is not None and cur["waiting"] != waiting:
            self.close(t)
            cur = None
        if waiting and cur is None:
            reasons = {w.key: w.pending_reason for w in with_pending.values() if w.key in waiting}
            self._open = {"from": t, "idle_gpus": cluster.free_gpus, "waiting": waiting, "reasons": reasons}
        elif cur is not None:
            cur["idle_gpus"] = max(cur["idle_gpus"], cluster.free_gpus)

    def close(self, t: float) -> None:
        cur, self._open = self._open, None
        if cur is None or t - cur["from"] <= self.latency + 1e-9:
            return  # the scheduler's and the autoscaler's own latency, not an idle window
        self.windows.append(
            {
                "from": cur["from"],
                "to": t,
                "idle_gpus": round(cur["idle_gpus"], 6),
                "fits": any(fits for _, fits in cur["waiting"].values()),
                "waiting": [
                    {"workload": k, "needs_gpus": need, "fits": fits, "pending_reason": cur["reasons"].get(k)}
                    for k, (need, fits) in sorted(cur["waiting"].items())
                ],
            }
        )

"""Time-based fair share in the simulator: the operator's usage accounting, fed by the simulated world.

The engine tells :class:`SimUsage` every allocation change (per leaf queue) and asks it for the usage to put in each
cycle's snapshot; the ledger is :class:`kai_ray.scheduler.usage.UsageLedger`, the same one the operator keeps. Like
KAI's scheduler, the division sees usage refreshed every ``fetchInterval``, not continuously. Each cycle's fair
share, allocation and usage per queue are recorded for the plot and the summary (:func:`usage_document`): the
long-run share of allocated GPU time per queue next to its over-quota weight share, which is what time-based fair
share makes the one converge to.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kai_ray.durations import span
from kai_ray.scheduler.decisions import CycleResult
from kai_ray.scheduler.snapshot import ZERO, Node, Queue, Resources
from kai_ray.scheduler.usage import UsageLedger, UsageParams


@dataclass(frozen=True, slots=True)
class ShareSample:
    """One queue at one cycle: GPU fair share, allocated GPUs after the cycle, and its normalised GPU usage."""

    fair_share: float
    allocated: float
    usage: float


@dataclass
class UsageRecord:
    """What a run with usage accounting produced (on :class:`kai_ray.sim.engine.SimResult`)."""

    params: UsageParams
    k_value: float
    weights: dict[str, float]  # leaf queue -> GPU over-quota weight
    samples: list[tuple[float, dict[str, ShareSample]]] = field(default_factory=list)
    gpu_seconds: dict[str, float] = field(default_factory=dict)  # leaf queue -> allocated GPU-seconds


class SimUsage:
    def __init__(self, params: UsageParams, k_value: float, queues: list[Queue], nodes: Iterable[Node]) -> None:
        self.ledger = UsageLedger(params)
        self.params = params
        self.parent = {q.name: q.parent for q in queues}
        parents = {q.parent for q in queues if q.parent}
        self.leaves = [q.name for q in queues if q.name not in parents]
        cap = ZERO
        for n in nodes:
            cap = cap + n.allocatable
        self.capacity = (cap.gpu, cap.cpu, cap.memory)
        self.current: dict[str, Resources] = {}
        self._refreshed: float | None = None
        self._levels: dict[str, Resources] = {}
        self._level_since = 0.0
        self.record = UsageRecord(params, k_value, {q.name: q.over_quota_weight.gpu for q in queues})

    def observe(self, t: float, leaf_alloc: Mapping[str, Resources]) -> None:
        """The allocation of each leaf queue from ``t`` on (the engine calls this after every change)."""
        levels = {q: v for q, v in leaf_alloc.items() if v != ZERO}
        if levels == self._levels:
            return
        self._integrate_gpu(t)
        self._levels = levels
        totals: dict[str, list[float]] = {}
        for leaf, v in levels.items():
            q: str | None = leaf
            hops = 0
            while q is not None and hops < 64:
                acc = totals.setdefault(q, [0.0, 0.0, 0.0])
                acc[0] += v.gpu
                acc[1] += v.cpu
                acc[2] += v.memory
                q = self.parent.get(q)
                hops += 1
        self.ledger.observe(t, totals, self.capacity)

    def _integrate_gpu(self, t: float) -> None:
        dt = t - self._level_since
        if dt > 0:
            for q, v in self._levels.items():
                self.record.gpu_seconds[q] = self.record.gpu_seconds.get(q, 0.0) + v.gpu * dt
        self._level_since = t

    def for_cycle(self, t: float) -> dict[str, Resources]:
        """Usage for the cycle at ``t``: recomputed once every ``fetchInterval``, as KAI's scheduler polls it."""
        if self._refreshed is None or t - self._refreshed >= self.params.fetch_interval - 1e-9:
            if self.ledger.capacity is None:
                self.ledger.observe(t, {}, self.capacity)
            self.current = {q: Resources(*u) for q, u in self.ledger.usage(t).items()}
            self._refreshed = t
        return self.current

    def next_refresh(self, t: float) -> float | None:
        if self._refreshed is None:
            return t
        return self._refreshed + self.params.fetch_interval

    def after_cycle(self, t: float, res: CycleResult) -> None:
        sample: dict[str, ShareSample] = {}
        for q in self.leaves:
            qs = res.queues.get(q)
            if qs is None:
                continue
            u = self.current.get(q, ZERO)
            sample[q] = ShareSample(qs.fair_share.get("gpu", 0.0), qs.allocated.get("gpu", 0.0), u.gpu)
        self.record.samples.append((t, sample))

    def close(self, end: float) -> UsageRecord:
        self._integrate_gpu(end)
        return self.record


def usage_document(rec: UsageRecord, start: float, end: float) -> dict[str, Any]:
    """The long-run GPU share per leaf queue (of all GPU time the leaf queues were allocated) next to its weight
    share among them, the last fair share and usage, and the settings."""
    total = sum(rec.gpu_seconds.values())
    leaves = sorted({q for _, s in rec.samples for q in s} | set(rec.gpu_seconds))
    weight_total = sum(rec.weights.get(q, 0.0) for q in leaves)
    last = rec.samples[-1][1] if rec.samples else {}
    queues = {}
    for q in leaves:
        s = last.get(q)
        queues[q] = {
            "gpu_hours": round(rec.gpu_seconds.get(q, 0.0) / 3600.0, 4),
            "gpu_share": round(rec.gpu_seconds.get(q, 0.0) / total, 4) if total > 0 else None,
            "weight_share": round(rec.weights.get(q, 0.0) / weight_total, 4) if weight_total > 0 else None,
            "last_fair_share_gpus": None if s is None else round(s.fair_share, 3),
            "last_usage_gpu": None if s is None else round(s.usage, 4),
        }
    p = rec.params
    return {
        "kValue": rec.k_value,
        "usageParams": {
            "windowSize": p.window_size,
            "windowType": p.window_type,
            "halfLifePeriod": p.half_life_period,
            "fetchInterval": p.fetch_interval,
            **({"cronString": p.cron_string} if p.window_type == "cron" else {}),
        },
        "span_seconds": round(end - start, 3),
        "queues": queues,
    }


def print_usage(doc: Mapping[str, Any], console: Any) -> None:
    """The ``usage`` section of ``kai-ray simulate``: long-run GPU share per leaf queue next to its weight share."""
    from rich.table import Table

    p = doc["usageParams"]
    half = f", half-life {span(p['halfLifePeriod'], exact=True)}" if p["halfLifePeriod"] else ""
    window = p["cronString"] if p["windowType"] == "cron" else span(p["windowSize"], exact=True)
    table = Table(
        title=f"Time-based fair share (kValue {doc['kValue']:g}, {p['windowType']} window {window}{half})",
        header_style="bold",
        box=None,
        padding=(0, 1),
    )
    for col in ("queue", "GPU-hours", "share of GPU time", "weight share", "last fair share", "last usage"):
        table.add_column(col, justify="left" if col == "queue" else "right")

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.2%}"

    for name, q in doc["queues"].items():
        fair = q["last_fair_share_gpus"]
        usage = q["last_usage_gpu"]
        table.add_row(
            name,
            f"{q['gpu_hours']:g}",
            pct(q["gpu_share"]),
            pct(q["weight_share"]),
            "-" if fair is None else f"{fair:g} GPUs",
            "-" if usage is None else f"{usage:.3f}",
        )
    console.print(table)

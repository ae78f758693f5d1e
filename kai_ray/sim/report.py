"""PNG plots of a simulation run (matplotlib, Agg backend: no display needed).

Three questions a platform team asks: who held the GPUs over time (allocation per queue), who waited and how long
(pending time per workload), and what happened to each workload (timeline with preemptions marked).
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.collections import LineCollection
from matplotlib.lines import Line2D

from kai_ray.scheduler.usage import human_duration
from kai_ray.sim.engine import SimResult
from kai_ray.sim.workloads import WorkloadBase

MANY = 60  # above this many workloads, per-workload bars and labels give way to aggregate views


def _unit(span: float) -> tuple[float, str]:
    if span <= 2 * 3600:
        return 60.0, "minutes"
    if span <= 3 * 86400:
        return 3600.0, "hours"
    return 86400.0, "days"


def _colors(queues: list[str]) -> dict[str, str]:
    cmap = plt.get_cmap("tab10")
    return {q: matplotlib.colors.to_hex(cmap(i % 10)) for i, q in enumerate(queues)}


def write_report(res: SimResult, out_dir: str | Path, title: str = "kai-ray simulation") -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    queues = list(res.queues)
    for w in res.workloads:
        if w.queue and w.queue not in queues:
            queues.append(w.queue)
    colors = _colors(queues)
    scale, unit = _unit(max(1.0, res.end - res.start))
    paths = [
        _allocation(res, out / "gpu-allocation.png", title, queues, colors, scale, unit),
        _pending(res, out / "pending-time.png", title, colors),
        _timeline(res, out / "timeline.png", title, colors, scale, unit),
    ]
    if res.usage is not None and res.usage.samples:
        paths.append(_fair_share(res, out / "fair-share.png", title, colors, scale, unit))
    return paths


def _allocation(
    res: SimResult, path: Path, title: str, queues: list[str], colors: dict[str, str], scale: float, unit: str
) -> Path:
    fig, ax = plt.subplots(figsize=(10, 4.5))
    samples = list(res.samples)
    if not samples or samples[0][0] > res.start:
        samples.insert(0, (res.start, {}))
    samples.append((res.end, samples[-1][1]))
    xs = [t / scale for t, _ in samples]
    used = [q for q in queues if any(s.get(q, 0.0) > 0 for _, s in samples)]
    ys = [[s.get(q, 0.0) for _, s in samples] for q in used]
    if used:
        ax.stackplot(xs, ys, labels=used, colors=[colors[q] for q in used], step="post", alpha=0.85)
    ax.axhline(res.total_gpus, color="black", linewidth=1, linestyle="--", label=f"cluster ({res.total_gpus:g} GPUs)")
    marked = False
    for e in res.events:
        if e["type"] in ("preempt", "reclaim") and not e.get("elastic"):
            ax.axvline(e["t"] / scale, color="red", linewidth=1, alpha=0.6, label=None if marked else "preemption")
            marked = True
    ax.set_xlim(xs[0], max(xs[-1], xs[0] + 1e-9))
    ax.set_ylim(0, max(res.total_gpus * 1.08, 1))
    ax.set_xlabel(f"simulated time ({unit})")
    ax.set_ylabel("allocated GPUs")
    ax.set_title(f"{title}: GPU allocation per queue")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _pending_of(w: WorkloadBase) -> float:
    return w.pending_seconds


def _pending(res: SimResult, path: Path, title: str, colors: dict[str, str]) -> Path:
    arrived = [w for w in res.workloads if w.job is not None]
    fig, ax = plt.subplots(
        figsize=(10, max(3.0, min(0.35 * len(arrived) + 1.5, 12.0)) if len(arrived) <= MANY else 4.5)
    )
    if len(arrived) <= MANY:
        names = [w.key for w in arrived]
        vals = [_pending_of(w) / 60.0 for w in arrived]
        ax.barh(names, vals, color=[colors.get(w.queue, "grey") for w in arrived])
        ax.invert_yaxis()
        ax.set_xlabel("time pending (minutes): before first start and after preemptions")
        ax.set_xlim(0, max([*vals, 1.0]) * 1.25)
        for i, w in enumerate(arrived):
            if w.preemptions:
                ax.annotate(f"  preempted x{w.preemptions}", (vals[i], i), va="center", fontsize=8, color="red")
    else:
        vals = [_pending_of(w) / 60.0 for w in arrived]
        ax.hist(vals, bins=50, color="tab:blue")
        ax.set_yscale("log")
        ax.set_xlabel("time pending (minutes)")
        ax.set_ylabel("workloads")
    ax.set_title(f"{title}: pending time per workload")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _timeline(res: SimResult, path: Path, title: str, colors: dict[str, str], scale: float, unit: str) -> Path:
    arrived = [w for w in res.workloads if w.job is not None]
    many = len(arrived) > MANY
    height = 4.5 if many else max(2.5, 0.5 * len(arrived) + 1.5)
    fig, ax = plt.subplots(figsize=(10, min(height, 14.0)))
    segs: list[list[tuple[float, float]]] = []
    seg_colors: list[str] = []
    px: list[float] = []
    py: list[float] = []
    cx: list[float] = []
    cy: list[float] = []
    for i, w in enumerate(arrived):
        for start, end, state in w.intervals:
            segs.append([(start / scale, i), (end / scale, i)])
            seg_colors.append(colors.get(w.queue, "grey") if state == "Running" else "#c8c8c8")
        for t in w.preempted_at:
            px.append(t / scale)
            py.append(i)
        if w.completed_at is not None:
            cx.append(w.completed_at / scale)
            cy.append(i)
    width = 1.0 if many else 9.0
    ax.add_collection(LineCollection(segs, colors=seg_colors, linewidths=width))
    ax.scatter(px, py, marker="X", color="red", s=14 if many else 80, zorder=3)
    ax.scatter(cx, cy, marker="|", color="black", s=10 if many else 200, zorder=3)
    ax.set_xlim(res.start / scale, max(res.end / scale, res.start / scale + 1e-9))
    ax.set_ylim(len(arrived) - 0.5, -0.5)
    if many:
        ax.set_ylabel(f"workloads ({len(arrived)}, in arrival order)")
        ax.set_yticks([])
    else:
        ax.set_yticks(range(len(arrived)))
        ax.set_yticklabels([w.key for w in arrived], fontsize=9)
    ax.set_xlabel(f"simulated time ({unit})")
    handles = [
        Line2D([0], [0], color="#c8c8c8", linewidth=6, label="pending"),
        *[
            Line2D([0], [0], color=col, linewidth=6, label=f"running ({q})")
            for q, col in colors.items()
            if any(w.queue == q for w in arrived)
        ],
        Line2D([0], [0], marker="X", color="red", linestyle="", label="preempted"),
        Line2D([0], [0], marker="|", color="black", linestyle="", markersize=12, label="completed"),
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax.set_title(f"{title}: timeline")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _fair_share(res: SimResult, path: Path, title: str, colors: dict[str, str], scale: float, unit: str) -> Path:
    """Time-based fair share, four views of each leaf queue over time: who holds the GPUs (allocation, stacked); the
    fair share the division gave it each cycle; its normalised usage next to its over-quota weight share (dotted),
    the level the usage is pulled towards; and its share of all GPU time allocated so far, which converges to the
    weight share while the queues keep competing."""
    assert res.usage is not None
    rec = res.usage
    queues = [q for q in colors if any(q in s for _, s in rec.samples)]
    fig, (alloc_ax, fair_ax, use_ax, cum_ax) = plt.subplots(
        4, 1, figsize=(10, 9), sharex=True, gridspec_kw={"height_ratios": [2, 2, 2, 2]}
    )
    xs = [t / scale for t, _ in rec.samples] + [res.end / scale]
    weight_total = sum(rec.weights.get(q, 0.0) for q in queues) or 1.0

    def series(q: str, what: str) -> list[float]:
        vals = [getattr(s[q], what) if q in s else 0.0 for _, s in rec.samples]
        return [*vals, vals[-1]]

    if queues:
        alloc_ax.stackplot(
            xs,
            [series(q, "allocated") for q in queues],
            labels=[f"{q} allocated" for q in queues],
            colors=[colors[q] for q in queues],
            step="post",
            alpha=0.8,
        )
    for q in queues:
        col = colors[q]
        fair_ax.step(xs, series(q, "fair_share"), where="post", color=col, linewidth=1.0, label=f"{q} fair share")
        use_ax.step(xs, series(q, "usage"), where="post", color=col, linewidth=1.4, label=f"{q} usage")
        share = rec.weights.get(q, 0.0) / weight_total
        for ax in (use_ax, cum_ax):
            ax.axhline(share, color=col, linewidth=1, linestyle=":", label=f"{q} weight share ({share:.0%})")
    cum_t, cum = _cumulative_share(res, queues)
    for q in queues:
        cum_ax.plot([t / scale for t in cum_t], cum[q], color=colors[q], linewidth=1.4, label=f"{q} share of GPU time")
    p = rec.params
    half = f", half-life {human_duration(p.half_life_period)}" if p.half_life_period else ""
    window = p.cron_string if p.window_type == "cron" else human_duration(p.window_size)
    alloc_ax.set_title(f"{title}: kValue {rec.k_value:g}, {p.window_type} window {window}{half}", fontsize=10)
    top = max(res.total_gpus * 1.08, 1)
    for ax, label, ymax in (
        (alloc_ax, "allocated GPUs", top),
        (fair_ax, "fair share (GPUs)", top),
        (use_ax, "usage", 1.05),
        (cum_ax, "share so far", 1.05),
    ):
        ax.set_ylim(0, ymax)
        ax.set_ylabel(label)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    cum_ax.set_xlabel(f"simulated time ({unit})")
    cum_ax.set_xlim(xs[0], max(xs[-1], xs[0] + 1e-9))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _cumulative_share(res: SimResult, queues: list[str]) -> tuple[list[float], dict[str, list[float]]]:
    """Each queue's share of all GPU time allocated to ``queues`` from the start up to each allocation change."""
    acc = dict.fromkeys(queues, 0.0)
    ts: list[float] = []
    out: dict[str, list[float]] = {q: [] for q in queues}
    samples = [*res.samples, (res.end, res.samples[-1][1] if res.samples else {})]
    for (t0, alloc), (t1, _) in pairwise(samples):
        for q in queues:
            acc[q] += alloc.get(q, 0.0) * max(0.0, t1 - t0)
        total = sum(acc.values())
        if total > 0:
            ts.append(t1)
            for q in queues:
                out[q].append(acc[q] / total)
    return ts, out

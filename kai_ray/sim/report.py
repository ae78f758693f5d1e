"""PNG plots of a simulation run (matplotlib, Agg backend: no display needed).

Three questions a platform team asks: who held the GPUs over time and against which quota (allocation per queue,
with the GPUs held without doing work set apart), who waited and how long (pending time per workload), and what
happened to each workload (timeline with scale steps, shrinks, restarts and completions). A fourth plot puts
several scheduling policies side by side on the same workload.

matplotlib is imported when a plot is drawn, not when this module is imported, so a caller can catch a missing
matplotlib (:class:`PlotsUnavailable`) and still print its story and tables.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

from kai_ray.durations import clock, span
from kai_ray.sim.engine import SimResult
from kai_ray.sim.workloads import WorkloadBase

MANY = 60  # above this many workloads, per-workload bars and labels give way to aggregate views
HELD = "held, not working"
STOPPING = ("restart", "stop", "suspend")  # eviction outcomes that stop a run


class PlotsUnavailable(RuntimeError):
    """matplotlib is not installed; the message says how to get it."""


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (files, no display), shared by the report and the sweep; without the
    'plots' extra, :class:`PlotsUnavailable` naming it."""
    try:
        import matplotlib
    except ImportError:
        raise PlotsUnavailable(
            "plots need matplotlib, which comes with the 'plots' extra: in a kai-ray checkout, pip install '.[plots]'"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def require_plots() -> None:
    """Raise :class:`PlotsUnavailable` now, so a command asked for plots fails before a long simulation, not after."""
    pyplot()


def _unit(span: float) -> tuple[float, str]:
    if span <= 3 * 3600:
        return 60.0, "minutes"
    if span <= 3 * 86400:
        return 3600.0, "hours"
    return 86400.0, "days"


def _colors(plt: Any, queues: list[str]) -> dict[str, str]:
    import matplotlib.colors

    cmap = plt.get_cmap("tab10")
    return {q: matplotlib.colors.to_hex(cmap(i % 10)) for i, q in enumerate(queues)}


def _queues(res: SimResult) -> list[str]:
    queues = list(res.queues)
    for w in res.workloads:
        if w.queue and w.queue not in queues:
            queues.append(w.queue)
    return queues


def write_report(res: SimResult, out_dir: str | Path, title: str = "kai-ray simulation") -> list[Path]:
    plt = pyplot()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    queues = _queues(res)
    colors = _colors(plt, queues)
    scale, unit = _unit(max(1.0, res.end - res.start))
    paths = [
        _allocation(plt, res, out / "gpu-allocation.png", title, queues, colors, scale, unit),
        _pending(plt, res, out / "pending-time.png", title, colors),
        _timeline(plt, res, out / "timeline.png", title, colors, scale, unit),
    ]
    if res.usage is not None and res.usage.samples:
        paths.append(_fair_share(plt, res, out / "fair-share.png", title, colors, scale, unit))
    return paths


# ---------------------------------------------------------------------------------------------------- step series
def _at(samples: list[tuple[float, dict[str, float]]], times: list[float], t: float) -> dict[str, float]:
    i = bisect_right(times, t) - 1
    return samples[i][1] if i >= 0 else {}


def _series(
    res: SimResult, groups: list[str], by_workload: bool = False
) -> tuple[list[float], dict[str, list[float]], dict[str, list[float]]]:
    """Working and held-not-working GPUs per group (leaf queue, or workload with ``by_workload``) on one time grid
    from start to end. Queue totals come from the engine's samples; workload totals from the run's events."""
    queue_of = {w.key: w.queue for w in res.workloads}
    if by_workload:
        alloc: list[tuple[float, dict[str, float]]] = []
        for key, hist in gpu_history(res).items():
            alloc.extend((t, {key: v}) for t, v in hist)
        alloc = _merge(alloc)
    else:
        alloc = list(res.samples)
    held = [
        (t, _sum_by(h, (lambda k: k) if by_workload else (lambda k: queue_of.get(k, "")))) for t, h in res.held_samples
    ]
    grid = sorted({res.start, res.end, *(t for t, _ in alloc), *(t for t, _ in held)})
    grid = [t for t in grid if res.start <= t <= res.end]
    tiny = (res.end - res.start) / 500.0  # transients shorter than this draw as slivers, not information
    grid = [t for i, t in enumerate(grid) if i == 0 or i + 1 == len(grid) or grid[i + 1] - t > tiny]
    at, ht = [t for t, _ in alloc], [t for t, _ in held]
    working: dict[str, list[float]] = {g: [] for g in groups}
    idle: dict[str, list[float]] = {g: [] for g in groups}
    for t in grid:
        a, h = _at(alloc, at, t), _at(held, ht, t)
        for g in groups:
            hg = min(h.get(g, 0.0), a.get(g, 0.0))
            working[g].append(a.get(g, 0.0) - hg)
            idle[g].append(hg)
    return grid, working, idle


def _sum_by(values: dict[str, float], group: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in values.items():
        out[group(k)] = out.get(group(k), 0.0) + v
    return out


def _merge(changes: list[tuple[float, dict[str, float]]]) -> list[tuple[float, dict[str, float]]]:
    """Per-key step changes -> full snapshots in time order."""
    out: list[tuple[float, dict[str, float]]] = []
    cur: dict[str, float] = {}
    for t, delta in sorted(changes, key=lambda c: c[0]):
        cur = {**cur, **delta}
        snap = {k: v for k, v in cur.items() if v > 1e-9}
        if out and out[-1][0] == t:
            out[-1] = (t, snap)
        else:
            out.append((t, snap))
    return out


def _stack(
    ax: Any, res: SimResult, queues: list[str], colors: dict[str, str], scale: float, by_workload: bool = False
) -> None:
    """Stacked allocation per queue (or workload): solid for working GPUs, hatched for GPUs held without working."""
    grid, working, idle = _series(res, queues, by_workload)
    xs = [t / scale for t in grid]
    ys: list[list[float]] = []
    fills: list[str] = []
    labels: list[str | None] = []
    hatches: list[str | None] = []
    held_labelled = False
    for q in queues:
        if any(v > 0 for v in working[q]):
            ys.append(working[q])
            fills.append(colors[q])
            labels.append(q)
            hatches.append(None)
        if any(v > 0 for v in idle[q]):
            ys.append(idle[q])
            fills.append(colors[q])
            labels.append(None if held_labelled else HELD)
            hatches.append("////")
            held_labelled = True
    if ys:
        polys = ax.stackplot(xs, ys, colors=fills, labels=labels, step="post", alpha=0.85, linewidth=0)
        for poly, hatch in zip(polys, hatches, strict=True):
            if hatch:
                poly.set_hatch(hatch)
                poly.set_edgecolor("black")
                poly.set_alpha(0.45)
    ax.axhline(res.total_gpus, color="black", linewidth=1, linestyle="--", label=f"cluster ({res.total_gpus:g} GPUs)")
    ax.set_xlim(xs[0], max(xs[-1], xs[0] + 1e-9))
    ax.set_ylim(0, max(res.total_gpus * 1.12, 1))


def _eviction_marks(ax: Any, res: SimResult, scale: float, legend: bool = True) -> None:
    """Vertical marks at evictions: dotted orange where the victim kept running (shrink), red where its run stopped."""
    seen: set[str] = set()
    for e in res.events:
        if e["type"] not in ("preempt", "reclaim", "evict") or e.get("outcome") == "cleanup":
            continue
        stop = e.get("outcome") in STOPPING or (e.get("outcome") is None and not e.get("elastic"))
        label = "eviction: run stopped or restarted" if stop else "eviction: shrink, run goes on"
        ax.axvline(
            e["t"] / scale,
            color="red" if stop else "darkorange",
            linewidth=1.2,
            linestyle="-" if stop else ":",
            alpha=0.8,
            label=label if legend and label not in seen else None,
        )
        seen.add(label)


def _allocation(
    plt: Any,
    res: SimResult,
    path: Path,
    title: str,
    queues: list[str],
    colors: dict[str, str],
    scale: float,
    unit: str,
) -> Path:
    used = [q for q in queues if any(s.get(q, 0.0) > 0 for _, s in res.samples)]
    panels = used if 1 < len(used) <= 6 else []
    fig, axes = plt.subplots(
        1 + len(panels),
        1,
        figsize=(10, 4.2 + 1.5 * len(panels)),
        sharex=True,
        gridspec_kw={"height_ratios": [2.6] + [1.0] * len(panels)},
        squeeze=False,
    )
    ax = axes[0][0]
    _stack(ax, res, used, colors, scale)
    _eviction_marks(ax, res, scale)
    ax.set_ylabel("allocated GPUs")
    ax.set_title(f"{title}: GPU allocation per queue")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    grid, working, idle = _series(res, used)
    xs = [t / scale for t in grid]
    for row, q in enumerate(panels, start=1):
        pax = axes[row][0]
        total = [a + b for a, b in zip(working[q], idle[q], strict=True)]
        pax.fill_between(xs, total, step="post", color=colors[q], alpha=0.85, linewidth=0)
        quota = res.gpu_quotas.get(q)
        top = max([*total, quota or 0.0, 1.0])
        if quota is not None:
            pax.axhline(quota, color="black", linewidth=1.2, linestyle="--")
            pax.text(  # inside the axes, right-aligned over the line: outside, the figure's edge cut it
                0.995,
                quota / (top * 1.25),
                f"quota {quota:g}",
                transform=pax.transAxes,
                fontsize=8,
                ha="right",
                va="bottom",
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.7, "pad": 1},
            )
        pax.set_ylim(0, top * 1.25)
        pax.set_ylabel(q, fontsize=9, rotation=0, ha="right", va="center")
        pax.tick_params(labelsize=8)
        _eviction_marks(pax, res, scale, legend=False)
    axes[-1][0].set_xlabel(f"simulated time ({unit})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _pending(plt: Any, res: SimResult, path: Path, title: str, colors: dict[str, str]) -> Path:
    arrived = [w for w in res.workloads if w.job is not None]
    fig, ax = plt.subplots(
        figsize=(10, max(3.0, min(0.45 * len(arrived) + 1.6, 12.0)) if len(arrived) <= MANY else 4.5)
    )
    scale, unit = _unit(max([w.pending_seconds for w in arrived] + [60.0]))
    if len(arrived) <= MANY:
        names = [w.key for w in arrived]
        first = [_first_wait(w) / scale for w in arrived]
        later = [max(0.0, w.pending_seconds / scale - f) for w, f in zip(arrived, first, strict=True)]
        cols = [colors.get(w.queue, "grey") for w in arrived]
        ax.barh(names, first, color=cols, label="before its first start")
        ax.barh(names, later, left=first, color=cols, alpha=0.45, hatch="////", label="after evictions")
        ax.invert_yaxis()
        top = max([f + g for f, g in zip(first, later, strict=True)] + [60.0 / scale])
        ax.set_xlim(0, top * 1.45)
        for i, w in enumerate(arrived):
            total = first[i] + later[i]
            text = f"  {clock(w.pending_seconds)}" if total > 0 else "  0 (ran as soon as it arrived)"
            if w.evicted_pods:
                text += f", {w.evicted_pods} pod{'' if w.evicted_pods == 1 else 's'} evicted"
            if w.preemptions:
                text += f", run stopped x{w.preemptions}"
            elif w.evicted_pods:
                text += " (run kept going)"
            ax.annotate(text, (total, i), va="center", fontsize=8, color="red" if w.preemptions else "black")
        ax.set_xlabel(f"time pending ({unit})")
        from matplotlib.patches import Patch

        queues = list(dict.fromkeys(w.queue for w in arrived))
        ax.legend(
            handles=[
                *(Patch(color=colors.get(q, "grey"), label=f"queue {q}") for q in queues),
                Patch(facecolor="white", edgecolor="#444444", label="before its first start"),
                Patch(facecolor="white", edgecolor="#444444", hatch="////", label="after evictions"),
            ],
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            fontsize=8,
        )
    else:
        vals = [w.pending_seconds / scale for w in arrived]
        ax.hist(vals, bins=50, color="tab:blue")
        ax.set_yscale("log")
        ax.set_xlabel(f"time pending ({unit})")
        ax.set_ylabel("workloads")
    ax.set_title(f"{title}: pending time per workload")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _first_wait(w: WorkloadBase) -> float:
    if w.first_running_at is not None:
        return w.first_running_at - w.arrive_at
    return w.pending_seconds


def gpu_history(res: SimResult) -> dict[str, list[tuple[float, float]]]:
    """GPUs each workload holds over time, from the binds, evictions, scale steps and completions."""
    changes: list[tuple[float, int, str, float]] = []
    for e in res.events:
        if e["type"] == "bind":
            changes.append((e["t"], 0, e["workload"], e.get("gpus", 0.0)))
        elif e["type"] in ("preempt", "reclaim", "evict"):
            changes.append((e["t"], 0, e["workload"], -e.get("gpus", 0.0)))
        elif e["type"] == "complete":
            changes.append((e["t"], 1, e["workload"], float("nan")))
    for t, key, _grp, _n, _removed, gpus in res.scales:
        changes.append((t, 0, key, -gpus))
    out: dict[str, list[tuple[float, float]]] = {}
    held: dict[str, float] = {}
    for t, _, key, delta in sorted(changes, key=lambda c: (c[0], c[1])):
        held[key] = 0.0 if delta != delta else max(0.0, held.get(key, 0.0) + delta)
        hist = out.setdefault(key, [])
        if hist and hist[-1][0] == t:
            hist[-1] = (t, held[key])
        else:
            hist.append((t, held[key]))
    return out


def _settled(hist: list[tuple[float, float]], gap: float) -> list[tuple[float, float]]:
    """Keep only values that held for at least ``gap`` (a burst of elastic steps shows as its end value)."""
    out: list[tuple[float, float]] = []
    for i, (t, v) in enumerate(hist):
        nxt = hist[i + 1][0] if i + 1 < len(hist) else None
        if (nxt is None or nxt - t >= gap) and v > 0 and (not out or out[-1][1] != v):
            out.append((t, v))
    return out


def _eviction_bursts(res: SimResult, gap: float = 60.0) -> list[tuple[float, str, str, int]]:
    """(time, workload, ``shrink`` or ``stop``, pods evicted): one mark per burst of evictions of a workload with one
    outcome, events less than ``gap`` seconds apart merged, as the demo's story tells them (the serving gang's
    preemption takes one worker a cycle, two cycles in a row, and is one step of the story, one mark of the plot)."""
    marks: list[tuple[float, str, str, int]] = []
    last: dict[tuple[str, str], int] = {}
    for e in res.events:
        if e["type"] not in ("preempt", "reclaim", "evict") or e.get("outcome") == "cleanup":
            continue
        key = (e["workload"], "shrink" if e.get("outcome") == "shrink" else "stop")
        i = last.get(key)
        if i is not None and e["t"] - marks[i][0] < gap and marks[i][2] == key[1]:
            t, w, kind, pods = marks[i]
            marks[i] = (t, w, kind, pods + e["pods"])
        else:
            last[key] = len(marks)
            marks.append((e["t"], key[0], key[1], e["pods"]))
    return marks


def _timeline(
    plt: Any, res: SimResult, path: Path, title: str, colors: dict[str, str], scale: float, unit: str
) -> Path:
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    arrived = [w for w in res.workloads if w.job is not None]
    many = len(arrived) > MANY
    height = 4.5 if many else max(2.8, 0.65 * len(arrived) + 1.8)
    fig, ax = plt.subplots(figsize=(10, min(height, 14.0)))
    segs: list[list[tuple[float, float]]] = []
    seg_colors: list[str] = []
    row = {w.key: i for i, w in enumerate(arrived)}
    marks: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in ("stop", "shrink", "scale", "done")}
    for i, w in enumerate(arrived):
        for start, end, state in w.intervals:
            segs.append([(start / scale, i), (end / scale, i)])
            seg_colors.append(colors.get(w.queue, "grey") if state == "Running" else "#c8c8c8")
        if w.completed_at is not None:
            marks["done"][0].append(w.completed_at / scale)
            marks["done"][1].append(i)
    for t, key, kind, pods in _eviction_bursts(res):
        if key in row:
            marks[kind][0].append(t / scale)
            marks[kind][1].append(row[key])
            if not many:
                where = (t / scale, row[key])
                ax.annotate(f"-{pods}", where, xytext=(-3, -14), textcoords="offset points", fontsize=7, color="red")
    for t, key, _grp, replicas, _removed, _gpus in res.scales:
        if key in row:
            marks["scale"][0].append(t / scale)
            marks["scale"][1].append(row[key])
            if not many:
                ax.annotate(
                    f"scaled to {replicas}",
                    (t / scale, row[key]),
                    xytext=(3, -13),
                    textcoords="offset points",
                    fontsize=7,
                    color="purple",
                )
    ax.add_collection(LineCollection(segs, colors=seg_colors, linewidths=1.0 if many else 11.0))
    if not many:
        for key, hist in gpu_history(res).items():
            if key not in row:
                continue
            for t, v in _settled(hist, 60.0):
                ax.annotate(f"{v:g}", (t / scale, row[key]), xytext=(2, 8), textcoords="offset points", fontsize=7)
    style = {
        "stop": ("X", "red", 80),
        "shrink": ("v", "darkorange", 60),
        "scale": ("v", "purple", 60),
        "done": ("|", "black", 220),
    }
    for kind, (xs, ys) in marks.items():
        marker, color, size = style[kind]
        ax.scatter(xs, ys, marker=marker, color=color, s=14 if many else size, zorder=3)
    ax.set_xlim(res.start / scale, max(res.end / scale, res.start / scale + 1e-9))
    ax.set_ylim(len(arrived) - 0.4, -0.7)
    if many:
        ax.set_ylabel(f"workloads ({len(arrived)}, in arrival order)")
        ax.set_yticks([])
    else:
        ax.set_yticks(range(len(arrived)))
        ax.set_yticklabels([w.key for w in arrived], fontsize=9)
    ax.set_xlabel(f"simulated time ({unit}); numbers: GPUs held")
    pended = any(state != "Running" for w in arrived for _, _, state in w.intervals)
    ran = {w.queue for w in arrived for _, _, state in w.intervals if state == "Running"}
    handles = [  # what the plot shows, and nothing it does not: a legend entry is a promise of a mark
        *([Line2D([0], [0], color="#c8c8c8", linewidth=6, label="pending")] if pended else []),
        *[Line2D([0], [0], color=col, linewidth=6, label=f"running ({q})") for q, col in colors.items() if q in ran],
        *(
            [Line2D([0], [0], marker="v", color="darkorange", linestyle="", label="shrunk (kept running); -N: pods")]
            if marks["shrink"][0]
            else []
        ),
        *(
            [Line2D([0], [0], marker="X", color="red", linestyle="", label="run stopped / restarted")]
            if marks["stop"][0]
            else []
        ),
        *(
            [Line2D([0], [0], marker="v", color="purple", linestyle="", label="replicas scaled")]
            if marks["scale"][0]
            else []
        ),
        *(
            [Line2D([0], [0], marker="|", color="black", linestyle="", markersize=12, label="completed")]
            if marks["done"][0]
            else []
        ),
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax.set_title(f"{title}: timeline")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------------------- comparison
def write_comparison(
    runs: Sequence[tuple[str, SimResult, str]], path: str | Path, title: str = "Same workload, three schedulers"
) -> Path:
    """One panel per policy, same axes: GPUs per workload (hatched: held without doing work), evictions marked.

    ``runs``: (policy title, result, a one-line caption with its key numbers)."""
    plt = pyplot()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    keys: list[str] = []
    for _, res, _ in runs:
        keys.extend(w.key for w in res.workloads if w.job is not None and w.key not in keys)
    colors = _colors(plt, keys)
    end = max(res.end for _, res, _ in runs)
    start = min(res.start for _, res, _ in runs)
    scale, unit = _unit(max(1.0, end - start))
    fig, axes = plt.subplots(len(runs), 1, figsize=(10, 2.3 * len(runs) + 1.2), sharex=True, squeeze=False)
    legend: dict[str, Any] = {}
    for i, (name, res, caption) in enumerate(runs):
        ax = axes[i][0]
        _stack(ax, res, keys, colors, scale, by_workload=True)
        _eviction_marks(ax, res, scale)
        ax.set_xlim(start / scale, end / scale)
        if res.end < end:
            ax.axvspan(res.end / scale, end / scale, color="#eeeeee", zorder=0)
            right = (res.end / scale) > (start + 0.8 * (end - start)) / scale  # near the right edge: text to its left
            ax.text(
                res.end / scale,
                res.total_gpus * 0.5,
                "all training done  " if right else "  all training done",
                fontsize=8,
                color="grey",
                ha="right" if right else "left",
            )
        ax.set_ylabel("GPUs")
        ax.set_title(f"{name}: {caption}", fontsize=9, loc="left")
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, h)
    fig.legend(list(legend.values()), list(legend), loc="upper right", fontsize=8, ncol=3)
    axes[-1][0].set_xlabel(f"simulated time ({unit})")
    fig.suptitle(title, x=0.01, ha="left", fontsize=11, fontweight="bold")
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


# ---------------------------------------------------------------------------------------------- time-based fair share
def _fair_share(
    plt: Any, res: SimResult, path: Path, title: str, colors: dict[str, str], scale: float, unit: str
) -> Path:
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
    half = f", half-life {span(p.half_life_period, exact=True)}" if p.half_life_period else ""
    window = p.cron_string if p.window_type == "cron" else span(p.window_size, exact=True)
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

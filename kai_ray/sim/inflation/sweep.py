"""Sweeps of the inflation protocol: pod lists x placement policies x seeds, in this process or as Ray tasks.

Why Ray for this and not a process pool: a sweep of the paper's grid (several lists, a handful of policies, ten
seeds) is hundreds of independent runs of a minute or more each, more than one machine wants, and a Ray cluster is
what kai-ray's users already have. Each run is one task; the driver reads the CSV files once and puts the parsed
nodes and pods in the object store, so workers on other machines need no copy of the files. Without an address a
local Ray is started for the sweep and stopped after it; with one, the sweep joins that cluster and leaves it up.

The combined document carries every run's own document plus a summary per list x policy (mean, min and max over
seeds at each 10% of arrived request), and :func:`plot_sweep` draws the curves, one line per policy.
"""

from __future__ import annotations

import socket
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kai_ray
from kai_ray.scheduler.snapshot import Node
from kai_ray.sim.inflation.protocol import PUBLISHED, InflationError, InflationSpec, read_pod_list, run_inflation
from kai_ray.sim.trace import TracePod, read_nodes


@dataclass(frozen=True)
class SweepPlan:
    nodes: str
    pods: tuple[str, ...]
    placements: tuple[str, ...]
    seeds: tuple[int, ...]
    factor: float = 1.3
    actions: tuple[str, ...] | None = None
    batch: float = 0.01

    def cells(self) -> list[tuple[str, InflationSpec]]:
        """Every run of the sweep, list-major then policy then seed (the order of the combined document)."""
        return [
            (pods, InflationSpec(self.factor, seed, placement, self.actions, self.batch))
            for pods in self.pods
            for placement in self.placements
            for seed in self.seeds
        ]

    def validate(self) -> None:
        """Raise :class:`InflationError` before any run starts (a bad policy name must not cost half a sweep)."""
        if not self.pods or not self.placements or not self.seeds:
            raise InflationError("a sweep needs at least one pod list, placement and seed")
        for placement in self.placements:
            InflationSpec(self.factor, 0, placement, self.actions, self.batch).validate()


def list_name(path: str) -> str:
    return Path(path).name.removesuffix(".csv")


def run_cell(
    nodes: list[Node],
    pods: list[TracePod],
    pods_path: str,
    spec: InflationSpec,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """One run as a document (the unit of work of a Ray task)."""
    doc = run_inflation(nodes, pods, spec, progress).document()
    return {"pods": list_name(pods_path), **doc}


Tick = Callable[[int, int], None]  # (runs done, runs in all)
OnRun = Callable[[str, InflationSpec], Callable[[int, int], None] | None]  # per-run pod progress, if wanted


def run_local(plan: SweepPlan, tick: Tick | None = None, on_run: OnRun | None = None) -> list[dict[str, Any]]:
    """The sweep in this process, one run after another (CPU seconds measured here are the run's own)."""
    nodes = read_nodes(plan.nodes)
    lists = {p: read_pod_list(p) for p in plan.pods}
    cells = plan.cells()
    out = []
    for i, (pods_path, spec) in enumerate(cells):
        out.append(run_cell(nodes, lists[pods_path], pods_path, spec, on_run(pods_path, spec) if on_run else None))
        if tick:
            tick(i + 1, len(cells))
    return out


def reachable(address: str, timeout: float = 5.0) -> None:
    """Fail fast, as :class:`ConnectionError`, when nothing listens at ``host:port`` (``ray://`` too): a Ray driver
    pointed at a dead address retries for minutes before it says so."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout).close()
    except ValueError:
        raise ConnectionError(f"{address}: not host:port") from None
    except OSError as exc:
        raise ConnectionError(f"{address}: {exc.strerror or exc}") from None


def run_ray(
    plan: SweepPlan, address: str | None = None, tick: Tick | None = None, num_cpus: int | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The sweep as Ray tasks (one CPU each). Returns the run documents in plan order and facts about the cluster.
    Joins Ray as it is when this process already runs a driver, else the cluster at ``address``, else a local Ray
    that it stops afterwards (it never stops a cluster it did not start)."""
    import ray

    nodes = read_nodes(plan.nodes)
    lists = {p: read_pod_list(p) for p in plan.pods}
    started = not ray.is_initialized()
    if started:
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": "warning"}
        if address:
            reachable(address)
            # workers of a cluster need not have kai-ray: its code travels with the job (numpy, pydantic and
            # PyYAML, all it imports besides, come with ray[default])
            kwargs["address"] = address
            kwargs["runtime_env"] = {"py_modules": [str(Path(kai_ray.__file__).parent)]}
        elif num_cpus is not None:
            kwargs["num_cpus"] = num_cpus
        ray.init(**kwargs)
    try:
        info = {"address": address or "local", "cpus": ray.cluster_resources().get("CPU", 0.0)}
        task = ray.remote(num_cpus=1, max_retries=2)(run_cell)
        nodes_ref = ray.put(nodes)
        list_refs = {p: ray.put(pods) for p, pods in lists.items()}
        cells = plan.cells()
        refs = [task.remote(nodes_ref, list_refs[p], p, spec) for p, spec in cells]
        index = {ref: i for i, ref in enumerate(refs)}
        out: list[dict[str, Any] | None] = [None] * len(refs)
        waiting = list(refs)
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=1)
            for ref in ready:
                out[index[ref]] = ray.get(ref)
            if tick:
                tick(len(refs) - len(waiting), len(refs))
        return [d for d in out if d is not None], info
    finally:
        if started:
            ray.shutdown()


def _mean_min_max(values: Sequence[float]) -> dict[str, float]:
    return {"mean": round(statistics.fmean(values), 3), "min": round(min(values), 3), "max": round(max(values), 3)}


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per pod list x placement: unallocated-GPU share at each mark over the seeds, drops, moves and CPU seconds."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["pods"], r["placement"]), []).append(r)
    out = []
    for (pods, placement), rs in groups.items():
        marks: dict[int, list[float]] = {}
        for r in rs:
            for m in r["marks"]:
                marks.setdefault(m["mark_pct"], []).append(m["unallocated_pct"])
        out.append(
            {
                "pods": pods,
                "placement": placement,
                "seeds": [r["seed"] for r in rs],
                "unallocated_pct": _mean_min_max([r["unallocated_pct"] for r in rs]),
                "marks": {str(m): _mean_min_max(v) for m, v in sorted(marks.items())},
                "dropped": _mean_min_max([r["dropped"] for r in rs]),
                "moves": _mean_min_max([r["moves"] for r in rs]),
                "cpu_seconds": _mean_min_max([r["cpu_seconds"] for r in rs]),
                "published_130": {k: v[130] for k, v in PUBLISHED.get(pods, {}).items() if 130 in v},
            }
        )
    return out


def combined(plan: SweepPlan, runs: list[dict[str, Any]], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "protocol": "workload inflation (Weng et al., ATC'23)",
        "nodes": plan.nodes,
        "pods": list(plan.pods),
        "factor": plan.factor,
        "placements": list(plan.placements),
        "seeds": list(plan.seeds),
        "batch": plan.batch,
        **(extra or {}),
        "summary": summarize(runs),
        "runs": runs,
        "errors": [f"{r['pods']}/{r['placement']}/seed {r['seed']}: {e}" for r in runs for e in r["errors"]][:20],
    }


def _grid_mean(runs: list[dict[str, Any]], grid: list[float]) -> tuple[list[float], list[float], list[float]]:
    import numpy as np

    ys = []
    for r in runs:
        xs = [0.0] + [p[0] for p in r["curve"]]
        vs = [100.0] + [p[1] for p in r["curve"]]
        ys.append(np.interp(grid, xs, vs, right=np.nan))
    arr = np.array(ys)
    return list(np.nanmean(arr, axis=0)), list(np.nanmin(arr, axis=0)), list(np.nanmax(arr, axis=0))


def plot_sweep(doc: dict[str, Any], path: str | Path) -> Path:
    """Unallocated GPUs (% of capacity) against arrived GPU request (% of capacity): one panel per pod list, one
    line per policy (mean over seeds, the band is min..max), published means drawn as markers where known. The
    view is the plateau and how the curves reach it: before the cluster fills, every policy sits on the dotted
    diagonal (every pod placed) or just above it."""
    import warnings

    from kai_ray.sim.report import pyplot

    plt = pyplot()
    runs = doc["runs"]
    lists = list(dict.fromkeys(r["pods"] for r in runs))
    placements = list(dict.fromkeys(r["placement"] for r in runs))
    fig, axes = plt.subplots(1, len(lists), figsize=(7 * len(lists), 5), squeeze=False)
    cmap = plt.get_cmap("tab10")
    markers = "os^vDP*X"
    for ax, name in zip(axes[0], lists, strict=True):
        mine = [r for r in runs if r["pods"] == name]
        end = max(p[0] for r in mine for p in r["curve"])
        grid = [x / 2 for x in range(0, int(end * 2) + 1)]
        finals = [r["unallocated_pct"] for r in mine]
        finals += [v for points in PUBLISHED.get(name, {}).values() for v in points.values()]
        top = max(5.0, 2.5 * max(finals))  # the plateau and how the curves reach it, not the whole diagonal
        lo = max(0.0, min(100.0 - top - 5.0, end - 30.0))
        for i, placement in enumerate(placements):
            rs = [r for r in mine if r["placement"] == placement]
            if not rs:
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a seed that ends a little earlier: NaN there
                mean, mn, mx = _grid_mean(rs, grid)
            color = cmap(i % 10)
            final = statistics.fmean(r["unallocated_pct"] for r in rs)
            label = f"{placement} ({len(rs)} seed{'s' if len(rs) > 1 else ''}): {final:.2f}%"
            ax.plot(grid, mean, color=color, lw=2, label=label)
            if len(rs) > 1:
                ax.fill_between(grid, mn, mx, color=color, alpha=0.2, lw=0)
        for j, (policy, points) in enumerate(PUBLISHED.get(name, {}).items()):
            xs = [x for x in sorted(points) if x <= end + 1]
            if xs:
                label = f"published {policy}: {points[xs[-1]]:.2f}%"
                style = {"ls": "none", "marker": markers[j % len(markers)], "color": "0.35", "ms": 7, "mfc": "none"}
                ax.plot(xs, [points[x] for x in xs], label=label, **style)
        ax.plot([lo, 100.0], [100.0 - lo, 0.0], ls=":", color="0.6", lw=1, label="every pod placed")
        ax.set_xlim(lo, end + 1)
        ax.set_ylim(0, top)
        ax.set_xlabel("arrived GPU request (% of GPU capacity)")
        ax.set_ylabel("unallocated GPUs (% of capacity)")
        ax.set_title(f"{name}: x{doc['factor']:g}, {doc['nodes'].rsplit('/', 1)[-1]}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper right")
    fig.suptitle("Workload inflation: GPUs left unallocated as requests arrive (lower is better)")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out

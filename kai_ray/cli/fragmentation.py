"""The inflation protocol on the command line: ``simulate --inflate``, ``bench fragmentation`` and ``sweep``.

All three run :mod:`kai_ray.sim.sweep` plans (pod lists x placements x seeds); they differ in defaults and where
the runs go: ``simulate`` runs the given files in this process, ``bench fragmentation`` the shared Alibaba files
in this process (so CPU seconds are comparable), ``sweep`` as Ray tasks on a local or existing Ray cluster.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kai_ray.cli import CliError, output
from kai_ray.sim.inflation import (
    DATA_ENV,
    PUBLISHED,
    InflationError,
    InflationSpec,
    data_dir,
    known_placements,
)
from kai_ray.sim.sweep import SweepPlan
from kai_ray.sim.trace import TraceError

PLOT_NAME = "fragmentation.png"
JSON_NAME = "fragmentation.json"


def split_list(value: str, option: str) -> tuple[str, ...]:
    items = tuple(v.strip() for v in value.split(",") if v.strip())
    if not items:
        raise CliError(f"{option}: give at least one value (comma-separated)")
    return items


def parse_seeds(value: str, option: str = "--seeds") -> tuple[int, ...]:
    """``1,2,5`` or ``1-10`` (inclusive), or both: ``1-3,7``."""
    seeds: list[int] = []
    for item in split_list(value, option):
        lo, sep, hi = item.partition("-") if not item.startswith("-") else (item, "", "")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise CliError(f"{option}: {item!r} is not a seed or a range like 1-10") from None
        if b < a:
            raise CliError(f"{option}: {item!r} is an empty range")
        seeds.extend(range(a, b + 1))
    return tuple(dict.fromkeys(seeds))


def resolve_list(value: str, data: Path, prefix: str) -> str:
    """A file path, a file name inside the data directory, or a short name (``default``, ``multigpu50``)."""
    for cand in (Path(value), data / value, data / f"{value}.csv", data / f"{prefix}{value}.csv"):
        if cand.is_file():
            return str(cand)
    return value  # reading it reports the missing file with its name


def make_plan(
    nodes: str,
    pods: str,
    placement: str,
    seeds: tuple[int, ...],
    factor: float,
    actions: str | None,
    batch: float,
    data: Path | None = None,
) -> SweepPlan:
    if data is not None:
        nodes = resolve_list(nodes, data, "openb_node_list_")
    pod_files = split_list(pods, "--pods")
    if data is not None:
        pod_files = tuple(resolve_list(p, data, "openb_pod_list_") for p in pod_files)
    plan = SweepPlan(
        nodes=nodes,
        pods=pod_files,
        placements=split_list(placement, "--placement"),
        seeds=seeds,
        factor=factor,
        actions=split_list(actions, "--actions") if actions is not None else None,
        batch=batch,
    )
    try:
        plan.validate()
    except InflationError as exc:
        raise CliError(str(exc)) from None
    where = f" (nor in {data}: give a path, --data or set {DATA_ENV})" if data is not None else ""
    for option, path in (("--nodes", plan.nodes), *(("--pods", p) for p in plan.pods)):
        if not Path(path).is_file():
            raise CliError(f"{option}: {path}: no such file{where}")
    return plan


def progress_bar(label: str) -> Progress:
    return Progress(
        TextColumn(f"[bold]{label}[/bold] {{task.description}}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=False,
    )


def run_here(plan: SweepPlan, show: bool) -> list[dict[str, Any]]:
    """The plan in this process; with ``show``, a progress bar per run (pods arrived)."""
    from kai_ray.sim.sweep import list_name, run_local

    try:
        if not show:
            return run_local(plan)
        with progress_bar("inflating") as bar:

            def on_run(pods: str, spec: InflationSpec) -> Callable[[int, int], None]:
                task = bar.add_task(f"{list_name(pods)} {spec.placement} seed {spec.seed}", total=None)

                def tick(done: int, total: int) -> None:
                    bar.update(task, completed=done, total=total)

                return tick

            return run_local(plan, on_run=on_run)
    except (TraceError, InflationError) as exc:
        raise CliError(str(exc)) from None


def print_summary(doc: dict[str, Any], console: Console) -> None:
    marks = sorted({int(m) for s in doc["summary"] for m in s["marks"] if int(m) >= 100})
    table = Table(title=f"GPUs left unallocated (% of capacity), x{doc['factor']:g}, {Path(doc['nodes']).name}")
    for col in ("pods", "placement", "seeds", *(f"at {m}%" for m in marks), "min..max (end)", "dropped", "moves",
                "CPU s/run"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("pods", "placement") else "right")
    for s in doc["summary"]:
        table.add_row(
            s["pods"].removeprefix("openb_pod_list_"),
            s["placement"],
            str(len(s["seeds"])),
            *(f"{s['marks'][str(m)]['mean']:.2f}" if str(m) in s["marks"] else "" for m in marks),
            f"{s['unallocated_pct']['min']:.2f}..{s['unallocated_pct']['max']:.2f}",
            f"{s['dropped']['mean']:.0f}",
            f"{s['moves']['mean']:.0f}",
            f"{s['cpu_seconds']['mean']:.1f}",
        )
    console.print(table)
    for name in dict.fromkeys(s["pods"] for s in doc["summary"]):
        pub = PUBLISHED.get(name)
        if pub:
            at = ", ".join(f"{k} {v[130]:.2f}%" for k, v in pub.items() if 130 in v)
            console.print(f"[dim]published at 130% ({name}, 10 seeds): {at}[/dim]")
    for err in doc["errors"][:10]:
        console.print(f"[red]error:[/red] {err}")


def finish(doc: dict[str, Any], as_json: bool, report: str | None, console: Console) -> None:
    """Write the plot (and the JSON) into ``report`` when given, then print the JSON or the table."""
    from kai_ray.sim.report import PlotsUnavailable
    from kai_ray.sim.sweep import plot_sweep

    if report is not None:
        try:
            plot = plot_sweep(doc, Path(report) / PLOT_NAME)
            data = Path(report) / JSON_NAME
            doc["report"] = {"dir": report, "plot": str(plot), "json": str(data)}
            data.write_text(json.dumps(doc, indent=1) + "\n")
        except PlotsUnavailable as exc:
            raise CliError(f"--report: {exc}") from None
        except OSError as exc:
            raise CliError(f"--report: cannot write to {report!r}: {exc.strerror or exc}") from None
    if as_json:
        typer.echo(json.dumps(doc, indent=1))
        return
    print_summary(doc, console)
    if report is not None:
        console.print(f"plot: {doc['report']['plot']}; every run's curve: {doc['report']['json']}")


def simulate_inflation(
    nodes: str | None,
    pods: str | None,
    factor: float,
    seed: int,
    placement: str | None,
    actions: str | None,
    batch: float,
    as_json: bool,
    report: str | None,
) -> None:
    """``kai-ray simulate --trace alibaba-v2023 --inflate F``: the given files, one seed, one or more policies."""
    from kai_ray.sim.sweep import combined

    if not nodes:
        raise CliError("--nodes: required with --trace (the node list CSV: sn, cpu_milli, memory_mib, gpu, model)")
    if not pods:
        raise CliError("--pods: required with --trace (the pod list CSV)")
    plan = make_plan(nodes, pods, placement or "binpack", (seed,), factor, actions, batch)
    t0 = time.process_time()
    runs = run_here(plan, show=sys.stderr.isatty() or not as_json)
    doc = combined(plan, runs, {"cpu_seconds": round(time.process_time() - t0, 3)})
    finish(doc, as_json, report, output.console(130))


def shared_plan(
    data: str | None,
    nodes: str,
    pods: str,
    seeds: str,
    inflate: float,
    placement: str | None,
    actions: str | None,
    batch: float,
) -> SweepPlan:
    """A plan over the shared Alibaba files (``--data``, else the default data directory); every known policy
    unless ``--placement`` names some."""
    d = Path(data) if data else data_dir()
    return make_plan(
        nodes, pods, placement or ",".join(known_placements()), parse_seeds(seeds), inflate, actions, batch, d
    )

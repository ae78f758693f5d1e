"""The inflation protocol on a terminal: a progress bar per run while it runs, then the table (or the JSON) and the
report files.

Why one module for the three commands that run it (``simulate --inflate``, ``bench fragmentation``, ``sweep``): they
must print the same table from the same combined document, so a number read off one compares with the others.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kai_ray.sim.inflation.protocol import PUBLISHED, InflationError, InflationSpec
from kai_ray.sim.inflation.sweep import SweepPlan

PLOT_NAME = "fragmentation.png"
JSON_NAME = "fragmentation.json"


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
    from kai_ray.sim.inflation.sweep import list_name, run_local

    if not show:
        return run_local(plan)
    with progress_bar("inflating") as bar:

        def on_run(pods: str, spec: InflationSpec) -> Callable[[int, int], None]:
            task = bar.add_task(f"{list_name(pods)} {spec.placement} seed {spec.seed}", total=None)

            def tick(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            return tick

        return run_local(plan, on_run=on_run)


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
    """Write the plot (and the JSON) into ``report`` when given, then print the JSON or the table. A report that
    cannot be written is an :class:`InflationError` naming ``--report``."""
    from kai_ray.sim.inflation.sweep import plot_sweep
    from kai_ray.sim.report import PlotsUnavailable

    if report is not None:
        try:
            plot = plot_sweep(doc, Path(report) / PLOT_NAME)
            data = Path(report) / JSON_NAME
            doc["report"] = {"dir": report, "plot": str(plot), "json": str(data)}
            data.write_text(json.dumps(doc, indent=1) + "\n")
        except PlotsUnavailable as exc:
            raise InflationError(f"--report: {exc}") from None
        except OSError as exc:
            raise InflationError(f"--report: cannot write to {report!r}: {exc.strerror or exc}") from None
    if as_json:
        print(json.dumps(doc, indent=1))
        return
    print_summary(doc, console)
    if report is not None:
        console.print(f"plot: {doc['report']['plot']}; every run's curve: {doc['report']['json']}")

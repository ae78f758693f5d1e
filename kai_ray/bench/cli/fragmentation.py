"""``kai-ray bench fragmentation`` and ``kai-ray sweep``: the inflation protocol over the shared Alibaba files,
in this process or as Ray tasks."""

from __future__ import annotations

import sys
import time
from typing import Annotated

import typer
from rich.console import Console

from kai_ray.bench.cli.group import bench
from kai_ray.cli_error import CliError
from kai_ray.sim.inflation.plan import shared_plan
from kai_ray.sim.inflation.protocol import DATA_ENV, DEFAULT_NODES, DEFAULT_PODS, InflationError
from kai_ray.sim.inflation.terminal import finish, progress_bar, run_here
from kai_ray.sim.trace import TraceError

DataOpt = Annotated[
    str | None,
    typer.Option("--data", help=f"Directory of the Alibaba files (default: ${DATA_ENV}; see docs/fragmentation.md)"),
]
NodesOpt = Annotated[str, typer.Option("--nodes", help="Node list: a path or a name in --data")]
PodsOpt = Annotated[str, typer.Option("--pods", help="Pod lists, comma-separated: paths or names (default, ...)")]
SeedsOpt = Annotated[str, typer.Option("--seeds", help="Seeds: 1,2,5 or 1-10")]
InflateOpt = Annotated[float, typer.Option("--inflate", help="Arrived GPU request as a multiple of GPU capacity")]
PlacementOpt = Annotated[
    str | None, typer.Option("--placement", help="Placement policies, comma-separated (default: every known one)")
]
ActionsOpt = Annotated[
    str | None, typer.Option("--actions", help="Scheduler actions, comma-separated (default: all five)")
]
BatchOpt = Annotated[float, typer.Option("--batch", help="Share of GPU capacity arriving per scheduling cycle")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document")]
ReportOpt = Annotated[str | None, typer.Option("--report", help="Write the plot and the JSON into this directory")]


@bench.command("fragmentation")
def bench_fragmentation(
    data: DataOpt = None,
    nodes: NodesOpt = DEFAULT_NODES,
    pods: PodsOpt = DEFAULT_PODS,
    seeds: SeedsOpt = "1-3",
    inflate: InflateOpt = 1.3,
    placement: PlacementOpt = None,
    actions: ActionsOpt = None,
    batch: BatchOpt = 0.01,
    as_json: JsonOpt = False,
    report: ReportOpt = None,
) -> None:
    """The FGD paper's inflation protocol on the shared Alibaba files, in this process: GPUs left unallocated per
    placement policy (mean over seeds) and CPU seconds per run."""
    from kai_ray.sim.inflation.sweep import combined

    try:
        plan = shared_plan(data, nodes, pods, seeds, inflate, placement, actions, batch)
        t0 = time.process_time()
        runs = run_here(plan, show=not as_json)
        doc = combined(plan, runs, {"cpu_seconds": round(time.process_time() - t0, 3)})
        finish(doc, as_json, report, Console(width=None if sys.stdout.isatty() else 130))
    except (TraceError, InflationError) as exc:
        raise CliError(str(exc)) from None


def sweep(
    data: DataOpt = None,
    nodes: NodesOpt = DEFAULT_NODES,
    pods: PodsOpt = DEFAULT_PODS,
    seeds: SeedsOpt = "1-10",
    inflate: InflateOpt = 1.3,
    placement: PlacementOpt = None,
    actions: ActionsOpt = None,
    batch: BatchOpt = 0.01,
    address: Annotated[
        str | None, typer.Option("--address", help="An existing Ray cluster (e.g. ray://head:10001, auto)")
    ] = None,
    cpus: Annotated[int | None, typer.Option("--cpus", help="CPUs of the local Ray (default: all)")] = None,
    as_json: JsonOpt = False,
    report: Annotated[str, typer.Option("--report", help="Directory for the combined plot and JSON")] = "sweep",
) -> None:
    """Pod lists x placement policies x seeds of the inflation protocol as Ray tasks (a local Ray unless
    --address names a cluster); one combined JSON and plot."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise CliError("sweep: needs Ray: in a kai-ray checkout, pip install '.[ray]'") from None
    if cpus is not None and cpus < 1:
        raise CliError(f"--cpus: must be at least 1, got {cpus}")
    if cpus is not None and address:
        raise CliError("--cpus: only for a local Ray (the cluster at --address has its own)")
    from kai_ray.sim.inflation.sweep import combined, reachable, run_ray

    t0 = time.perf_counter()
    try:
        plan = shared_plan(data, nodes, pods, seeds, inflate, placement, actions, batch)
        if address:
            reachable(address)  # before the progress bar: a dead address is one line, not a bar and an error
        if as_json:
            runs, info = run_ray(plan, address, num_cpus=cpus)
        else:
            with progress_bar("sweep") as bar:
                task = bar.add_task(f"{len(plan.cells())} runs", total=len(plan.cells()))
                runs, info = run_ray(plan, address, lambda done, _: bar.update(task, completed=done), cpus)
    except (TraceError, InflationError) as exc:
        raise CliError(str(exc)) from None
    except ConnectionError as exc:
        raise CliError(f"--address: cannot reach the Ray cluster: {exc}") from None
    doc = combined(plan, runs, {"ray": info, "wall_seconds": round(time.perf_counter() - t0, 3)})
    try:
        finish(doc, as_json, report, Console(width=None if sys.stdout.isatty() else 130))
    except InflationError as exc:
        raise CliError(str(exc)) from None

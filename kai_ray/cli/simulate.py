"""``kai-ray simulate``: run a scenario (or replay a trace) through the real podgrouper and scheduler core."""

from __future__ import annotations

import json
import sys
import time
from importlib.resources import as_file, files
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from kai_ray.cli import CliError, StrictOpt, app, note, output, warn_or_fail
from kai_ray.sim.engine import SimResult
from kai_ray.sim.inflation import InflationError, check_placement
from kai_ray.sim.scenario import Scenario, ScenarioError, load_scenario
from kai_ray.sim.trace import TRACE_FORMATS, TraceError, replay_trace

PACKAGED = "demo"  # the scenario shipped in the wheel (kai_ray/sim/demo/), by name: no path to know after pip install
SCENARIO_HELP = f"a scenario YAML file, or {PACKAGED!r} for the packaged demo scenario"


def load_scenario_or_fail(path: str | Path, strict: bool = False) -> Scenario:
    """A scenario, its warnings (unknown fields) on stderr, or with ``strict`` the first of them as the error; a bad
    one is a CliError naming the field.

    ``demo`` (when no file of that name is in the working directory) is the packaged scenario, read where the wheel
    installed it: the README's commands then work from any directory."""
    try:
        if str(path) == PACKAGED and not Path(path).exists():
            with as_file(files("kai_ray.sim.demo") / "scenario.yaml") as packaged:
                scn = load_scenario(packaged)
        else:
            scn = load_scenario(path)
    except ScenarioError as exc:
        raise CliError(str(exc)) from None
    for text in scn.warnings:
        warn_or_fail(text, strict)
    for text in scn.advice:
        warn_or_fail(text, strict, ignored=False)
    for text in scn.notes:
        note(text)
    return scn


def require_plots_or_fail() -> None:
    from kai_ray.sim.report import PlotsUnavailable, require_plots

    try:
        require_plots()
    except PlotsUnavailable as exc:
        raise CliError(f"--report: {exc}") from None


def write_report_or_fail(res: SimResult, report: str, title: str) -> list[Path]:
    from kai_ray.sim.report import PlotsUnavailable, write_report

    try:
        return write_report(res, report, title)
    except PlotsUnavailable as exc:
        raise CliError(f"--report: {exc}") from None
    except OSError as exc:
        raise CliError(f"--report: cannot write to {report!r}: {exc.strerror or exc}") from None


def _emit(doc: dict[str, Any], as_json: bool, console: Console, trace: bool) -> None:
    from kai_ray.sim.story import print_metrics, print_timeline, print_workloads

    if as_json:
        typer.echo(json.dumps(doc, indent=2))
        return
    if not trace:
        print_timeline(doc, console)
        print_workloads(doc, console)
    else:
        m = doc["metrics"]
        console.print(
            f"replayed {m['arrived']} pods on {doc['cluster']['nodes']} nodes ({doc['cluster']['gpus']:g} GPUs): "
            f"{m['completed']} completed, {m['pending_at_end']} still pending, {m['evicted_pods']} pods evicted, "
            f"{m['runs_stopped']} runs stopped; "
            f"{doc['stats']['cycles']} scheduling cycles in {doc['stats']['wall_seconds']:.1f} s"
        )
        skipped = doc.get("trace", {}).get("skipped") or {}
        for why, n in skipped.items():
            console.print(f"[dim]skipped {n} pods: {why}[/dim]")
    print_metrics(doc, console)
    if "usage" in doc:
        from kai_ray.sim.fair_share_usage import print_usage

        print_usage(doc["usage"], console)
    for err in doc["errors"][:10]:
        console.print(f"[red]simulator rejected a decision:[/red] {err}")


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
    """``kai-ray simulate --trace alibaba-v2023 --inflate F``: the given files, one seed, one or more policies, in
    this process (``bench fragmentation`` and ``sweep`` run the shared files the same way)."""
    from kai_ray.sim.inflation.plan import make_plan
    from kai_ray.sim.inflation.sweep import combined
    from kai_ray.sim.inflation.terminal import finish, run_here

    if not nodes:
        raise CliError("--nodes: required with --trace (the node list CSV: sn, cpu_milli, memory_mib, gpu, model)")
    if not pods:
        raise CliError("--pods: required with --trace (the pod list CSV)")
    try:
        plan = make_plan(nodes, pods, placement or "binpack", (seed,), factor, actions, batch)
        t0 = time.process_time()
        runs = run_here(plan, show=sys.stderr.isatty() or not as_json)
        doc = combined(plan, runs, {"cpu_seconds": round(time.process_time() - t0, 3)})
        finish(doc, as_json, report, output.console(130))
    except (TraceError, InflationError) as exc:
        raise CliError(str(exc)) from None


@app.command("simulate")
def simulate_cmd(
    scenario: Annotated[
        str | None,
        typer.Argument(help=f"Scenario YAML (nodes, queues, workloads, config), or {PACKAGED!r} (the packaged one)"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of the timeline")] = False,
    report: Annotated[str | None, typer.Option("--report", help="Write PNG plots into this directory")] = None,
    trace: Annotated[str | None, typer.Option("--trace", help="Replay a trace instead: alibaba-v2023")] = None,
    nodes: Annotated[str | None, typer.Option("--nodes", help="Trace node list CSV")] = None,
    pods: Annotated[str | None, typer.Option("--pods", help="Trace pod list CSV")] = None,
    placement: Annotated[
        str | None,
        typer.Option(
            "--placement", help="Placement policy, e.g. binpack or spread (with --inflate: a comma-separated list)"
        ),
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", help="Trace: read only the first N rows of the pod list")
    ] = None,
    period: Annotated[float, typer.Option("--period", help="Trace: scheduling period in seconds")] = 1.0,
    policy: Annotated[
        str, typer.Option("--policy", help="kai-ray, kai (KAI's semantics) or no-gang (pod by pod); scenarios only")
    ] = "kai-ray",
    inflate: Annotated[
        float | None,
        typer.Option("--inflate", help="Trace: the FGD paper's workload inflation to this multiple of GPU capacity"),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="--inflate: shuffle and resampling seed")] = 0,
    actions: Annotated[
        str | None, typer.Option("--actions", help="--inflate: scheduler actions, comma-separated (default: all)")
    ] = None,
    batch: Annotated[
        float, typer.Option("--batch", help="--inflate: share of GPU capacity arriving per scheduling cycle")
    ] = 0.01,
    strict: StrictOpt = False,
) -> None:
    """Simulate a scenario (or replay a trace) with the real podgrouper and scheduler core, no cluster needed."""
    from kai_ray.sim.policy import POLICIES
    from kai_ray.sim.run import simulate
    from kai_ray.sim.run_metrics import result_document

    if policy not in POLICIES:
        raise CliError(f"--policy: {policy!r} is not one of {', '.join(POLICIES)}")
    if report is not None:
        require_plots_or_fail()
    if inflate is not None:
        if trace is None or scenario is not None:
            raise CliError("--inflate: only with --trace alibaba-v2023 --nodes ... --pods ... (no scenario)")
        if trace not in TRACE_FORMATS:
            raise CliError(f"--trace: {trace!r} is not a known trace format ({', '.join(TRACE_FORMATS)})")
        for opt, val in (("--limit", limit), ("--policy", None if policy == "kai-ray" else policy)):
            if val is not None:
                raise CliError(f"{opt}: not used with --inflate")
        simulate_inflation(nodes, pods, inflate, seed, placement, actions, batch, as_json, report)
        return
    if placement is not None:
        try:
            check_placement(placement)
        except InflationError as exc:
            raise CliError(str(exc)) from None
    console = output.console(110)
    if trace is not None:
        if scenario is not None:
            raise CliError("SCENARIO: give a scenario file or --trace, not both")
        if policy != "kai-ray":
            raise CliError("--policy: only for scenarios (a trace replays single-pod gangs)")
        t0 = time.perf_counter()
        try:
            res, extra = replay_trace(
                trace, nodes, pods, placement, limit, period, progress=sys.stderr.isatty() or not as_json
            )
        except TraceError as exc:
            raise CliError(str(exc)) from None
        extra["trace"]["replay_seconds"] = round(time.perf_counter() - t0, 3)
        source = f"{trace}:{pods}"
        title = f"trace replay ({trace})"
    else:
        if scenario is None:
            raise CliError("SCENARIO: missing (a scenario YAML file, or --trace alibaba-v2023 --nodes ... --pods ...)")
        for opt, val in (("--nodes", nodes), ("--pods", pods), ("--limit", limit)):
            if val is not None:
                raise CliError(f"{opt}: only used with --trace")
        scn = load_scenario_or_fail(scenario, strict)
        if placement:
            scn.config.placement_gpu = scn.config.placement_cpu = placement
        res = simulate(scn, POLICIES[policy])
        extra = {"description": scn.description} if scn.description else {}
        extra["policy"] = policy
        if scn.simulation.ray_facts:
            extra["ray_facts"] = True  # the scheduler was told what Ray knows: print_metrics shows its figures
        source = scenario
        title = POLICIES[policy].title
    doc = result_document(res, source, extra)
    if report is not None:
        paths = write_report_or_fail(res, report, title)
        doc["report"] = {"dir": report, "files": [str(p) for p in paths]}
    _emit(doc, as_json, console, trace is not None)
    if report is not None and not as_json:
        console.print(f"Report written to {report}/ ({', '.join(Path(p).name for p in doc['report']['files'])})")

"""``kai-ray demo``: the headline in one command, no cluster needed.

Runs the packaged ``kai_ray/sim/demo/scenario.yaml`` (6 nodes x 8 GPUs, three teams; a pre-training RayJob, a vLLM
RayService in the same queue, a sweep on an autoscaling RayCluster, an evaluation RayJob) through the real
podgrouper and scheduler core over simulated time, three times: as kai-ray, with KAI's semantics, and without gang
scheduling. It tells kai-ray's run as a story, prints the three runs side by side, and writes the plots.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from kai_ray.cli import CliError, StrictOpt, app, output
from kai_ray.durations import clock

DEFAULT_REPORT = "kai-ray-report"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def comparison_lines(rows: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """The policies side by side, as (label, cells); every cell is a field of the ``comparison`` rows of ``--json``."""

    out: list[tuple[str, list[str]]] = []

    def when(t: float | None) -> str:
        return "never" if t is None else clock(t)

    def add(label: str, cells: list[str]) -> None:
        out.append((label, cells))

    add("GPUs doing useful work", [_pct(r["useful_gpu_rate"]) for r in rows])
    add("GPUs allocated", [_pct(r["gpu_allocation_rate"]) for r in rows])
    add("GPU-hours of training lost to evictions", [f"{r['lost_gpu_hours']:.1f}" for r in rows])
    add("GPU-hours held by partial gangs", [f"{r['partial_gang_gpu_hours']:.1f}" for r in rows])
    for key in rows[0]["service_serving_after_seconds"]:
        add(f"{key} serves after", [when(r["service_serving_after_seconds"].get(key)) for r in rows])
    add("pods evicted by preempt (same queue, priority)", [str(r["preempted_pods"]) for r in rows])
    add("pods evicted by reclaim (across queues)", [str(r["reclaimed_pods"]) for r in rows])
    add("  victim shrank and kept running", [str(r["outcome_pods"].get("shrink", 0)) for r in rows])
    add("  victim restarted from its checkpoint", [str(r["outcome_pods"].get("restart", 0)) for r in rows])
    add(
        "  victim lost its whole gang",
        [str(r["outcome_pods"].get("suspend", 0) + r["outcome_pods"].get("stop", 0)) for r in rows],
    )
    for key in rows[0]["training_completed_at"]:
        add(f"{key} completes at", [when(r["training_completed_at"].get(key)) for r in rows])
    add("time GPUs idled while a fitting workload waited", [clock(r["idle_while_fitting_seconds"]) for r in rows])
    return out


def comparison_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(header_style="bold", box=None, padding=(0, 1), title="Same workload, three schedulers")
    table.add_column("")
    for r in rows:
        table.add_column(r["title"], justify="right")
    for label, cells in comparison_lines(rows):
        table.add_row(label, *cells)
    return table


def comparison_markdown(rows: list[dict[str, Any]]) -> str:
    """The same table in Markdown (the README's copy is this output)."""
    lines = ["| | " + " | ".join(r["title"] for r in rows) + " |", "|---|" + "---:|" * len(rows)]
    for label, cells in comparison_lines(rows):
        label = "↳ " + label.strip() if label.startswith(" ") else label
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _write_plots(runs: list[Any], report: str) -> list[Path]:
    from kai_ray.sim.report import write_comparison, write_report

    main = runs[0]
    try:
        paths = write_report(main.result, report, "kai-ray demo")
        from kai_ray.sim.compare import row

        captions = []
        for r in runs:
            x = row(r)
            serve = "; ".join(
                f"{k} serves {'never' if v is None else clock(v) + ' after arriving'}"
                for k, v in x["service_serving_after_seconds"].items()
            )
            captions.append(
                (
                    r.policy.title,
                    r.result,
                    f"{_pct(x['useful_gpu_rate'])} useful GPU time, {x['lost_gpu_hours']:.1f} GPU-h lost to "
                    f"evictions, {x['partial_gang_gpu_hours']:.1f} GPU-h in partial gangs; {serve}",
                )
            )
        paths.append(write_comparison(captions, Path(report) / "policies.png"))
    except OSError as exc:
        raise CliError(f"--report: cannot write to {report!r}: {exc.strerror or exc}") from None
    return paths


@app.command("demo")
def demo_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="Print the runs as one JSON document (no files)")] = False,
    report: Annotated[
        str | None, typer.Option("--report", help=f"Directory for the PNG plots [default: {DEFAULT_REPORT}]")
    ] = None,
    no_report: Annotated[bool, typer.Option("--no-report", help="Write no plots")] = False,
    scenario: Annotated[
        str | None, typer.Option("--scenario", help="Another scenario file to tell as a story", hidden=True)
    ] = None,
    markdown: Annotated[
        bool, typer.Option("--markdown", help="Print only the comparison table, in Markdown", hidden=True)
    ] = False,
    strict: StrictOpt = False,
) -> None:
    """Training fills the cluster, serving preempts it, another team reclaims its quota: kai-ray vs KAI vs no gangs."""
    from kai_ray.cli.simulate import PACKAGED, load_scenario_or_fail, require_plots_or_fail
    from kai_ray.sim.compare import row, run_policies
    from kai_ray.sim.report import PlotsUnavailable
    from kai_ray.sim.story import closing, tell

    if no_report and report is not None:
        raise CliError("--no-report: not together with --report")
    if report is not None:
        require_plots_or_fail()
    if scenario and scenario != PACKAGED and not Path(scenario).exists():
        raise CliError(f"scenario not found: {scenario}")
    scn = load_scenario_or_fail(scenario or PACKAGED, strict)
    source = scenario or "kai_ray/sim/demo/scenario.yaml"
    runs = run_policies(scn, source)
    rows = [row(r) for r in runs]
    doc = dict(runs[0].doc)
    doc["comparison"] = rows
    doc["baselines"] = {r.policy.name: r.doc for r in runs[1:]}
    if markdown:
        typer.echo(comparison_markdown(rows))
        return
    target = None if no_report or (as_json and report is None) else (report or DEFAULT_REPORT)
    paths: list[Path] = []
    plots_note = None
    if target is not None:
        try:
            paths = _write_plots(runs, target)
            doc["report"] = {"dir": target, "files": [str(p) for p in paths]}
        except PlotsUnavailable as exc:
            if report is not None:
                raise CliError(f"--report: {exc}") from None
            plots_note = f"No plots: {exc}."
    if as_json:
        typer.echo(json.dumps(doc, indent=2))
        return
    console = output.console(110)
    console.print(
        "[bold]kai-ray demo[/bold]: training fills a GPU cluster, a vLLM RayService preempts it by priority, another "
        "team reclaims its quota, and training shrinks instead of dying, then grows back. No cluster needed: the real "
        "kai-ray podgrouper and scheduler core (KAI Scheduler's actions, queues and gang rules) run over simulated "
        "time.\n"
    )
    cl = doc["cluster"]
    console.print(f"The cluster: {cl['nodes']} nodes, {cl['gpus']:g} GPUs. Queues (KAI Queues; quota = guaranteed):")
    for q in scn.queues:
        res = q.spec.resources
        quota = "unlimited" if res is None or res.gpu.quota == -1 else f"{res.gpu.quota:g}"
        indent = "    " if q.spec.parent_queue else "  "
        name = f" ({q.spec.display_name})" if q.spec.display_name else ""
        console.print(f"{indent}{q.name}: GPU quota {quota}{name}")
    console.print()
    story = Table.grid(padding=(0, 2))
    story.add_column(justify="right", style="cyan", no_wrap=True)
    story.add_column()
    for t, text in tell(doc):
        story.add_row("" if t is None else clock(t), text)
    console.print(story)
    console.print()
    for line in closing(doc):
        console.print(line)
    console.print()
    console.print(comparison_table(rows))
    for r in rows:
        console.print(f"[dim]  {r['title']}: {r['summary']}.[/dim]")
    m, stats = doc["metrics"], doc["stats"]
    console.print(
        f"\nkai-ray's run: simulated {clock(m['end_seconds'])} in {stats['wall_seconds']:.2f} s, "
        f"{stats['cycles']} scheduling cycles; `kai-ray demo --json` prints every number above."
    )
    if doc["errors"]:
        for err in doc["errors"][:10]:
            console.print(f"[red]simulator rejected a decision:[/red] {err}")
    if paths:
        console.print(f"Plots written to {target}/ ({', '.join(p.name for p in paths)})")
    elif plots_note:
        console.print(plots_note, markup=False, soft_wrap=True)  # one line; markup off keeps the [plots]

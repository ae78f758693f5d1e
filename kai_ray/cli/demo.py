"""``kai-ray demo``: the headline in one command, no cluster needed.

Runs the packaged ``kai_ray/sim/demo/scenario.yaml`` (4 nodes x 8 GPUs, an ML department with a training and a
serving team, a RayJob training gang, then a vLLM RayService) through the real podgrouper and scheduler core over
simulated time, and tells what happened as a short story, then writes the plots.
"""

from __future__ import annotations

import json
import sys
from contextlib import ExitStack
from importlib.resources import as_file, files
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from kai_ray.cli import CliError, app

DEFAULT_REPORT = "kai-ray-report"


def _queue_lines(scn: Any) -> list[dict[str, Any]]:
    out = []
    for q in scn.queues:
        res = q.spec.resources
        quota = None if res is None or res.gpu.quota == -1 else res.gpu.quota
        shown = "unlimited" if quota is None else f"{quota:g}"
        text = f"{q.name}: GPU quota {shown}"
        if q.spec.parent_queue:
            text = f"  {q.name}: GPU quota {shown}, queue priority {q.spec.priority or 100}"
        if q.spec.display_name:
            text += f" ({q.spec.display_name})"
        out.append({"name": q.name, "text": text, "gpu_quota": quota})
    return out


@app.command("demo")
def demo_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="Print the run as one JSON document")] = False,
    report: Annotated[str, typer.Option("--report", help="Directory for the PNG plots")] = DEFAULT_REPORT,
    scenario: Annotated[
        str | None, typer.Option("--scenario", help="Another scenario file to tell as a story", hidden=True)
    ] = None,
) -> None:
    """Inference preempts training, training comes back: the built-in scenario, told as a story."""
    from kai_ray.cli.simulate import write_report_or_fail
    from kai_ray.sim.metrics import result_document
    from kai_ray.sim.run import simulate
    from kai_ray.sim.scenario import ScenarioError, load_scenario
    from kai_ray.sim.story import clock, demo_story

    with ExitStack() as stack:
        packaged = files("kai_ray.sim.demo") / "scenario.yaml"
        path = Path(scenario) if scenario else stack.enter_context(as_file(packaged))
        if not path.exists():
            raise CliError(f"scenario not found: {path}")
        try:
            scn = load_scenario(path)
        except ScenarioError as exc:
            raise CliError(str(exc)) from None
    res = simulate(scn)
    doc = result_document(res, str(path), {"description": scn.description} if scn.description else None)
    paths = write_report_or_fail(res, report, "kai-ray demo", optional=True)
    doc["report"] = {"dir": report, "files": [str(p) for p in paths]}
    if as_json:
        typer.echo(json.dumps(doc, indent=2))
        return
    console = Console(width=None if sys.stdout.isatty() else 110, highlight=False)
    console.print(
        "[bold]kai-ray demo[/bold]: a vLLM RayService arrives on a full GPU cluster, preempts RayJob training, and "
        "training comes back when capacity returns. No cluster needed: the real kai-ray podgrouper and scheduler "
        "core (KAI Scheduler semantics) run over simulated time.\n"
    )
    reclaim_opt = scn.config.queue_priority_in_quota_reclaim
    lines = demo_story(doc, _queue_lines(scn))
    timed = [i for i, (t, _) in enumerate(lines) if t is not None]
    first, last = (timed[0], timed[-1]) if timed else (len(lines), len(lines) - 1)
    for _, text in lines[:first]:
        console.print(text)
    story = Table.grid(padding=(0, 2))
    story.add_column(justify="right", style="cyan", no_wrap=True)
    story.add_column()
    for t, text in lines[first : last + 1]:
        story.add_row("" if t is None else clock(t), text)
    console.print(story)
    for _, text in lines[last + 1 :]:
        console.print(text)
    if reclaim_opt:
        console.print(
            "\n[dim]Scheduler option on: queuePriorityInQuotaReclaim (a higher-priority queue may reclaim GPUs "
            "another queue holds within its quota).[/dim]"
        )
    console.print()
    table = Table(header_style="bold", box=None, padding=(0, 1))
    for col in ("workload", "kind", "state", "started", "preempted", "completed"):
        table.add_column(col, no_wrap=True)
    for key, w in doc["workloads"].items():
        table.add_row(
            key,
            w["kind"],
            w["state"],
            clock(w["first_running_at"]) if w["first_running_at"] is not None else "-",
            str(w["preemptions"]),
            clock(w["completed_at"]) if w["completed_at"] is not None else "-",
        )
    console.print(table)
    m = doc["metrics"]
    console.print(
        f"GPU allocation {100 * m['gpu_allocation_rate']:.0f}%, {m['preemptions']} preemption(s), "
        f"{m['wasted_gpu_hours']:g} GPU-hours wasted by restarts, simulated {clock(m['end_seconds'])} "
        f"in {doc['stats']['wall_seconds']:.2f} s."
    )
    if paths:
        console.print(f"Report written to {report}/ ({', '.join(Path(p).name for p in paths)})")

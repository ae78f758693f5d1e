"""``kai-ray queues`` and ``kai-ray pending``: the queue tree and the pending workloads, from a cluster or a scenario.

Both read the same two things: what exists now (a snapshot) and what the last scheduling cycle said (fair share,
allocated, requested; why each workload waits). Against a cluster they come from one list of each kind and the status
the scheduler wrote (:mod:`kai_ray.k8s.scheduling.cluster_views`); against a scenario, from the simulator at ``--at``
(:mod:`kai_ray.sim.scenario_view`). Rows are built by :mod:`kai_ray.scheduler.queue_views`; this module only renders.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from kai_ray.cli import CliError, StrictOpt, app, output_format
from kai_ray.cli.output import console, dump_yaml
from kai_ray.durations import EXAMPLES, clock, flag, span
from kai_ray.scheduler.queue_views import (
    LastCycle,
    PendingRow,
    QueueRow,
    elastic_pending,
    pending_rows,
    queue_rows,
)
from kai_ray.scheduler.snapshot import Snapshot
from kai_ray.tables import print_whole

OUTPUTS = ("text", "json", "yaml")
RESOURCE_UNITS = {"gpu": "GPUs", "cpu": "cores", "memory": "GiB"}

ScenarioOpt = Annotated[
    str | None,
    typer.Option(
        "--scenario", help="a simulator scenario file, or 'demo' (the packaged one), instead of the cluster (with --at)"
    ),
]
PoolOpt = Annotated[
    str | None,
    typer.Option("--node-pool", help="what the scheduler of this node pool sees ('default': nodes without the label)"),
]
AtOpt = Annotated[str | None, typer.Option("--at", help="with --scenario: the simulated time, e.g. 45m or 0:45:00")]
KubeconfigOpt = Annotated[str | None, typer.Option(help="kubeconfig file (default: $KUBECONFIG)")]
ContextOpt = Annotated[str | None, typer.Option(help="kubeconfig context")]
OutputOpt = Annotated[str, typer.Option("-o", "--output", help="text, json or yaml")]
SchedulerOpt = Annotated[str, typer.Option(help="cluster: the schedulerName whose pods are scheduled")]


class Source:
    """Where the rows come from, loaded once: (snapshot, last cycle, queue display names, PodGroup owners)."""

    def __init__(self, snapshot: Snapshot, last: LastCycle, names: dict[str, str], owners: dict[str, str], label: str):
        self.snapshot = snapshot
        self.last = last
        self.names = names
        self.owners = owners
        self.label = label
        self.at: float | None = None


def _load(
    scenario: str | None,
    at: str | None,
    kubeconfig: str | None,
    context: str | None,
    scheduler: str,
    strict: bool = False,
    node_pool: str | None = None,
) -> Source:
    if scenario is None:
        if at is not None:
            raise CliError("--at: only with --scenario (a cluster is shown as it is now)")
        return _cluster(kubeconfig, context, scheduler, node_pool or "")
    for name, value in (("--kubeconfig", kubeconfig), ("--context", context), ("--node-pool", node_pool)):
        if value is not None:
            raise CliError(f"{name}: not used with --scenario")
    if at is None:
        raise CliError(f"--at: required with --scenario (the simulated time to look at, {EXAMPLES})")
    from kai_ray.cli.simulate import load_scenario_or_fail
    from kai_ray.sim.scenario_view import scenario_view

    try:
        when = flag(at)
    except ValueError as exc:
        raise CliError(f"--at: {exc}") from None
    if when < 0:
        raise CliError(f"--at: {at!r} is before the simulation starts")
    view = scenario_view(load_scenario_or_fail(scenario, strict), when)
    label = f"{scenario} at {clock(when)}"
    if view.ended_at is not None:
        label += f"; the simulation ended at {clock(view.ended_at)}"
    src = Source(view.snapshot, view.last, view.display_names, view.owners, label)
    src.at = when
    return src


def _cluster(kubeconfig: str | None, context: str | None, scheduler: str, node_pool: str = "") -> Source:
    from kai_ray.cli.connection import api_problem, connect
    from kai_ray.k8s.base.rest import ApiError
    from kai_ray.k8s.config import ConfigError
    from kai_ray.k8s.scheduling.cluster_views import cluster_view

    kube = connect(kubeconfig, context)
    try:
        view = cluster_view(kube, scheduler_name=scheduler, node_pool=node_pool)
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    except ApiError as exc:
        if exc.not_found:
            raise CliError(
                "the cluster does not serve scheduling.run.ai Queues/PodGroups (install the kai-ray chart's CRDs)",
                code=1,
            ) from None
        raise api_problem(exc, "listing nodes, pods, Queues and PodGroups") from None
    finally:
        kube.close()
    return Source(view.snapshot, view.last, view.display_names, view.owners, kube.host)


def _check_output(output: str) -> str:
    return output_format(output, OUTPUTS)


def _emit(doc: dict[str, Any], output: str) -> None:
    if output == "json":
        typer.echo(json.dumps(doc, indent=2))
    else:
        typer.echo(dump_yaml(doc))


def _console() -> Console:
    return console(120)


def _amount(resource: str, value: float | None) -> str:
    """Core units as a person reads them: GPUs, cores, GiB; -1 (unlimited) as ∞."""
    if value is None:
        return "-"
    if value == -1:
        return "∞"
    if resource == "cpu":
        value /= 1000.0
    elif resource == "memory":
        value /= 2**30
    return f"{round(value, 2):g}"


def _tree_names(rows: list[QueueRow]) -> list[str]:
    """Queue names drawn as a tree: ``├─``/``└─`` under each parent."""
    last_child = {row.children[-1] for row in rows if row.children}
    open_levels: list[bool] = []  # per depth: does a later sibling follow (draw a │)
    out = []
    for row in rows:
        del open_levels[row.depth :]
        if row.depth == 0:
            out.append(row.name)
        else:
            is_last = row.name in last_child
            lead = "".join("│  " if more else "   " for more in open_levels[1:])
            out.append(f"{lead}{'└─' if is_last else '├─'} {row.name}")
        open_levels.append(row.depth > 0 and row.name not in last_child)
    return out


# (header, compact header, cell) per column; a new QueueRow field is one more entry here. The compact headers are
# what fits 80 columns; QUEUE_KEY under the table spells out the short ones.
QueueColumn = tuple[str, str, Callable[[QueueRow, str], str]]
QUEUE_COLUMNS: list[QueueColumn] = [
    ("PRIO", "PRIO", lambda r, res: str(r.priority)),
    ("QUOTA", "QUOTA", lambda r, res: _amount(res, r.quota[res])),
    ("LIMIT", "LIMIT", lambda r, res: _amount(res, r.limit[res])),
    ("WEIGHT", "WGT", lambda r, res: f"{r.weight[res]:g}"),
    ("FAIR\nSHARE", "FAIR\nSHARE", lambda r, res: _amount(res, r.fair_share[res] if r.fair_share else None)),
    ("ALLOCATED", "ALLOC", lambda r, res: _amount(res, r.allocated[res] if r.allocated else None)),
    ("REQUESTED", "REQ", lambda r, res: _amount(res, r.requested[res] if r.requested else None)),
    ("RUNNING", "RUN", lambda r, res: str(r.running_podgroups)),
    ("PENDING", "PEND", lambda r, res: str(r.pending_podgroups)),
    ("PENDING\nPODS", "PEND\nPODS", lambda r, res: str(r.pending_pods)),
    ("ELASTIC\nPODS", "ELAS\nPODS", lambda r, res: str(r.elastic_pending_pods)),
]
QUEUE_KEY = (
    "RUNNING/PENDING: gangs running/pending (pending as kai-ray pending lists them); PENDING PODS: their waiting pods; "
    "ELASTIC PODS: pods waiting beside a running gang (elastic workers)"
)
QUEUE_KEY_SHORT = (
    "WGT: over-quota weight; ALLOC/REQ: allocated/requested; RUN/PEND: gangs running/pending (pending as kai-ray "
    "pending lists them); PEND PODS: their waiting pods; ELAS PODS: pods waiting beside a running gang (elastic "
    "workers)"
)
# shown when the scheduler accounts usage (time-based fair share): the queue's share of the cluster over the window
USAGE_COLUMN: QueueColumn = ("USAGE", "USAGE", lambda r, res: f"{100 * r.usage.get(res, 0.0):.1f}%" if r.usage else "-")


def _queue_table(rows: list[QueueRow], resource: str, title: str, compact: bool) -> Table:
    """The full table names each queue with its display name; the compact one (80 columns) drops it and uses the
    short headers, one space between columns."""
    table = Table(
        title=title,
        header_style="bold",
        box=None,
        padding=(0, 1),
        collapse_padding=compact,
        pad_edge=not compact,
    )
    table.add_column("QUEUE", no_wrap=True)
    columns = QUEUE_COLUMNS + ([USAGE_COLUMN] if any(r.usage is not None for r in rows) else [])
    for header, short, _ in columns:
        table.add_column(short if compact else header, justify="right", no_wrap=True)
    for name, row in zip(_tree_names(rows), rows, strict=True):
        label = f"{name} ({row.display_name})" if row.display_name and not compact else name
        table.add_row(label, *(cell(row, resource) for _, _, cell in columns))
    return table


@app.command("queues")
def queues_cmd(
    scenario: ScenarioOpt = None,
    at: AtOpt = None,
    resource: Annotated[str, typer.Option("--resource", "-r", help="gpu, cpu or memory (text output)")] = "gpu",
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    scheduler_name: SchedulerOpt = "kai-scheduler",
    node_pool: PoolOpt = None,
    output: OutputOpt = "text",
    strict: StrictOpt = False,
) -> None:
    """The queue tree: quota, limit, weight, priority, fair share, allocated, requested and pending counts."""
    output = _check_output(output)
    if resource not in RESOURCE_UNITS:
        raise CliError(f"--resource: {resource!r} is not gpu, cpu or memory")
    src = _load(scenario, at, kubeconfig, context, scheduler_name, strict, node_pool)
    rows = queue_rows(src.snapshot, src.last, src.names)
    if output != "text":
        _emit({"source": src.label, "at": src.at, "units": UNITS_NOTE, "queues": [asdict(r) for r in rows]}, output)
        return
    console = _console()
    if not rows:
        console.print(f"no queues ({src.label})")
        return
    title = f"Queues ({RESOURCE_UNITS[resource]}) - {src.label}"
    full, compact = (_queue_table(rows, resource, title, short) for short in (False, True))
    console, used_compact = print_whole(console, full, compact)
    if used_compact:
        for row in rows:
            if row.display_name:
                console.print(f"[dim]{row.name}: {row.display_name}[/dim]")
    console.print(f"[dim]{QUEUE_KEY_SHORT if used_compact else QUEUE_KEY}[/dim]")


UNITS_NOTE = "gpu: GPUs, cpu: millicores, memory: bytes; -1: unlimited"


@app.command("pending")
def pending_cmd(
    queue: Annotated[str | None, typer.Option("-q", "--queue", help="only this queue and its children")] = None,
    namespace: Annotated[str | None, typer.Option("-n", "--namespace", help="only PodGroups in this namespace")] = None,
    scenario: ScenarioOpt = None,
    at: AtOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    scheduler_name: SchedulerOpt = "kai-scheduler",
    node_pool: PoolOpt = None,
    output: OutputOpt = "text",
    strict: StrictOpt = False,
) -> None:
    """Pending workloads in the order the scheduler will try them, with the blocking reason from the last cycle."""
    output = _check_output(output)
    src = _load(scenario, at, kubeconfig, context, scheduler_name, strict, node_pool)
    if queue is not None and queue not in {q.name for q in src.snapshot.queues}:
        known = ", ".join(sorted(q.name for q in src.snapshot.queues)) or "none"
        raise CliError(f"--queue: no queue {queue!r} (queues: {known})")
    rows = [r for r in pending_rows(src.snapshot, src.last, queue, src.owners) if namespace in (None, r.namespace)]
    if output != "text":
        _emit({"source": src.label, "at": src.at, "units": UNITS_NOTE, "pending": [asdict(r) for r in rows]}, output)
        return
    console = _console()
    where = f" in queue {queue}" if queue else ""
    elastic = elastic_pending(src.snapshot, src.last) if queue is None and namespace is None else 0
    if not rows:
        console.print(f"nothing pending{where} ({src.label})")
        _elastic_note(console, elastic)
        return
    full, compact = (_pending_table(rows, f"Pending{where} - {src.label}", short) for short in (False, True))
    console, used_compact = print_whole(console, full, compact)
    for r in rows:
        why = f"{r.reason}: {r.message}" if used_compact else r.message
        if why:
            console.print(f"[bold]{r.position or '-'}[/bold] {r.namespace}/{r.name}: {why}", soft_wrap=False)
    _elastic_note(console, elastic)


def _elastic_note(console: Console, elastic: int) -> None:
    if elastic:
        what = (
            "1 pod of a running gang (an elastic worker) waits"
            if elastic == 1
            else (f"{elastic} pods of running gangs (elastic workers) wait")
        )
        console.print(f"[dim]{what} too; not listed here (kai-ray queues counts them as ELASTIC PODS)[/dim]")


def _pending_table(rows: list[PendingRow], title: str, compact: bool) -> Table:
    """The full table has the reason and each workload's owner; the compact one (80 columns) leaves both out: the
    reason is printed under the table with its message."""
    table = Table(title=title, header_style="bold", box=None, padding=(0, 1), collapse_padding=compact)
    headers = ["#", "QUEUE", "WORKLOAD", "PRIORITY", "PODS", "GPUS", "AGE"] + (
        [] if compact else ["REASON (last cycle)"]
    )
    for header in headers:
        table.add_column(header, no_wrap=True, justify="right" if header in ("#", "PODS", "GPUS", "AGE") else "left")
    for r in rows:
        cells = _pending_cells(r)
        if compact:
            cells = [*cells[:2], f"{r.namespace}/{r.name}", *cells[3:7]]
        table.add_row(*cells)
    return table


def _pending_cells(r: PendingRow) -> list[str]:
    pos = "-" if r.position is None else str(r.position)
    queue = r.queue if r.queue_position is None else f"{r.queue} #{r.queue_position}"
    workload = f"{r.namespace}/{r.name}"
    if r.owner and "/" in r.owner:
        workload += f" ({r.owner})"
    return [
        pos,
        queue,
        workload,
        f"{r.priority_class or '-'} ({r.priority})",
        f"{r.pending_pods}/{r.min_member}",
        _amount("gpu", r.requested["gpu"]),
        span(r.age_seconds),
        r.reason,
    ]

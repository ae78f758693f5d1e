"""Turning a run's JSON document into words: the ``simulate`` timeline, workloads and metrics tables.

(The demo's story is :mod:`kai_ray.sim.narrative`.)

Why from the JSON document and not the engine's objects: what the user reads must be exactly what ``--json``
reports (and what the tests assert), so both are rendered from the same document.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kai_ray.durations import clock
from kai_ray.tables import print_whole


def _gpus(x: float) -> str:
    return f"{x:g} GPU" + ("" if x == 1 else "s")


def _pods(n: int) -> str:
    return f"{n} pod" + ("" if n == 1 else "s")


def gang_text(w: dict[str, Any]) -> str:
    parts = []
    lo_gpu = hi_gpu = 0.0
    for g in w.get("gang") or []:
        name, lo, hi, per = g["group"], g["min_pods"], g["max_pods"], g["gpus_per_pod"]
        lo_gpu += lo * per
        hi_gpu += hi * per
        if name == "headgroup":
            parts.append("1 head")
        elif name == "submittergroup":
            continue
        else:
            count = f"{lo}" if lo == hi else f"{lo}-{hi}"
            parts.append(f"{count} {name} x {_gpus(per)}" if per else f"{count} {name}")
    if not parts:
        return f"{_gpus(w.get('gang_gpus') or 0)}"
    rng = _gpus(lo_gpu) if lo_gpu == hi_gpu else f"{lo_gpu:g}-{_gpus(hi_gpu)}"
    return f"{' + '.join(parts)} ({rng})"


OUTCOMES = {
    "shrink": "shrunk, kept running",
    "restart": "run restarted from its checkpoint",
    "suspend": "gang lost, owner suspended",
    "stop": "gang lost",
    "cleanup": "leftover pods removed",
}


def timeline_entries(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Arrivals, scale steps and scheduler events in time order (arrivals first at equal times)."""
    out: list[tuple[float, int, int, dict[str, Any]]] = []
    n = 0
    for key, w in doc["workloads"].items():
        if w["arrived_at"] is None:
            continue
        text = f"{w['kind']}, queue {w['queue']}, priority class {w['priority_class']}"
        if w.get("gang"):
            text += f"; gang {gang_text(w)}"
        out.append((w["arrived_at"], 0, n, {"t": w["arrived_at"], "what": "arrive", "workload": key, "text": text}))
        n += 1
    for s in doc.get("scale_steps", []):
        text = f"{s['group']} scaled to {s['replicas']} replica(s)" + (
            f" ({_pods(s['pods_removed'])} removed)" if s["pods_removed"] else ""
        )
        out.append((s["t"], 1, n, {"t": s["t"], "what": "scale", "workload": s["workload"], "text": text}))
        n += 1
    for e in doc["events"]:
        typ = e["type"]
        if typ == "bind":
            text = f"{e['reason']}: {_pods(e['pods'])} ({_gpus(e['gpus'])}) on {', '.join(e['nodes'])}"
        elif typ == "complete":
            text = "completed"
        else:
            who = f" for {e['preemptor']}" if e.get("preemptor") else ""
            kind = "elastic surplus" if e.get("elastic") else "gang"
            outcome = f"; {OUTCOMES[e['outcome']]}" if e.get("outcome") in OUTCOMES else ""
            text = f"{e['reason']}: {_pods(e['pods'])} ({_gpus(e['gpus'])}, {kind}){who}{outcome}"
        out.append((e["t"], 2, n, {"t": e["t"], "what": typ, "workload": e["workload"], "text": text}))
        n += 1
    out.sort(key=lambda x: (x[0], x[1], x[2]))
    return [x[3] for x in out]


STYLE = {
    "arrive": "cyan",
    "bind": "green",
    "complete": "bold green",
    "preempt": "bold red",
    "reclaim": "bold red",
    "evict": "red",
    "scale": "magenta",
}


def print_timeline(doc: dict[str, Any], console: Console, limit: int = 400) -> None:
    entries = timeline_entries(doc)
    table = Table(title="Timeline", header_style="bold", box=None, padding=(0, 1))
    table.add_column("t", justify="right", no_wrap=True)
    table.add_column("event", no_wrap=True)
    table.add_column("workload", no_wrap=True)
    table.add_column("details")
    for e in entries[:limit]:
        table.add_row(clock(e["t"]), Text(e["what"], style=STYLE.get(e["what"], "")), e["workload"], e["text"])
    console.print(table)
    if len(entries) > limit:
        console.print(f"[dim]... {len(entries) - limit} more timeline entries (use --json for all)[/dim]")


def workload_tables(doc: dict[str, Any], limit: int = 100) -> tuple[Table, Table, list[str]]:
    """The workloads table in full and compact form (80 columns: no ``kind`` column, short headers), and the
    pending reasons, which the compact form prints under the table (``<workload>: <reason>: <message>``)."""
    items = list(doc["workloads"].items())[:limit]
    reasons = []
    for _key, w in items:
        why = w["pending_reason"] or ""
        if why and w.get("pending_message"):
            why = f"{why}: {w['pending_message']}"
        reasons.append(why)
    tables = []
    for compact in (False, True):
        table = Table(title="Workloads", header_style="bold", box=None, padding=(0, 1), collapse_padding=compact)
        cols = ["workload", "kind", "queue", "state", "started", "completed", "pods evicted", "runs stopped"]
        if compact:
            cols = ["workload", "queue", "state", "started", "completed", "evicted", "stopped"]
        elif any(reasons):
            cols.append("pending reason")
        for col in cols:
            table.add_column(col, no_wrap=col != "pending reason")
        for (key, w), why in zip(items, reasons, strict=True):
            row = [
                key,
                *([] if compact else [w["kind"]]),
                w["queue"],
                w["state"],
                clock(w["first_running_at"]) if w["first_running_at"] is not None else "-",
                clock(w["completed_at"]) if w["completed_at"] is not None else "-",
                str(w["evicted_pods"]),
                str(w["runs_stopped"]),
            ]
            table.add_row(*row, *([why] if "pending reason" in cols else []))
        tables.append(table)
    notes = [f"{key}: {why}" for (key, _), why in zip(items, reasons, strict=True) if why]
    more = len(doc["workloads"]) - len(items)
    if more > 0:
        notes.append(f"... {more} more workloads (use --json for all)")
    return tables[0], tables[1], notes


def print_workloads(doc: dict[str, Any], console: Console, limit: int = 100) -> None:
    """The workloads table, whole (:func:`kai_ray.tables.print_whole`): the compact form on a narrow terminal."""
    full, compact, notes = workload_tables(doc, limit)
    console, used_compact = print_whole(console, full, compact)
    for line in notes:
        if used_compact or line.startswith("..."):
            console.print(f"[dim]{line}[/dim]")


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    if unit == "s":
        return f"{v:,.1f} s ({clock(v)})"
    if unit == "%":
        return f"{100 * v:.1f}%"
    return f"{v:g}" if isinstance(v, float) else str(v)


def print_metrics(doc: dict[str, Any], console: Console) -> None:
    m = doc["metrics"]
    table = Table(title="Metrics", header_style="bold", box=None, padding=(0, 1))
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("workloads completed / arrived", f"{m['completed']} / {m['arrived']}"),
        ("avg job completion time", _fmt(m["avg_jct_seconds"], "s")),
        ("p99 job completion time", _fmt(m["p99_jct_seconds"], "s")),
        ("avg queueing delay (arrival -> first run)", _fmt(m["avg_queueing_delay_seconds"], "s")),
        ("avg pending time (incl. after evictions)", _fmt(m["avg_pending_seconds"], "s")),
        ("GPU allocation rate", _fmt(m["gpu_allocation_rate"], "%")),
        ("useful GPU rate (running, past restart cost)", _fmt(m["useful_gpu_rate"], "%")),
        ("unallocated-GPU fragmentation", _fmt(m["gpu_fragmentation"], "%")),
        (
            "pods evicted by preempt / reclaim / other",
            f"{m['preempted_pods']} / {m['reclaimed_pods']} / {m['other_evicted_pods']}",
        ),
        ("  of which the run kept going (shrink)", _fmt(m["outcome_pods"].get("shrink", 0))),
        ("runs stopped by evictions", _fmt(m["runs_stopped"])),
        ("GPU-hours lost to evictions", _fmt(m["lost_gpu_hours"])),
        ("GPU-hours held by partial gangs", _fmt(m["partial_gang_gpu_hours"])),
    ]
    if doc.get("ray_facts"):
        rows += [
            ("Ray-native: work lost since checkpoint or busy phase (GPU-h)", _fmt(m["work_lost_gpu_hours"])),
            ("Ray-native: GPU-hours held by half-started gangs", _fmt(m["half_started_gpu_hours"])),
        ]
        for key, w in doc["workloads"].items():
            if "upgrade_of" in w:
                served = w.get("time_to_serve_seconds")
                rows.append(
                    (f"Ray-native: {key} upgrade serves after", _fmt(served, "s") if served is not None else "never")
                )
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)

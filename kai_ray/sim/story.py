"""Turning a run's JSON document into words: the ``simulate`` timeline and the ``demo`` story.

Why from the JSON document and not the engine's objects: what the user reads must be exactly what ``--json``
reports (and what the tests assert), so both are rendered from the same document.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text


def clock(t: float) -> str:
    t = max(0.0, t)
    h, rem = divmod(round(t), 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}"


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
            text = f"{e['reason']}: {_pods(e['pods'])} ({_gpus(e['gpus'])}, {kind}){who}"
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


def print_workloads(doc: dict[str, Any], console: Console, limit: int = 100) -> None:
    items = list(doc["workloads"].items())
    reasons = any(w["pending_reason"] for _, w in items[:limit])
    table = Table(title="Workloads", header_style="bold", box=None, padding=(0, 1))
    cols = ["workload", "kind", "queue", "state", "started", "completed", "preempted"]
    for col in [*cols, "pending reason"] if reasons else cols:
        table.add_column(col, no_wrap=col != "pending reason")
    for key, w in items[:limit]:
        row = [
            key,
            w["kind"],
            w["queue"],
            w["state"],
            clock(w["first_running_at"]) if w["first_running_at"] is not None else "-",
            clock(w["completed_at"]) if w["completed_at"] is not None else "-",
            str(w["preemptions"]),
        ]
        why = w["pending_reason"] or ""
        if why and w.get("pending_message"):
            why = f"{why}: {w['pending_message']}"
        table.add_row(*row, *([why] if reasons else []))
    console.print(table)
    if len(items) > limit:
        console.print(f"[dim]... {len(items) - limit} more workloads (use --json for all)[/dim]")


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
        ("GPU allocation rate", _fmt(m["gpu_allocation_rate"], "%")),
        ("unallocated-GPU fragmentation", _fmt(m["gpu_fragmentation"], "%")),
        ("preemptions (gangs lost)", _fmt(m["preemptions"])),
        ("elastic shrinks", _fmt(m["elastic_shrinks"])),
        ("wasted GPU-hours", _fmt(m["wasted_gpu_hours"])),
    ]
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)


# ---------------------------------------------------------------------------------------------------------- the demo
def _w(doc: dict[str, Any], kind: str) -> tuple[str, dict[str, Any]] | None:
    for key, w in doc["workloads"].items():
        if w["kind"] == kind:
            return key, w
    return None


PIPELINED = " (onto GPUs its victims are releasing)"


def _delay(seconds: float | None) -> str:
    if not seconds:
        return "as soon as it arrived"
    return f"{clock(seconds)} after arriving"


def _on(nodes: list[str]) -> str:
    return nodes[0] if len(nodes) == 1 else f"{len(nodes)} nodes"


def demo_story(doc: dict[str, Any], queues: list[dict[str, Any]]) -> list[tuple[float | None, str]]:
    """The demo as sentences, each with its simulated time (None for framing lines).

    Built from the run itself, not from a script: if the scheduler decided differently, the story says what
    actually happened. ``queues``: ``{"name", "text", "gpu_quota"}`` per queue."""
    lines: list[tuple[float | None, str]] = []
    cl = doc["cluster"]
    lines.append(
        (
            None,
            f"The cluster: {cl['nodes']} nodes, {cl['gpus']:g} GPUs. The queues (KAI Queues, GPU quota = guaranteed):",
        )
    )
    for q in queues:
        lines.append((None, f"  {q['text']}"))
    lines.append((None, ""))
    quota = {q["name"]: q.get("gpu_quota") for q in queues}
    train = _w(doc, "RayJob")
    serve = _w(doc, "RayService")
    workloads = doc["workloads"]
    held: dict[str, float] = {}
    reclaim_told = False
    shrunk: dict[str, float] = {}
    events = iter(doc["events"])
    for e in timeline_entries(doc):
        key, what, t = e["workload"], e["what"], e["t"]
        w = workloads.get(key, {})
        ev: dict[str, Any] = {}
        if what not in ("arrive", "scale"):
            ev = next(x for x in events if x["type"] == what and x["workload"] == key)
        if what == "arrive":
            if w["kind"] == "RayService":
                txt = (
                    f"{key} arrives: vLLM serving Qwen2.5-7B-Instruct through Ray Serve LLM, a RayService in queue "
                    f"{w['queue']} with priority class {w['priority_class']} (non-preemptible). It wants "
                    f"{gang_text(w)}. The cluster is full."
                )
            else:
                txt = (
                    f"{key} arrives: a {w['kind']} in queue {w['queue']}, priority class {w['priority_class']} "
                    f"(preemptible). kai-ray's podgrouper makes it one gang PodGroup: {gang_text(w)}; its minimum "
                    "starts all together or not at all."
                )
            lines.append((t, txt))
        elif what == "bind":
            held[key] = held.get(key, 0.0) + ev["gpus"]
            if ev["reason"] == "ElasticScaleUp":
                txt = (
                    f"{key} grows by {_pods(ev['pods'])} (elastic scale-up, +{_gpus(ev['gpus'])}): "
                    f"it holds {_gpus(held[key])}"
                )
                limit = quota.get(w.get("queue"))
                if limit is not None and held[key] > limit:
                    over = held[key] - limit
                    txt += f", {over:g} above its queue's quota of {limit:g}, borrowed while nobody else needs them"
                lines.append((t, txt + "."))
            else:
                restarted = any(p < t for p in w.get("preempted_at") or [])
                if restarted:
                    txt = (
                        f"Capacity is back: {key}'s gang is placed again ({_pods(ev['pods'])}, {_gpus(ev['gpus'])} on "
                        f"{_on(ev['nodes'])}); after its restart cost it continues from its checkpoint."
                    )
                else:
                    txt = (
                        f"The scheduler places {key}'s whole gang at once: {_pods(ev['pods'])}, {_gpus(ev['gpus'])} on "
                        f"{_on(ev['nodes'])}{PIPELINED if ev['reason'] == 'Pipelined' else ''}. It is running."
                    )
                lines.append((t, txt))
        elif what in ("reclaim", "preempt", "evict"):
            why = ""
            pre = workloads.get(ev.get("preemptor") or "", {})
            if what == "reclaim" and pre and not reclaim_told:
                mine, theirs = quota.get(w.get("queue")), quota.get(pre.get("queue"))
                if mine is not None and theirs is not None and held.get(key, 0.0) > mine:
                    why = (
                        f"{pre['queue']} is entitled to its quota of {theirs:g} GPUs and {w['queue']} holds "
                        f"{held[key] - mine:g} above its own: "
                    )
                    reclaim_told = True
            held[key] = held.get(key, 0.0) - ev["gpus"]
            by = f" for {ev['preemptor']}" if ev.get("preemptor") else ""
            verb = {"reclaim": "reclaims", "preempt": "preempts"}.get(what, "evicts")
            if ev.get("elastic"):
                txt = (
                    f"{why}the scheduler {verb} GPUs{by}, first only {key}'s elastic surplus "
                    f"({_pods(ev['pods'])}, {_gpus(ev['gpus'])}); its gang keeps running on its minimum."
                )
                txt = txt[0].upper() + txt[1:]
                shrunk[key] = t
            elif what == "evict":
                names = ", ".join(ev.get("pod_names") or [])
                what_left = f"pod {names}" if ev["pods"] == 1 else f"{_pods(ev['pods'])} ({names})"
                why = {
                    "StaleGang": "a gang below its minimum must not hold resources (stale-gang eviction)",
                    "Consolidated": "moved to pack the cluster tighter (consolidation)",
                }.get(ev["reason"], ev["message"])
                txt = f"The leftover {what_left} of {key} is evicted: {why}."
            elif key == (train[0] if train else None):
                still = "still short, so " if key in shrunk else ""
                txt = why + (
                    f"{'PREEMPTED' if what == 'preempt' else 'RECLAIMED'}: {still}{key}'s whole gang is evicted "
                    f"({_pods(ev['pods'])}, {_gpus(ev['gpus'])}){by} ({ev['reason']}). Training waits, its progress "
                    "kept in its checkpoint."
                )
            else:
                txt = f"{ev['reason']}: {key} loses its gang ({_pods(ev['pods'])}, {_gpus(ev['gpus'])}){by}."
            lines.append((t, txt))
        elif what == "scale":
            step = next(s for s in doc.get("scale_steps", []) if s["t"] == t and s["workload"] == key)
            held[key] = held.get(key, 0.0) - step.get("gpus_removed", 0.0)
            txt = f"Traffic drops: Ray Serve scales {key}'s {step['group']} to {step['replicas']} replica(s)"
            if step["pods_removed"]:
                txt += f", releasing {_pods(step['pods_removed'])} ({_gpus(step.get('gpus_removed', 0.0))})"
            lines.append((t, txt + ". The service keeps serving."))
        elif what == "complete":
            txt = f"{key} completes"
            if w.get("preemptions"):
                txt += (
                    f" after {w['preemptions']} preemption(s): {clock(w['pending_seconds'])} spent waiting, "
                    f"job completion time {clock(w.get('jct_seconds') or 0)}"
                )
            lines.append((t, txt + "."))
    lines.append((None, ""))
    if train is not None and serve is not None:
        tw, sw = train[1], serve[1]
        if tw["preemptions"] and tw["state"] == "Completed" and sw["first_running_at"] is not None:
            lines.append(
                (
                    None,
                    f"Inference got its GPUs {_delay(sw['queueing_delay_seconds'])}; training was preempted, came "
                    "back when capacity returned, and finished.",
                )
            )
        else:
            lines.append(
                (
                    None,
                    f"Outcome: {train[0]} is {tw['state']} ({tw['preemptions']} preemptions); "
                    f"{serve[0]} is {sw['state']}.",
                )
            )
    return lines

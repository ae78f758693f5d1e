"""A run told in words, from its JSON document: the ``simulate`` timeline, workloads and metrics tables, and the
demo's sentences (:func:`tell`, :func:`closing`).

Why from the JSON document and not the engine's objects: what the user reads must be exactly what ``--json``
reports (and what the tests assert), so both are rendered from the same document. Why not from a script either: if
the scheduler decides differently, the demo's story says what actually happened. Each of its sentences comes from an
event (the core's action — preempt or reclaim — and the world's outcome — shrink, restart, suspend or a lost gang),
an arrival, a scale step, a completion, a pending reason the core gave, or an idle window the simulator measured.
Events close together (an elastic burst, a preemption over two cycles) are told once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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


# The demo's sentences.

EVICTED = ("Preempted", "Reclaimed", "Consolidated", "StaleGang")
BURST = 60.0  # seconds: scheduler events of one kind for one workload closer than this are one sentence


def _workers(n: int) -> str:
    return f"{n} worker" + ("" if n == 1 else "s")


@dataclass
class _Group:
    t0: float
    t1: float
    what: str  # bind | preempt | reclaim | evict
    workload: str
    preemptor: str | None
    events: list[dict[str, Any]] = field(default_factory=list)
    before: dict[str, float] = field(default_factory=dict)  # GPUs per workload just before its first event
    after: dict[str, float] = field(default_factory=dict)  # ... and just after its last
    peak_before: float = 0.0  # the most this workload ever held before the group


class _Teller:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.wl: dict[str, dict[str, Any]] = doc["workloads"]
        self.quota: dict[str, float] = doc["cluster"].get("gpu_quotas", {})
        self.total: float = doc["cluster"]["gpus"]
        self.ran: set[str] = set()
        self.told_over: dict[str, float] = {}

    def queue_held(self, queue: str, held: dict[str, float]) -> float:
        return sum(v for k, v in held.items() if self.wl.get(k, {}).get("queue") == queue)

    def _quota_text(self, queue: str) -> str:
        q = self.quota.get(queue)
        return "no GPU quota" if q is None else f"GPU quota {q:g}"

    def _over(self, queue: str, held: dict[str, float]) -> str:
        """Borrowing above quota, said once per stretch above it (and again when it grows)."""
        q, h = self.quota.get(queue), self.queue_held(queue, held)
        if q is None or h <= q:
            self.told_over.pop(queue, None)
            return ""
        if self.told_over.get(queue, -1.0) >= h:
            return ""
        self.told_over[queue] = h
        return (
            f"; queue {queue} holds {_gpus(h)}, {h - q:g} above its quota of {q:g}, borrowed while nobody else "
            "needs them"
        )

    # ---------------------------------------------------------------------------------------------- sentences
    def arrive(self, key: str, held: dict[str, float]) -> str:
        w = self.wl[key]
        cls = "preemptible" if w.get("preemptible") else "non-preemptible"
        full = sum(held.values()) >= self.total - 1e-9
        txt = (
            f"{key} arrives: a {w['kind']} in queue {w['queue']} ({self._quota_text(w['queue'])}), priority class "
            f"{w['priority_class']} ({w.get('priority')}, {cls}). Its gang: {gang_text(w)}."
        )
        return txt + (" The cluster is full." if full and held else "")

    def bind(self, g: _Group) -> str:
        key, w = g.workload, self.wl[g.workload]
        before, now = g.before.get(key, 0.0), g.after.get(key, 0.0)
        pods = sum(e["pods"] for e in g.events)
        first = g.events[0]
        placed = first["reason"] in ("Scheduled", "Pipelined")
        if placed:
            again = key in self.ran
            self.ran.add(key)
            how = " onto GPUs its victims are releasing" if first["reason"] == "Pipelined" else ""
            nodes = first["nodes"]
            where = nodes[0] if len(nodes) == 1 else f"{len(nodes)} nodes"
            lead = (
                f"Capacity is back: {key}'s gang is placed again"
                if again
                else f"The scheduler places {key}'s gang at once"
            )
            txt = f"{lead}: {_pods(first['pods'])}, {_gpus(first['gpus'])} on {where}{how}"
            rest = g.events[1:]
            if rest:
                extra = sum(e["pods"] for e in rest)
                txt += f"; then it grows by {_pods(extra)} (elastic) to {_gpus(now)}"
            if again:
                txt += "; after its restart cost it continues from its checkpoint"
            return txt + self._over(w["queue"], g.after) + "."
        verb = "grows back" if g.peak_before > before + 1e-9 and before > 0 else "grows"
        grown = f"{key} {verb} by {_pods(pods)} (elastic scale-up) to {_gpus(now)}"
        return grown + self._over(w["queue"], g.after) + "."

    def evict(self, g: _Group) -> str:
        key, w = g.workload, self.wl[g.workload]
        pre = self.wl.get(g.preemptor or "", {})
        vq_held = self.queue_held(w["queue"], g.before)
        pq_held = self.queue_held(pre["queue"], g.before) if pre else 0.0
        grows = bool(pre) and g.before.get(g.preemptor or "", 0.0) > 0  # the preemptor already runs: elastic growth
        left = g.before.get(key, 0.0)
        if g.what == "preempt" and pre:
            head = (
                f"{g.preemptor} preempts {key} by priority within queue {w['queue']} "
                f"({pre['priority_class']} {pre.get('priority')} > {w['priority_class']} {w.get('priority')})"
                + (", to grow beyond its running gang" if grows else "")
            )
        elif g.what == "reclaim" and pre:
            qv, qp = self.quota.get(w["queue"]), self.quota.get(pre["queue"])
            why = []
            if qp is not None:
                why.append(f"{pre['queue']} holds {_gpus(pq_held)} of its quota of {qp:g}")
            if qv is not None and vq_held > qv:
                why.append(f"{w['queue']} holds {_gpus(vq_held)}, {vq_held - qv:g} above its quota of {qv:g}")
            target = f"to grow {g.preemptor} beyond its running gang" if grows else f"for {g.preemptor}"
            head = f"Queue {pre['queue']} reclaims GPUs from queue {w['queue']} {target}"
            if why:
                head += " (" + "; ".join(why) + ")"
        else:
            head = f"{key}: {g.events[0]['reason']} ({g.events[0]['message']})"
        parts = []
        for outcome in dict.fromkeys(e.get("outcome") for e in g.events):
            evs = [e for e in g.events if e.get("outcome") == outcome]
            n, gp = sum(e["pods"] for e in evs), sum(e["gpus"] for e in evs)
            left = max(0.0, left - gp)
            if outcome == "shrink":
                parts.append(
                    f"kai-ray shrinks {key} by {_workers(n)} ({_gpus(gp)}): it drains them through Ray and lowers "
                    f"the worker group's replicas, and the job keeps running on {_gpus(left)}"
                )
            elif outcome == "restart":
                parts.append(
                    f"{key} loses {_pods(n)} ({_gpus(gp)}); KubeRay recreates them and the Ray job restarts from its "
                    "last checkpoint"
                )
            elif outcome == "suspend":
                parts.append(
                    f"{key}'s whole gang is evicted ({_pods(n)}, {_gpus(gp)}): "
                    f"kai-ray suspends the {w['kind']} until the scheduler admits it again, its progress kept in its "
                    "checkpoint"
                )
            elif outcome == "stop":
                parts.append(
                    f"{key}'s whole gang is evicted ({_pods(n)}, {_gpus(gp)}); its pods are recreated and wait"
                )
            else:
                parts.append(f"the leftover {_pods(n)} of {key} are evicted")
        return f"{head}: {'; '.join(parts)}."

    def scale(self, key: str, step: dict[str, Any]) -> str:
        w = self.wl[key]
        released = ""
        if step["pods_removed"]:
            released = f", releasing {_pods(step['pods_removed'])} ({_gpus(step.get('gpus_removed', 0.0))})"
        if w["kind"] == "RayService":
            return (
                f"Traffic drops: Ray Serve scales {key}'s {step['group']} to {step['replicas']} replica(s){released}. "
                "The service keeps serving."
            )
        return f"{key}'s {step['group']} is scaled to {step['replicas']} replica(s){released}."

    def complete(self, key: str, held: dict[str, float]) -> str:
        w = self.wl[key]
        freed = held.get(key, 0.0)
        txt = f"{key} completes (job completion time {clock(w['jct_seconds'] or 0)}"
        if w["queueing_delay_seconds"]:
            txt += f", of which {clock(w['queueing_delay_seconds'])} waiting to start"
        if w["runs_stopped"]:
            txt += f"; its run was stopped {w['runs_stopped']} time(s)"
        if w["shrink_events"] and not w["runs_stopped"]:
            txt += f"; its run never stopped, though shrinks took {_workers(w['evicted_pods'])} from it"
        return txt + (f"), freeing {_gpus(freed)}." if freed else ").")


def _why(x: dict[str, Any]) -> str:
    if not x["fits"]:
        return " for its next step, which does not fit"
    return f" for its next step, which would fit, but: {x['pending_reason'] or 'the scheduler did not place it'}"


def tell(doc: dict[str, Any]) -> list[tuple[float | None, str]]:
    """The run as (time, sentence) pairs in time order; None times are framing lines."""
    teller = _Teller(doc)
    items: list[tuple[float, int, int, Any]] = []  # (t, order, seq, payload)
    open_groups: dict[tuple[str, str, str | None, bool], _Group] = {}
    seq = 0
    events = iter(doc["events"])
    steps = {(s["t"], s["workload"]): s for s in doc.get("scale_steps", [])}
    held: dict[str, float] = {}  # GPUs per workload, replayed in event order
    peak: dict[str, float] = {}
    for entry in timeline_entries(doc):
        what, key, t = entry["what"], entry["workload"], entry["t"]
        seq += 1
        if what in ("arrive", "scale", "complete"):
            open_groups.clear()
            items.append((t, 0, seq, (what, key, t, dict(held))))
            if what == "complete":
                next(x for x in events if x["type"] == "complete" and x["workload"] == key)
                held.pop(key, None)
            elif what == "scale":
                held[key] = max(0.0, held.get(key, 0.0) - steps[(t, key)].get("gpus_removed", 0.0))
            continue
        ev = next(x for x in events if x["type"] == what and x["workload"] == key)
        gk = (what, key, ev.get("preemptor"), ev.get("outcome") == "shrink")
        g = open_groups.get(gk)
        if g is None or t - g.t1 > BURST:
            g = open_groups[gk] = _Group(t, t, what, key, ev.get("preemptor"))
            g.before, g.peak_before = dict(held), peak.get(key, 0.0)
            items.append((t, 1, seq, g))
        g.t1 = t
        g.events.append(ev)
        held[key] = max(0.0, held.get(key, 0.0) + (ev["gpus"] if what == "bind" else -ev["gpus"]))
        peak[key] = max(peak.get(key, 0.0), held[key])
        g.after = dict(held)
    for key, w in doc["workloads"].items():
        for p in w.get("pending_reasons") or []:
            if p["reason"] not in EVICTED:  # the eviction itself was told
                items.append((p["t"], 2, 0, ("wait", key, p)))
    for win in doc.get("idle_windows") or []:
        if win["to"] - win["from"] >= BURST:
            items.append((win["from"], 3, 0, ("idle", "", win)))
    items.sort(key=lambda x: (x[0], x[1], x[2]))
    lines: list[tuple[float | None, str]] = []
    for t, _, _, item in items:
        if isinstance(item, _Group):
            text = teller.bind(item) if item.what == "bind" else teller.evict(item)
        elif item[0] == "arrive":
            text = teller.arrive(item[1], item[3])
        elif item[0] == "scale":
            text = teller.scale(item[1], steps[(item[2], item[1])])
        elif item[0] == "complete":
            text = teller.complete(item[1], item[3])
        elif item[0] == "wait":
            p = item[2]
            text = f"{item[1]} waits ({p['reason']}): {p['message']}"
        else:
            win = item[2]
            who = "; ".join(f"{x['workload']} needs {_gpus(x['needs_gpus'])}{_why(x)}" for x in win["waiting"])
            text = f"{_gpus(win['idle_gpus'])} stay idle until {clock(win['to'])}: {who}."
        lines.append((t, text))
    return lines


def closing(doc: dict[str, Any]) -> list[str]:
    """The lines after the story: idle GPUs, waiting times (the JSON's own fields), lost work."""
    m = doc["metrics"]
    out = []
    fitting = [w for w in doc.get("idle_windows") or [] if w["fits"]]
    if not fitting:
        out.append(
            "No GPU sat idle while a workload that fit was waiting (beyond the scheduler's and the Ray autoscaler's "
            "own latency of a few seconds)."
        )
    else:
        spans = ", ".join(f"{clock(w['from'])}-{clock(w['to'])}" for w in fitting)
        out.append(f"GPUs sat idle while a workload that fit was waiting: {spans} (the reasons are above).")
    waits = [
        f"{k} {clock(w['queueing_delay_seconds'])}"
        for k, w in doc["workloads"].items()
        if w["queueing_delay_seconds"] is not None
    ]
    out.append(
        f"Queueing delay (arrival to first start): {', '.join(waits)}; average "
        f"{clock(m['avg_queueing_delay_seconds'] or 0)}. Pending time including after evictions: average "
        f"{clock(m['avg_pending_seconds'] or 0)}."
    )
    out.append(
        f"Training work lost to evictions: {m['lost_gpu_hours']:g} GPU-hours; GPUs doing useful work "
        f"{100 * m['useful_gpu_rate']:.1f}% of the time (allocated {100 * m['gpu_allocation_rate']:.1f}%)."
    )
    return out

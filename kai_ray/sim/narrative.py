"""The demo's story: a run's JSON document told in sentences, with the scheduler's own words.

Why from the document and not from a script: if the scheduler decides differently, the story says what actually
happened. Each sentence comes from an event (the core's action — preempt or reclaim — and the world's outcome —
shrink, restart, suspend or a lost gang), an arrival, a scale step, a completion, a pending reason the core gave,
or an idle window the simulator measured. Events close together (an elastic burst, a preemption over two cycles)
are told once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kai_ray.durations import clock
from kai_ray.sim.story import gang_text, timeline_entries

EVICTED = ("Preempted", "Reclaimed", "Consolidated", "StaleGang")
BURST = 60.0  # seconds: scheduler events of one kind for one workload closer than this are one sentence


def _gpus(x: float) -> str:
    return f"{x:g} GPU" + ("" if x == 1 else "s")


def _pods(n: int) -> str:
    return f"{n} pod" + ("" if n == 1 else "s")


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

"""Declarative scheduling scenarios: a YAML picture of a cluster plus the expected outcome of one cycle.

Modelled on KAI's in-memory action tests (nodes, queues, jobs with pods and their state, then expected per-job and
per-pod results). The scenario suite under ``tests/scheduler/scenarios`` uses it; the simulator and ``kai-ray
bench`` may load the same files.

Units: node and pod ``cpu`` in cores or Kubernetes quantities (``"500m"``), ``memory`` in bytes or quantities
(``"16Gi"``), ``gpu`` in GPUs. Queue resources use KAI's Queue units: ``cpu`` millicores, ``memory`` MB
(10^6 bytes), ``gpu`` GPUs; ``-1`` means unlimited. Priority classes ``train`` (50), ``build-preemptible`` (75),
``build`` (100) and ``inference`` (125) are known by name.

Schema (every key optional unless noted)::

    name: str                       # required
    description: str
    now: float                      # snapshot clock, seconds
    config: {SchedulerConfig field: value}
    nodes: [{name (req), count, gpu, cpu, memory, pods (max pods), labels, taints: [{key, value, effect}],
             gpu_memory_mib, unschedulable, ready}]
    queues: [{name (req), parent, priority, created_at, gpu|cpu|memory: {quota, limit, weight},
              preempt_min_runtime, reclaim_min_runtime}]
    topologies: [{name, levels: [label keys]}]
    jobs: [{name (req), namespace, queue (req), priority | priority_class, preemptibility, min_member,
            max_member, min_subgroup, subgroups: [{name, min_member, min_subgroup, parent, max_member,
            topology}], topology: {topology, required, preferred}, created_at, last_start, preemption_delay,
            staleness_grace, stale_since, kind,
            pods: [{name, count, gpu, cpu, memory, state (Pending|Running|Releasing|Succeeded|Failed), node,
                    subgroup, task_priority, ray_head, gpu_fraction, gpu_memory, gpu_group, node_selector,
                    affinity: [[{key, operator, values}]], tolerations: [{key, operator, value, effect}],
                    start_time, created_at, gated}]}]
    expect:
      jobs: {job name or ns/name: {scheduled: bool, reason: str, message_contains: str,
                                   details: {key: value}}}
      pods: {pod name or ns/name: {bound: node | true, pipelined: bool, evicted: bool, action: str,
                                   preemptor: job, reason: str, pending: bool, gpu_group: str | true}}
      binds: int                    # exact number of binds
      evictions: int                # exact number of evictions
      findings: [{kind, name, field}]   # each must appear
      queues: {name: {fair_share|allocated|requested: {gpu|cpu|memory: value}}}
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from kai_ray.scheduler.decisions import CycleResult
from kai_ray.scheduler.snapshot import (
    Job,
    Node,
    NodeSelectorRequirement,
    Pod,
    PodPhase,
    Preemptibility,
    Queue,
    Resources,
    SchedulerConfig,
    Snapshot,
    SubGroup,
    Taint,
    Toleration,
    Topology,
    TopologyConstraint,
)

PRIORITY_CLASSES = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
_SUFFIX = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
    "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "m": 1e-3, "": 1.0,
}  # fmt: skip
_QTY = re.compile(r"^\s*([0-9.eE+-]+)\s*([A-Za-z]*)\s*$")


MAX_COUNT = 100_000  # copies one entry may ask for: a scenario is held in memory


def _count(d: dict[str, Any], where: str) -> int:
    try:
        count = int(d.get("count", 1))
    except (TypeError, ValueError):
        raise ScenarioError(f"{where}.count: {d.get('count')!r} is not an integer") from None
    if not 1 <= count <= MAX_COUNT:
        raise ScenarioError(f"{where}.count: {count} is not in [1, {MAX_COUNT}]")
    return count


class ScenarioError(ValueError):
    """Bad scenario input; the message names the field."""


@dataclass
class Scenario:
    name: str
    description: str
    snapshot: Snapshot
    expect: dict[str, Any] = field(default_factory=dict)
    path: str = ""


def quantity(v: Any, where: str) -> float:
    if v is None:
        return 0.0
    if isinstance(v, bool):
        raise ScenarioError(f"{where}: expected a quantity, got {v!r}")
    if isinstance(v, int | float):
        return float(v)
    m = _QTY.match(str(v))
    if not m or m.group(2) not in _SUFFIX:
        raise ScenarioError(f"{where}: cannot parse quantity {v!r}")
    try:
        return float(m.group(1)) * _SUFFIX[m.group(2)]
    except ValueError as exc:
        raise ScenarioError(f"{where}: cannot parse quantity {v!r}") from exc


def _cpu(v: Any, where: str) -> float:
    """cores or quantity -> millicores"""
    return quantity(v, where) * 1000.0


def _map(d: Any, where: str) -> dict[str, Any]:
    if d is None:
        return {}
    if not isinstance(d, dict):
        raise ScenarioError(f"{where}: expected a mapping, got {type(d).__name__}")
    return d


def _list(d: Any, where: str) -> list[Any]:
    if d is None:
        return []
    if not isinstance(d, list):
        raise ScenarioError(f"{where}: expected a list, got {type(d).__name__}")
    return d


def _req(d: dict[str, Any], key: str, where: str) -> Any:
    if key not in d or d[key] is None:
        raise ScenarioError(f"{where}.{key}: required")
    return d[key]


def _check_keys(d: dict[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(set(d) - allowed)
    if extra:
        raise ScenarioError(f"{where}: unknown field {extra[0]!r}")


def _nodes(raw: list[Any]) -> list[Node]:
    out: list[Node] = []
    allowed = {
        "name",
        "count",
        "gpu",
        "cpu",
        "memory",
        "pods",
        "labels",
        "taints",
        "gpu_memory_mib",
        "unschedulable",
        "ready",
    }
    for i, n in enumerate(raw):
        w = f"nodes[{i}]"
        n = _map(n, w)
        _check_keys(n, allowed, w)
        name = str(_req(n, "name", w))
        count = _count(n, w)
        taints = [
            Taint(
                str(_req(_map(t, f"{w}.taints[{k}]"), "key", f"{w}.taints[{k}]")),
                str(t.get("value", "")),
                str(t.get("effect", "NoSchedule")),
            )
            for k, t in enumerate(_list(n.get("taints"), f"{w}.taints"))
        ]
        for k in range(count):
            labels = {str(a): str(b).replace("{i}", str(k)) for a, b in _map(n.get("labels"), f"{w}.labels").items()}
            out.append(
                Node(
                    name=name if count == 1 else f"{name}-{k}",
                    allocatable=Resources(
                        quantity(n.get("gpu", 0), f"{w}.gpu"),
                        _cpu(n.get("cpu", 64), f"{w}.cpu"),
                        quantity(n.get("memory", "512Gi"), f"{w}.memory"),
                    ),
                    max_pods=int(n.get("pods", 110)),
                    labels=labels,
                    taints=list(taints),
                    gpu_memory_mib=int(n.get("gpu_memory_mib", 0)),
                    unschedulable=bool(n.get("unschedulable", False)),
                    ready=bool(n.get("ready", True)),
                )
            )
    return out


def _qres(q: dict[str, Any], w: str) -> tuple[Resources, Resources, Resources]:
    vals: dict[str, list[float]] = {}
    for res, default_quota in (("gpu", 0.0), ("cpu", -1.0), ("memory", -1.0)):
        r = _map(q.get(res), f"{w}.{res}")
        _check_keys(r, {"quota", "limit", "weight"}, f"{w}.{res}")
        scale = 1e6 if res == "memory" else 1.0
        quota = float(r.get("quota", default_quota))
        limit = float(r.get("limit", -1))
        vals[res] = [
            quota * scale if quota != -1 else -1.0,
            limit * scale if limit != -1 else -1.0,
            float(r.get("weight", 1)),
        ]
    return (
        Resources(vals["gpu"][0], vals["cpu"][0], vals["memory"][0]),
        Resources(vals["gpu"][1], vals["cpu"][1], vals["memory"][1]),
        Resources(vals["gpu"][2], vals["cpu"][2], vals["memory"][2]),
    )


def _queues(raw: list[Any]) -> list[Queue]:
    out = []
    allowed = {
        "name",
        "parent",
        "priority",
        "created_at",
        "gpu",
        "cpu",
        "memory",
        "preempt_min_runtime",
        "reclaim_min_runtime",
        "uid",
    }
    for i, q in enumerate(raw):
        w = f"queues[{i}]"
        q = _map(q, w)
        _check_keys(q, allowed, w)
        quota, limit, weight = _qres(q, w)
        out.append(
            Queue(
                name=str(_req(q, "name", w)),
                parent=q.get("parent"),
                priority=int(q.get("priority", 100)),
                quota=quota,
                limit=limit,
                over_quota_weight=weight,
                preempt_min_runtime=q.get("preempt_min_runtime"),
                reclaim_min_runtime=q.get("reclaim_min_runtime"),
                created_at=float(q.get("created_at", i)),
                uid=str(q.get("uid", "")),
            )
        )
    return out


def _topo(t: Any, w: str) -> TopologyConstraint | None:
    if t is None:
        return None
    t = _map(t, w)
    _check_keys(t, {"topology", "required", "preferred"}, w)
    return TopologyConstraint(str(_req(t, "topology", w)), t.get("required"), t.get("preferred"))


def _pods(job: dict[str, Any], ns: str, jname: str, w: str) -> list[Pod]:
    out: list[Pod] = []
    allowed = {
        "name",
        "count",
        "gpu",
        "cpu",
        "memory",
        "state",
        "node",
        "subgroup",
        "task_priority",
        "ray_head",
        "gpu_fraction",
        "gpu_memory",
        "gpu_group",
        "node_selector",
        "affinity",
        "tolerations",
        "start_time",
        "created_at",
        "gated",
    }
    for i, p in enumerate(_list(job.get("pods"), f"{w}.pods")):
        pw = f"{w}.pods[{i}]"
        p = _map(p, pw)
        _check_keys(p, allowed, pw)
        count = _count(p, pw)
        base = str(p.get("name", f"{jname}-{i}"))
        state = str(p.get("state", "Pending"))
        try:
            phase = PodPhase(state)
        except ValueError as exc:
            raise ScenarioError(f"{pw}.state: unknown pod state {state!r}") from exc
        affinity = [
            [
                NodeSelectorRequirement(str(r["key"]), str(r["operator"]), tuple(str(v) for v in r.get("values", [])))
                for r in _list(term, f"{pw}.affinity")
            ]
            for term in _list(p.get("affinity"), f"{pw}.affinity")
        ]
        tolerations = [
            Toleration(
                str(t.get("key", "")),
                str(t.get("operator", "Equal")),
                str(t.get("value", "")),
                str(t.get("effect", "")),
            )
            for t in _list(p.get("tolerations"), f"{pw}.tolerations")
        ]
        for k in range(count):
            name = base if count == 1 else f"{base}-{k}"
            node = p.get("node")
            if isinstance(node, list):
                node = node[k]
            out.append(
                Pod(
                    uid=f"{ns}/{name}",
                    name=name,
                    namespace=ns,
                    job=f"{ns}/{jname}",
                    request=Resources(
                        quantity(p.get("gpu", 0), f"{pw}.gpu"),
                        _cpu(p.get("cpu", 1), f"{pw}.cpu"),
                        quantity(p.get("memory", "1Gi"), f"{pw}.memory"),
                    ),
                    phase=phase,
                    node=node,
                    subgroup=p.get("subgroup"),
                    task_priority=int(p.get("task_priority", 0)),
                    is_ray_head=bool(p.get("ray_head", False)),
                    gpu_fraction=p.get("gpu_fraction"),
                    gpu_memory_mib=p.get("gpu_memory"),
                    gpu_group=p.get("gpu_group"),
                    node_selector={str(a): str(b) for a, b in _map(p.get("node_selector"), pw).items()},
                    required_affinity=affinity,
                    tolerations=tolerations,
                    start_time=p.get("start_time"),
                    created_at=float(p.get("created_at", 0.0)),
                    gated=bool(p.get("gated", False)),
                )
            )
    return out


def _jobs(raw: list[Any]) -> list[Job]:
    out = []
    allowed = {
        "name",
        "namespace",
        "queue",
        "priority",
        "priority_class",
        "preemptibility",
        "min_member",
        "max_member",
        "min_subgroup",
        "subgroups",
        "topology",
        "created_at",
        "last_start",
        "preemption_delay",
        "staleness_grace",
        "stale_since",
        "kind",
        "pods",
        "uid",
    }
    for i, j in enumerate(raw):
        w = f"jobs[{i}]"
        j = _map(j, w)
        _check_keys(j, allowed, w)
        name = str(_req(j, "name", w))
        ns = str(j.get("namespace", "default"))
        pclass = str(j.get("priority_class", ""))
        if "priority" in j:
            prio = int(j["priority"])
        elif pclass:
            if pclass not in PRIORITY_CLASSES:
                raise ScenarioError(f"{w}.priority_class: unknown class {pclass!r}")
            prio = PRIORITY_CLASSES[pclass]
        else:
            prio = 50
        pre = j.get("preemptibility")
        if pre is not None:
            try:
                pre = Preemptibility(pre)
            except ValueError as exc:
                raise ScenarioError(f"{w}.preemptibility: {pre!r}") from exc
        subgroups = []
        for k, sg in enumerate(_list(j.get("subgroups"), f"{w}.subgroups")):
            sw = f"{w}.subgroups[{k}]"
            sg = _map(sg, sw)
            _check_keys(sg, {"name", "min_member", "min_subgroup", "parent", "max_member", "topology"}, sw)
            subgroups.append(
                SubGroup(
                    str(_req(sg, "name", sw)),
                    sg.get("min_member"),
                    sg.get("min_subgroup"),
                    sg.get("parent"),
                    sg.get("max_member"),
                    _topo(sg.get("topology"), f"{sw}.topology"),
                )
            )
        out.append(
            Job(
                namespace=ns,
                name=name,
                queue=str(_req(j, "queue", w)),
                priority=prio,
                priority_class=pclass,
                preemptibility=pre,
                min_member=int(j.get("min_member", 1)),
                min_subgroup=j.get("min_subgroup"),
                subgroups=subgroups,
                max_member=j.get("max_member"),
                topology=_topo(j.get("topology"), f"{w}.topology"),
                created_at=float(j.get("created_at", i)),
                last_start=j.get("last_start"),
                preemption_delay=j.get("preemption_delay"),
                staleness_grace=j.get("staleness_grace"),
                stale_since=j.get("stale_since"),
                uid=str(j.get("uid", "")),
                kind=str(j.get("kind", "")),
                pods=_pods(j, ns, name, w),
            )
        )
    return out


def scenario_from_dict(doc: Any, path: str = "") -> Scenario:
    doc = _map(doc, "scenario")
    _check_keys(
        doc, {"name", "description", "now", "config", "nodes", "queues", "topologies", "jobs", "expect"}, "scenario"
    )
    cfg_raw = _map(doc.get("config"), "config")
    names = {f.name for f in fields(SchedulerConfig)}
    for k in cfg_raw:
        if k not in names:
            raise ScenarioError(f"config.{k}: unknown scheduler option")
    cfg_args: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in cfg_raw.items()}
    cfg = SchedulerConfig(**cfg_args)
    topologies = [
        Topology(
            str(_req(_map(t, f"topologies[{i}]"), "name", f"topologies[{i}]")),
            [str(x) for x in _list(t.get("levels"), f"topologies[{i}].levels")],
        )
        for i, t in enumerate(_list(doc.get("topologies"), "topologies"))
    ]
    snap = Snapshot(
        nodes=_nodes(_list(doc.get("nodes"), "nodes")),
        queues=_queues(_list(doc.get("queues"), "queues")),
        jobs=_jobs(_list(doc.get("jobs"), "jobs")),
        now=float(doc.get("now", 0.0)),
        topologies=topologies,
        config=cfg,
    )
    return Scenario(
        str(_req(doc, "name", "scenario")),
        str(doc.get("description", "")),
        snap,
        _map(doc.get("expect"), "expect"),
        path,
    )


def load_scenario(path: str | Path) -> Scenario:
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{p}: not valid YAML: {exc}") from exc
    return scenario_from_dict(doc, str(p))


def _job_key(name: str) -> str:
    return name if "/" in name else f"default/{name}"


def check(sc: Scenario, res: CycleResult) -> list[str]:
    """Mismatches between the cycle result and the scenario's expectations (empty when all hold)."""
    errs: list[str] = []
    exp = sc.expect
    binds = {b.pod: b for b in res.binds}
    evicts = {e.pod: e for e in res.evictions}
    for name, want in _map(exp.get("jobs"), "expect.jobs").items():
        key = _job_key(name)
        got = res.jobs.get(key)
        if got is None:
            errs.append(f"job {key}: no status")
            continue
        if "scheduled" in want and got.scheduled != bool(want["scheduled"]):
            errs.append(
                f"job {key}: scheduled={got.scheduled}, want {want['scheduled']} ({got.reason.value}: {got.message})"
            )
        if "reason" in want and got.reason.value != want["reason"]:
            errs.append(f"job {key}: reason {got.reason.value}, want {want['reason']} ({got.message})")
        if "message_contains" in want and str(want["message_contains"]) not in got.message:
            errs.append(f"job {key}: message {got.message!r} lacks {want['message_contains']!r}")
        for dk, dv in _map(want.get("details"), "details").items():
            if got.details.get(dk) != dv:
                errs.append(f"job {key}: details[{dk}]={got.details.get(dk)!r}, want {dv!r}")
    for name, want in _map(exp.get("pods"), "expect.pods").items():
        uid = _job_key(name)
        b, e = binds.get(uid), evicts.get(uid)
        if want.get("pending") and (b is not None or e is not None):
            errs.append(f"pod {uid}: want pending, got {'bind to ' + b.node if b else 'eviction'}")
        if "bound" in want:
            if b is None:
                errs.append(f"pod {uid}: not bound")
            elif want["bound"] is not True and b.node != want["bound"]:
                errs.append(f"pod {uid}: bound to {b.node}, want {want['bound']}")
        if "pipelined" in want and (b is None or b.pipelined != bool(want["pipelined"])):
            errs.append(f"pod {uid}: pipelined={b.pipelined if b else None}, want {want['pipelined']}")
        if "gpu_group" in want and (
            b is None
            or (want["gpu_group"] is not True and b.gpu_group != want["gpu_group"])
            or (want["gpu_group"] is True and not b.gpu_group)
        ):
            errs.append(f"pod {uid}: gpu_group={b.gpu_group if b else None}, want {want['gpu_group']}")
        if "evicted" in want and bool(want["evicted"]) != (e is not None):
            errs.append(f"pod {uid}: evicted={e is not None}, want {want['evicted']}")
        if e is not None:
            if "action" in want and e.action.value != want["action"]:
                errs.append(f"pod {uid}: eviction action {e.action.value}, want {want['action']}")
            if "preemptor" in want and e.preemptor != _job_key(str(want["preemptor"])):
                errs.append(f"pod {uid}: preemptor {e.preemptor}, want {want['preemptor']}")
            if "reason" in want and e.reason.value != want["reason"]:
                errs.append(f"pod {uid}: eviction reason {e.reason.value}, want {want['reason']}")
    if "binds" in exp and len(res.binds) != int(exp["binds"]):
        errs.append(f"binds: {len(res.binds)}, want {exp['binds']}: {[(b.pod, b.node) for b in res.binds]}")
    if "evictions" in exp and len(res.evictions) != int(exp["evictions"]):
        errs.append(f"evictions: {len(res.evictions)}, want {exp['evictions']}: {[e.pod for e in res.evictions]}")
    for f in _list(exp.get("findings"), "expect.findings"):
        f = _map(f, "expect.findings")
        if not any(all(getattr(x, k) == v for k, v in f.items()) for x in res.findings):
            errs.append(f"finding {f} not reported; got {[(x.kind, x.name, x.field) for x in res.findings]}")
    for qname, want in _map(exp.get("queues"), "expect.queues").items():
        q = res.queues.get(qname)
        if q is None:
            errs.append(f"queue {qname}: no status")
            continue
        for attr, vals in _map(want, f"expect.queues.{qname}").items():
            got_vals = getattr(q, attr, None)
            if got_vals is None:
                errs.append(f"queue {qname}: unknown attribute {attr}")
                continue
            for r, v in _map(vals, attr).items():
                if abs(got_vals.get(r, 0.0) - float(v)) > 1e-6 * max(1.0, abs(float(v))):
                    errs.append(f"queue {qname}: {attr}.{r}={got_vals.get(r)}, want {v}")
    return errs

"""Declarative scheduling scenarios: a YAML picture of a cluster plus the expected outcome of one cycle.

Modelled on KAI's in-memory action tests (nodes, queues, jobs with pods and their state, then expected per-job and
per-pod results). The scenario suite under ``tests/scheduler/scenarios`` and the KAI conformance suite under
``tests/conformance`` use it. It is test tooling, not part of the core: it reads YAML and parses quantities with
:mod:`kai_ray.api.quantity` (the house's one quantity parser), and the core imports nothing outside itself.

Its purpose differs from a simulator scenario (:mod:`kai_ray.sim.scenario`: Ray CRs arriving over time) -- this is
one cycle's snapshot with pods in given states, and the expected decisions -- but nodes and ``config:`` are read by
the simulator's own code, so they mean the same in both: a node entry is a
:class:`kai_ray.sim.scenario.NodeSpec` (snake_case keys here) and ``config:`` goes through
:func:`kai_ray.sim.scenario.config_from` (unknown placement policies and actions are rejected in both).

Units: node and pod ``cpu`` in cores or Kubernetes quantities (``"500m"``), ``memory`` in bytes or quantities
(``"16Gi"``), ``gpu`` in GPUs. Queue resources use KAI's Queue units: ``cpu`` millicores, ``memory`` MB
(10^6 bytes), ``gpu`` GPUs; ``-1`` means unlimited. Priority classes ``train`` (50), ``build-preemptible`` (75),
``build`` (100) and ``inference`` (125) are known by name.

Schema (every key optional unless noted)::

    name: str                       # required
    description: str
    now: float                      # snapshot clock, seconds
    config: {SchedulerConfig field: value}   # the simulator's config section (snake_case or camelCase)
    nodes: [{name (req), count, gpus, cpu, memory, max_pods, labels, taints: [{key, value, effect}],
             gpu_memory (MiB per GPU), unschedulable, ready, resources: {name: quantity}}]  # as the simulator
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
                    start_time, created_at, gated, resources: {name: quantity}}]}]   # resources: extended
    expect:
      jobs: {job name or ns/name: {scheduled: bool, reason: str, message_contains: str,
                                   details: {key: value}, status: TaskStatus, node: str}}
      pods: {pod name or ns/name: {bound: node | true, pipelined: bool, evicted: bool, action: str,
                                   preemptor: job, reason: str, pending: bool, gpu_group: str | true,
                                   status: TaskStatus, node: str, gpu_groups: [logical names], moved_to: node}}
      binds: int                    # exact number of binds
      evictions: int                # exact number of evictions
      max_binds | max_evictions | max_pipelined: int   # upper bounds (KAI's cache-mock MaxTimes)
      findings: [{kind, name, field}]   # each must appear
      queues: {name: {fair_share|allocated|requested: {gpu|cpu|memory: value}}}

Conformance additions (the port of KAI's action tests under ``tests/conformance``)::

    kai: {file: upstream test file, case: upstream case name, version: KAI version}   # provenance
    harness: kai                    # KAI's in-memory test harness defaults (see below)
    departments: [queue entries]    # harness kai: top-level queues; none given => one unlimited "default"
    disable_default_department: bool
    known_failure: str              # a port kai-ray does not agree with yet: the diagnosis (strict xfail)
    rounds: {until_match: int, after_match: int}   # run like KAI's integration tests (several cycles)
    difference: {reason: str, expect: {...}}       # a deliberate difference: ``expect`` is KAI's outcome,
                                                   # ``difference.expect`` ours (and must differ from KAI's)
    jobs[].age_minutes, jobs[].stale_for (seconds), jobs[].best_effort, jobs[].deleted, jobs[].gpus_per_task,
    jobs[].cpu_per_task, jobs[].memory_per_task, jobs[].gpu_memory_per_task (harness kai: per-task requests)
    pod state additionally: Binding | Bound | Allocated (bound to its node), Gated, StuckInReleasing

``TaskStatus`` is KAI's task status after the cycle: ``Running`` (was running, untouched), ``Binding`` (bound this
cycle), ``Pipelined`` (bound onto resources still being released, or a consolidated pod re-placed elsewhere),
``Releasing`` (evicted, or already terminating), ``Pending``, ``StuckInReleasing``, ``Succeeded``, ``Failed``.

``harness: kai`` reproduces the defaults of KAI's ``test_utils`` so that a case reads like its upstream original:
nodes have 20000 CPU cores, 20G memory, 110 pod slots, 100 MiB per GPU and the label ``kai.scheduler/type=<node
name>`` unless given (``cpu`` is in cores, as upstream); each task
requests 1 CPU core and 1G memory unless the job says otherwise (``best_effort``: nothing); a job's gang minimum is
its number of tasks unless ``min_member`` is given; job priority defaults to 0; jobs are ordered by priority (higher
first, stable) and created one minute apart in that order (``age_minutes`` overrides); running jobs started one
minute ago; pods are named ``<job>-<task index>``; queues default to GPU over-quota weight 0, unlimited CPU and
memory, and sit under an unlimited department ``default``; queue ``cpu`` and ``memory`` quotas are in KAI's queue
units (millicores, MB); consolidation may move any number of pods.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic.alias_generators import to_camel

from kai_ray.api.quantity import QuantityError, parse_quantity
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
    Toleration,
    Topology,
    TopologyConstraint,
)
from kai_ray.sim.scenario import ScenarioError, config_from, node_spec

PRIORITY_CLASSES = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}


MAX_COUNT = 100_000  # copies one entry may ask for: a scenario is held in memory


def _count(d: dict[str, Any], where: str) -> int:
    try:
        count = int(d.get("count", 1))
    except (TypeError, ValueError):
        raise ScenarioError(f"{where}.count: {d.get('count')!r} is not an integer") from None
    if not 1 <= count <= MAX_COUNT:
        raise ScenarioError(f"{where}.count: {count} is not in [1, {MAX_COUNT}]")
    return count


HARNESS_KAI = "kai"
KAI_NODE_NAME_LABEL = "kai.scheduler/type"  # upstream's harness labels every node with its own name under this key
TASK_STATES = {
    "Pending": PodPhase.PENDING,
    "Gated": PodPhase.PENDING,
    "Pipelined": PodPhase.PIPELINED,  # placed by an earlier cycle onto releasing room: holds it, not bound
    "Running": PodPhase.RUNNING,
    "Binding": PodPhase.RUNNING,
    "Bound": PodPhase.RUNNING,
    "Allocated": PodPhase.RUNNING,
    "Releasing": PodPhase.RELEASING,
    "StuckInReleasing": PodPhase.STUCK_RELEASING,
    "Succeeded": PodPhase.SUCCEEDED,
    "Failed": PodPhase.FAILED,
}


@dataclass
class CycleFixture:
    """One fixture document: a snapshot and the outcome expected of its cycle (or of KAI-style rounds)."""

    name: str
    description: str
    snapshot: Snapshot
    expect: dict[str, Any] = field(default_factory=dict)
    path: str = ""
    kai: dict[str, Any] = field(default_factory=dict)  # provenance of a ported KAI case
    rounds: tuple[int, int] | None = None  # (until_match, after_match): KAI integration-test style
    difference: dict[str, Any] | None = None  # a deliberate difference from KAI: reason + our outcome
    deleted_jobs: set[str] = field(default_factory=set)  # jobs being deleted: evicted pods stay Releasing
    known_failure: str = ""  # a port that kai-ray does not yet agree with: the diagnosis (tracked, strict xfail)
    nominal_nodes: dict[str, str] = field(default_factory=dict)  # pending pods that name a node (harness kai)


def quantity(v: Any, where: str) -> float:
    if v is None:
        return 0.0
    try:
        return parse_quantity(v)
    except QuantityError as exc:
        raise ScenarioError(f"{where}: {exc}") from None


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


def _num(v: Any, where: str, kind: type = float) -> Any:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ScenarioError(f"{where}: expected a number, got {v!r}")
    return kind(v)


def _nodes(raw: list[Any], kai: bool) -> list[Node]:
    """Nodes in the simulator's node vocabulary (:class:`kai_ray.sim.scenario.NodeSpec`); harness kai brings
    upstream's node defaults and labels every node with its own name."""
    out: list[Node] = []
    defaults = {"cpu": "20000", "memory": "20G", "gpu_memory": 100} if kai else None
    for i, n in enumerate(raw):
        for node in node_spec(n, f"nodes[{i}]", defaults).as_nodes():
            if kai:
                node.labels.setdefault(KAI_NODE_NAME_LABEL, node.name)
            out.append(node)
    return out


def _qres(q: dict[str, Any], w: str, kai: bool) -> tuple[Resources, Resources, Resources]:
    vals: dict[str, list[float]] = {}
    for res, default_quota in (("gpu", 0.0), ("cpu", -1.0), ("memory", -1.0)):
        r = _map(q.get(res), f"{w}.{res}")
        _check_keys(r, {"quota", "limit", "weight"}, f"{w}.{res}")
        scale = 1e6 if res == "memory" else 1.0
        quota = _num(r.get("quota", default_quota), f"{w}.{res}.quota")
        limit = _num(r.get("limit", -1), f"{w}.{res}.limit")
        if kai and res == "gpu" and limit == 0:
            limit = -1.0  # upstream's harness: a MaxAllowedGPUs of 0 means "not set"
        weight = _num(r.get("weight", 0 if kai and res == "gpu" else 1), f"{w}.{res}.weight")
        vals[res] = [
            quota * scale if quota != -1 else -1.0,
            limit * scale if limit != -1 else -1.0,
            weight,
        ]
    return (
        Resources(vals["gpu"][0], vals["cpu"][0], vals["memory"][0]),
        Resources(vals["gpu"][1], vals["cpu"][1], vals["memory"][1]),
        Resources(vals["gpu"][2], vals["cpu"][2], vals["memory"][2]),
    )


_QUEUE_KEYS = {
    "name", "parent", "priority", "created_at", "gpu", "cpu", "memory", "preempt_min_runtime", "reclaim_min_runtime",
    "uid",
}  # fmt: skip


def _queues(raw: list[Any], kai: bool, where: str = "queues", default_parent: str | None = None) -> list[Queue]:
    out = []
    for i, q in enumerate(raw):
        w = f"{where}[{i}]"
        q = _map(q, w)
        _check_keys(q, _QUEUE_KEYS, w)
        quota, limit, weight = _qres(q, w, kai)
        name = str(_req(q, "name", w))
        out.append(
            Queue(
                name=name,
                parent=q.get("parent", default_parent),
                priority=int(q.get("priority", 100)),
                quota=quota,
                limit=limit,
                over_quota_weight=weight,
                preempt_min_runtime=q.get("preempt_min_runtime"),
                reclaim_min_runtime=q.get("reclaim_min_runtime"),
                created_at=float(q.get("created_at", i * 60.0 if kai else i)),
                uid=str(q.get("uid", name if kai else "")),
            )
        )
    return out


def _topo(t: Any, w: str) -> TopologyConstraint | None:
    if t is None:
        return None
    t = _map(t, w)
    _check_keys(t, {"topology", "required", "preferred"}, w)
    return TopologyConstraint(str(_req(t, "topology", w)), t.get("required"), t.get("preferred"))


_POD_KEYS = {
    "name", "count", "gpu", "cpu", "memory", "state", "node", "subgroup", "task_priority", "ray_head", "gpu_fraction",
    "gpu_memory", "gpu_group", "gpu_groups", "node_selector", "affinity", "tolerations", "start_time", "created_at",
    "gated", "resources",
}  # fmt: skip


def _pod_state(p: dict[str, Any], pw: str) -> tuple[PodPhase, bool]:
    state = str(p.get("state", "Pending"))
    if state not in TASK_STATES:
        raise ScenarioError(f"{pw}.state: unknown pod state {state!r} (one of {', '.join(TASK_STATES)})")
    return TASK_STATES[state], state == "Gated"


def _pods(job: dict[str, Any], ns: str, jname: str, w: str, kai: bool, nominal: dict[str, str]) -> list[Pod]:
    out: list[Pod] = []
    # harness kai: per-task requests come from the job, as upstream's TestJobBasic
    per_task: dict[str, Any] = {}
    if kai:
        best_effort = bool(job.get("best_effort", False))
        per_task = {
            "gpu": 0 if best_effort else job.get("gpus_per_task", 0),
            "cpu": 0 if best_effort else job.get("cpu_per_task", 1),
            "memory": 0 if best_effort else job.get("memory_per_task", "1G"),
            "gpu_memory": job.get("gpu_memory_per_task"),
        }
    index = 0
    for i, p in enumerate(_list(job.get("pods"), f"{w}.pods")):
        pw = f"{w}.pods[{i}]"
        p = _map(p, pw)
        _check_keys(p, _POD_KEYS, pw)
        count = _count(p, pw)
        base = str(p.get("name", f"{jname}-{i}"))
        phase, gated = _pod_state(p, pw)
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
        gpu = p.get("gpu", per_task.get("gpu", 0))
        frac = p.get("gpu_fraction")
        if kai and frac is None and isinstance(gpu, int | float) and not isinstance(gpu, bool) and gpu % 1 > 0:
            if gpu > 1:
                raise ScenarioError(f"{pw}.gpu: a fractional request above 1 GPU ({gpu}) is not supported")
            frac, gpu = float(gpu), 0  # upstream: a non-integer per-task GPU count is a gpu-fraction request
        gpu_mem = p.get("gpu_memory", per_task.get("gpu_memory"))
        groups = p.get("gpu_groups")
        group = p.get("gpu_group")
        if groups is not None:
            groups = [str(x) for x in _list(groups, f"{pw}.gpu_groups")]
            if len(groups) > 1:
                raise ScenarioError(f"{pw}.gpu_groups: a pod on several shared GPUs is not supported")
            group = groups[0] if groups else None
        for k in range(count):
            name = base if count == 1 else f"{base}-{k}"
            if kai and "name" not in p:
                name = f"{jname}-{index}"
            index += 1
            node = p.get("node")
            if isinstance(node, list):
                node = node[k]
            pod_group = group
            if kai and group is not None and node is not None:
                pod_group = f"{node}/{group}"  # upstream group names are per test; ours are per node
            if kai and phase is PodPhase.PENDING and node is not None:
                nominal[f"{ns}/{name}"] = str(node)  # upstream keeps a pending pod's nodeName, unbound
            if kai and pod_group is None and node is not None and frac is not None and phase is not PodPhase.PENDING:
                pod_group = f"{node}/{name}"  # upstream gives each running fraction its own GPU, named once
            out.append(
                Pod(
                    uid=f"{ns}/{name}",
                    name=name,
                    namespace=ns,
                    job=f"{ns}/{jname}",
                    request=Resources(
                        quantity(gpu, f"{pw}.gpu"),
                        _cpu(p.get("cpu", per_task.get("cpu", 1)), f"{pw}.cpu"),
                        quantity(p.get("memory", per_task.get("memory", "1Gi")), f"{pw}.memory"),
                    ),
                    phase=phase,
                    node=node if phase is not PodPhase.PENDING else None,
                    subgroup=p.get("subgroup"),
                    task_priority=int(p.get("task_priority", 0)),
                    is_ray_head=bool(p.get("ray_head", False)),
                    gpu_fraction=frac,
                    gpu_memory_mib=gpu_mem,
                    gpu_group=pod_group,
                    extended={
                        str(r): quantity(v, f"{pw}.resources.{r}") for r, v in _map(p.get("resources"), pw).items()
                    },
                    node_selector={str(a): str(b) for a, b in _map(p.get("node_selector"), pw).items()},
                    required_affinity=affinity,
                    tolerations=tolerations,
                    start_time=p.get("start_time"),
                    created_at=float(p.get("created_at", 0.0)),
                    gated=gated or bool(p.get("gated", False)),
                )
            )
    return out


_JOB_KEYS = {
    "name", "namespace", "queue", "priority", "priority_class", "preemptibility", "min_member", "max_member",
    "min_subgroup", "subgroups", "topology", "created_at", "last_start", "preemption_delay", "staleness_grace",
    "stale_since", "kind", "pods", "uid",
}  # fmt: skip
_KAI_JOB_KEYS = {
    "age_minutes", "stale_for", "best_effort", "deleted", "gpus_per_task", "cpu_per_task", "memory_per_task",
    "gpu_memory_per_task",
}  # fmt: skip


def _priority(j: dict[str, Any], w: str, default: int) -> tuple[int, str]:
    pclass = str(j.get("priority_class", ""))
    if "priority" in j:
        return int(_num(j["priority"], f"{w}.priority", int)), pclass
    if pclass:
        if pclass not in PRIORITY_CLASSES:
            raise ScenarioError(f"{w}.priority_class: unknown class {pclass!r}")
        return PRIORITY_CLASSES[pclass], pclass
    return default, pclass


def _jobs(raw: list[Any], kai: bool, now: float, nominal: dict[str, str]) -> tuple[list[Job], set[str]]:
    docs = [(i, _map(j, f"jobs[{i}]")) for i, j in enumerate(raw)]
    order = {i: i for i, _ in docs}
    if kai:
        # upstream sorts jobs by priority (stable, higher first) and creates them a minute apart in that order
        ranked = sorted(docs, key=lambda d: -_priority(d[1], f"jobs[{d[0]}]", 0)[0])
        order = {i: k for k, (i, _) in enumerate(ranked)}
    out = []
    deleted: set[str] = set()
    for i, j in docs:
        w = f"jobs[{i}]"
        _check_keys(j, _JOB_KEYS | (_KAI_JOB_KEYS if kai else set()), w)
        name = str(_req(j, "name", w))
        ns = str(j.get("namespace", "default"))
        prio, pclass = _priority(j, w, 0 if kai else 50)
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
        pods = _pods(j, ns, name, w, kai, nominal)
        created_at = float(j.get("created_at", i))
        last_start = j.get("last_start")
        stale_since = j.get("stale_since")
        min_member = int(j.get("min_member", 1))
        if kai:
            if "created_at" not in j:
                age = j.get("age_minutes")
                age = float(age) if age is not None else float(len(docs) - order[i])
                created_at = now - 60.0 * age
            if last_start is None and any(p.phase is PodPhase.RUNNING for p in pods):
                last_start = now - 60.0
            if stale_since is None and j.get("stale_for") is not None:
                stale_since = now - float(_num(j["stale_for"], f"{w}.stale_for"))
            if "min_member" not in j and not subgroups:
                min_member = len(pods)  # upstream: every task is required unless a smaller minimum is given
            if j.get("deleted"):
                deleted.add(f"{ns}/{name}")
        out.append(
            Job(
                namespace=ns,
                name=name,
                queue=str(_req(j, "queue", w)),
                priority=prio,
                priority_class=pclass,
                preemptibility=pre,
                min_member=min_member,
                min_subgroup=j.get("min_subgroup"),
                subgroups=subgroups,
                max_member=j.get("max_member"),
                topology=_topo(j.get("topology"), f"{w}.topology"),
                created_at=created_at,
                last_start=last_start,
                preemption_delay=j.get("preemption_delay"),
                staleness_grace=j.get("staleness_grace"),
                stale_since=stale_since,
                uid=str(j.get("uid", name if kai else "")),
                kind=str(j.get("kind", "")),
                pods=pods,
            )
        )
    return out, deleted


_SCENARIO_KEYS = {
    "name", "description", "now", "config", "nodes", "queues", "topologies", "jobs", "expect", "kai", "harness",
    "departments", "disable_default_department", "rounds", "difference", "known_failure",
}  # fmt: skip


def _config(raw: dict[str, Any], kai: bool) -> SchedulerConfig:
    """The simulator's ``config:`` parser; harness kai changes two defaults the case does not set."""
    cfg = config_from(raw)
    if kai:
        given = {f.name for f in fields(SchedulerConfig) if f.name in raw or to_camel(f.name) in raw}
        upstream: dict[str, Any] = {
            "max_consolidation_preemptees": -1,  # upstream's test session moves any number of pods
            "default_staleness_grace": 0.0,  # ... and leaves the global staleness grace at zero
        }
        cfg = replace(cfg, **{k: v for k, v in upstream.items() if k not in given})
    return cfg


def fixture_from_dict(doc: Any, path: str = "") -> CycleFixture:
    doc = _map(doc, "scenario")
    _check_keys(doc, _SCENARIO_KEYS, "scenario")
    harness = doc.get("harness")
    if harness not in (None, HARNESS_KAI):
        raise ScenarioError(f"harness: unknown harness {harness!r} (only 'kai')")
    kai = harness == HARNESS_KAI
    if not kai:
        for k in ("departments", "disable_default_department"):
            if k in doc:
                raise ScenarioError(f"{k}: only with 'harness: kai'")
    now = float(doc.get("now", 0.0))
    cfg = _config(_map(doc.get("config"), "config"), kai)
    topologies = [
        Topology(
            str(_req(_map(t, f"topologies[{i}]"), "name", f"topologies[{i}]")),
            [str(x) for x in _list(t.get("levels"), f"topologies[{i}].levels")],
        )
        for i, t in enumerate(_list(doc.get("topologies"), "topologies"))
    ]
    queues_raw = _list(doc.get("queues"), "queues")
    if kai:
        depts_raw = _list(doc.get("departments"), "departments")
        parent = None
        if not depts_raw and not doc.get("disable_default_department", False):
            depts_raw = [{"name": "default", "gpu": {"quota": -1, "limit": -1, "weight": 0}}]
            parent = "default"
        queues = _queues(depts_raw, kai, "departments")
        if parent is not None:
            queues += _queues(queues_raw, kai, default_parent=parent)
            for q in queues[1:]:
                q.parent = parent  # upstream re-parents every queue under its default department
        else:
            queues += _queues(queues_raw, kai)
    else:
        queues = _queues(queues_raw, kai)
    nominal: dict[str, str] = {}
    jobs, deleted = _jobs(_list(doc.get("jobs"), "jobs"), kai, now, nominal)
    snap = Snapshot(
        nodes=_nodes(_list(doc.get("nodes"), "nodes"), kai),
        queues=queues,
        jobs=jobs,
        now=now,
        topologies=topologies,
        config=cfg,
    )
    rounds = None
    if doc.get("rounds") is not None:
        r = _map(doc["rounds"], "rounds")
        _check_keys(r, {"until_match", "after_match"}, "rounds")
        rounds = (int(r.get("until_match", 2)), int(r.get("after_match", 5)))
    diff = doc.get("difference")
    if diff is not None:
        diff = _map(diff, "difference")
        _check_keys(diff, {"reason", "expect", "family"}, "difference")
        _req(diff, "reason", "difference")
        _map(_req(diff, "expect", "difference"), "difference.expect")
    return CycleFixture(
        str(_req(doc, "name", "scenario")),
        str(doc.get("description", "")),
        snap,
        _map(doc.get("expect"), "expect"),
        path,
        kai=_map(doc.get("kai"), "kai"),
        rounds=rounds,
        difference=diff,
        deleted_jobs=deleted,
        known_failure=str(doc.get("known_failure", "")),
        nominal_nodes=nominal,
    )


def load_fixture(path: str | Path) -> CycleFixture:
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{p}: not valid YAML: {exc}") from exc
    return fixture_from_dict(doc, str(p))


def load_fixtures(path: str | Path) -> list[CycleFixture]:
    """Every document of a multi-document YAML file (the conformance suite keeps one upstream file per YAML file)."""
    p = Path(path)
    try:
        docs = [d for d in yaml.safe_load_all(p.read_text()) if d is not None]
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{p}: not valid YAML: {exc}") from exc
    out = []
    for i, d in enumerate(docs):
        try:
            out.append(fixture_from_dict(d, f"{p}#{i}"))
        except ScenarioError as exc:
            raise ScenarioError(f"{p} document {i}: {exc}") from exc
    return out


def _job_key(name: str) -> str:
    return name if "/" in name else f"default/{name}"


def check(
    sc: CycleFixture,
    res: CycleResult,
    expect: dict[str, Any] | None = None,
    states: dict[str, TaskState] | None = None,
    decisions: bool = True,
) -> list[str]:
    """Mismatches between the cycle result and the scenario's expectations (empty when all hold).

    ``decisions=False`` checks task states only (KAI's integration rounds, where the state is what counts)."""
    exp = sc.expect if expect is None else expect
    errs: list[str] = []
    if states is not None:
        pods_of = {j.key: [p.uid for p in j.pods] for j in sc.snapshot.jobs}
        errs += _check_states(exp, states, pods_of)
    if not decisions:
        return errs
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
            if "moved_to" in want and e.moved_to != want["moved_to"]:
                errs.append(f"pod {uid}: moved to {e.moved_to}, want {want['moved_to']}")
    if "binds" in exp and len(res.binds) != int(exp["binds"]):
        errs.append(f"binds: {len(res.binds)}, want {exp['binds']}: {[(b.pod, b.node) for b in res.binds]}")
    if "evictions" in exp and len(res.evictions) != int(exp["evictions"]):
        errs.append(f"evictions: {len(res.evictions)}, want {exp['evictions']}: {[e.pod for e in res.evictions]}")
    errs += _check_counts(exp, res)
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


# ---------------------------------------------------------------------- KAI task states and multi-round runs

TaskState = tuple[str, str | None, str | None]  # (KAI task status, node, gpu group)
_PHASE_STATUS = {
    PodPhase.PENDING: "Pending",
    PodPhase.RUNNING: "Running",
    PodPhase.PIPELINED: "Pipelined",
    PodPhase.RELEASING: "Releasing",
    PodPhase.STUCK_RELEASING: "StuckInReleasing",
    PodPhase.SUCCEEDED: "Succeeded",
    PodPhase.FAILED: "Failed",
}
_SAME_STATUS = {"Allocated": "Binding", "Bound": "Running"}


def task_states(snap: Snapshot, res: CycleResult, nominal: dict[str, str] | None = None) -> dict[str, TaskState]:
    """Every pod's status after the cycle in KAI's vocabulary, with its node and shared-GPU group."""
    binds = {b.pod: b for b in res.binds}
    evicts = {e.pod: e for e in res.evictions}
    out: dict[str, TaskState] = {}
    for job in snap.jobs:
        for pod in job.pods:
            b, e = binds.get(pod.uid), evicts.get(pod.uid)
            if b is not None:
                out[pod.uid] = ("Pipelined" if b.pipelined else "Binding", b.node, b.gpu_group)
            elif e is not None:
                if e.moved_to is not None:
                    out[pod.uid] = ("Pipelined", e.moved_to, None)
                else:
                    out[pod.uid] = ("Releasing", pod.node, pod.gpu_group)
            else:
                node = pod.node if pod.node is not None else (nominal or {}).get(pod.uid)
                out[pod.uid] = (_PHASE_STATUS[pod.phase], node, pod.gpu_group)
    return out


def next_round(sc: CycleFixture, snap: Snapshot, res: CycleResult) -> Snapshot:
    """The cluster one scheduling round later, as KAI's integration tests model it: bound pods run, pipelined pods
    wait again, evicted pods are re-created pending by their controllers (or keep releasing while their job is
    being deleted)."""
    states = task_states(snap, res)
    jobs = []
    for job in snap.jobs:
        pods = []
        for pod in job.pods:
            status, node, group = states[pod.uid]
            if status == "Binding":
                pod = replace(pod, phase=PodPhase.RUNNING, node=node, gpu_group=group, start_time=snap.now)
            elif status in ("Pipelined", "Releasing"):
                if job.key in sc.deleted_jobs and status == "Releasing":
                    pod = replace(pod, phase=PodPhase.RELEASING)
                else:  # the controller re-creates it
                    pod = replace(pod, phase=PodPhase.PENDING, node=None, gpu_group=None, start_time=None)
                    sc.nominal_nodes.pop(pod.uid, None)
            pods.append(pod)
        last_start = job.last_start
        if any(states[p.uid][0] == "Binding" for p in job.pods):
            last_start = snap.now
        jobs.append(replace(job, pods=pods, last_start=last_start))
    return replace(snap, jobs=jobs)


def _at_rest(snap: Snapshot) -> CycleResult:
    """A result with no decisions: the states of a snapshot as they stand."""
    return CycleResult()


def run_fixture(sc: CycleFixture) -> list[str]:
    """Run the scenario (one cycle, or KAI's integration rounds) and return every unmet expectation."""
    from kai_ray.scheduler.cycle import run_cycle

    snap = sc.snapshot
    expect = sc.expect if sc.difference is None else sc.difference["expect"]
    if sc.rounds is None:
        res = run_cycle(snap)
        return _internal(res) + check(sc, res, expect, task_states(snap, res, sc.nominal_nodes))
    until, after = sc.rounds
    res = CycleResult()
    for r in range(until):
        res = run_cycle(snap)
        errs = _internal(res) + [f"round {r + 1}: {m}" for m in _check_counts(expect, res)]
        if errs:
            return errs
        snap = next_round(sc, snap, res)
    # upstream matches a session rebuilt from the converged state, then checks it stays put for more rounds
    errs = check(sc, res, expect, task_states(snap, _at_rest(snap), sc.nominal_nodes), decisions=False)
    for k in range(after):
        res = run_cycle(snap)
        more = _internal(res) + _check_counts(expect, res)
        more += check(sc, res, expect, task_states(snap, res, sc.nominal_nodes), decisions=False)
        if more:
            errs += [f"round {until + k + 1} (stability): {m}" for m in more]
            break
        snap = next_round(sc, snap, res)
    return errs


def agrees_with_kai(sc: CycleFixture) -> bool:
    """Whether kai-ray's outcome meets the upstream expectation (a documented difference does not)."""
    if sc.difference is None:
        return not run_fixture(sc)
    plain = replace(sc, difference=None)
    return not run_fixture(plain)


def _check_counts(exp: dict[str, Any], res: CycleResult) -> list[str]:
    """Upstream's cache-mock bounds: at most this many binds, pipelinings and evictions in one cycle."""
    counts = {
        "max_binds": sum(1 for b in res.binds if not b.pipelined),
        "max_pipelined": sum(1 for b in res.binds if b.pipelined) + sum(1 for e in res.evictions if e.moved_to),
        "max_evictions": len(res.evictions),
    }
    return [f"{k[4:]}: {n}, want at most {exp[k]}" for k, n in counts.items() if k in exp and n > int(exp[k])]


def _internal(res: CycleResult) -> list[str]:
    return [f"internal error: {f.message}" for f in res.findings if f.kind == "Cycle"]


def _check_states(exp: dict[str, Any], states: dict[str, TaskState], pods_of: dict[str, list[str]]) -> list[str]:
    errs: list[str] = []
    logical: dict[tuple[str | None, str], str | None] = {}
    reverse: dict[tuple[str | None, str | None], str] = {}

    def one(uid: str, want: dict[str, Any], what: str) -> None:
        got = states.get(uid)
        if got is None:
            errs.append(f"{what}: no such pod {uid}")
            return
        status, node, group = got
        if "status" in want:
            w = _SAME_STATUS.get(str(want["status"]), str(want["status"]))
            if _SAME_STATUS.get(status, status) != w:
                errs.append(f"{what} {uid}: status {status}, want {want['status']} (node {node})")
        if want.get("node") is not None and node != want["node"]:
            errs.append(f"{what} {uid}: node {node}, want {want['node']} (status {status})")
        names = want.get("gpu_groups")
        if names and status in ("Running", "Binding", "Pipelined", "Releasing") and group is not None:
            for name in names:
                seen = logical.setdefault((node, str(name)), group)
                if seen != group:
                    errs.append(f"{what} {uid}: on shared GPU {group}, want the same GPU as other {name!r} pods")
                owner = reverse.setdefault((node, group), str(name))
                if owner != str(name):
                    errs.append(f"{what} {uid}: shares GPU {group} with {owner!r} pods, want {name!r} apart")

    for name, want in _map(exp.get("jobs"), "expect.jobs").items():
        if "status" in want or "node" in want:
            key = _job_key(name)
            uids = pods_of.get(key)
            if uids is None:
                errs.append(f"job {key}: no such job")
                continue
            for uid in uids:
                one(uid, want, f"job {key} pod")
    for name, want in _map(exp.get("pods"), "expect.pods").items():
        if "status" in want or ("node" in want and "bound" not in want) or "gpu_groups" in want:
            one(_job_key(name), want, "pod")
    return errs

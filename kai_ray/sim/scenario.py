"""Scenario files: the cluster, the queues, the Ray workloads and the scheduler options of one simulation.

The node vocabulary (:class:`NodeSpec`) and the ``config:`` parser (:func:`config_from`) are shared with the
one-cycle test fixtures of :mod:`kai_ray.testing.cycle_fixture`: a node or an option reads the same in both.

Why pydantic models here: a scenario is user input. Every mistake must come back as one line naming the field
(``scenario.yaml: workloads[1].duration: ...``), so each section is a strict model (unknown keys are errors) and the
Ray manifests and Queues are parsed by the same :mod:`kai_ray.api` models the operators use. YAML itself is read by
:func:`kai_ray.api.loader.load_documents`, the one YAML reader of the house.
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from kai_ray import constants as c
from kai_ray.api.loader import (
    ManifestError,
    describe,
    field_path,
    load_documents,
    located,
    parse_object,
    pydantic_message,
    read_text,
    what_is,
    yaml_kind,
)
from kai_ray.api.meta import ObjectMeta
from kai_ray.api.names import key_problems, priority_problems
from kai_ray.api.quantity import QuantityError, parse_quantity
from kai_ray.api.queue import Queue, QueueSpec, queue_cycles
from kai_ray.api.ray import RayCluster, RayJob, RayObject, RayService
from kai_ray.api.strict import did_you_mean, refused_fields, unknown_fields
from kai_ray.durations import seconds
from kai_ray.podgrouper import (
    GroupingError,
    PodgrouperConfig,
    effective_cluster_spec,
    group,
    ray_resource_warnings,
)
from kai_ray.podgrouper.gang_findings import explain
from kai_ray.podgrouper.queue_rule import resolve_queue
from kai_ray.scheduler.allocation import PLACEMENT_POLICIES
from kai_ray.scheduler.snapshot import Node, Resources, SchedulerConfig, Taint
from kai_ray.scheduler.usage import UsageConfigError, usage_params_from

MAX_NODES = 100_000  # per node entry: the simulator holds every node in memory


class ScenarioError(ValueError):
    """A scenario that cannot be simulated; the message is one line naming the file and the field."""


def _seconds(value: Any) -> Any:
    """Seconds as a number, or a Go duration string ("90s", "1h30m")."""
    return seconds(value) if isinstance(value, str) else value


def _quantity(value: Any) -> Any:
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        try:
            return parse_quantity(value)
        except QuantityError as exc:
            raise ValueError(str(exc)) from None
    return value


Seconds = Annotated[float, BeforeValidator(_seconds), Field(ge=0)]
Quantity = Annotated[float, BeforeValidator(_quantity), Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel)


class NodeTaint(_Strict):
    key: str = Field(min_length=1)
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class DeviceSpec(_Strict):
    """DRA devices of a node, as its driver would publish them in a ResourceSlice: ``count`` devices named
    ``<name>-0 ..`` with the same attributes (string, integer or boolean) and capacities (quantities)."""

    driver: str = Field(default="gpu.nvidia.com", min_length=1)
    name: str = Field(default="gpu", min_length=1)
    count: int = Field(default=1, ge=1, le=1024)
    attributes: dict[str, str | bool | int] = Field(default_factory=dict)
    capacity: dict[str, Quantity] = Field(default_factory=dict)

    def as_api(self, start: int = 0) -> list[dict[str, Any]]:
        attrs = {
            k: {"bool": v} if isinstance(v, bool) else {"int": v} if isinstance(v, int) else {"string": v}
            for k, v in self.attributes.items()
        }
        caps = {k: {"value": str(int(v)) if float(v).is_integer() else str(v)} for k, v in self.capacity.items()}
        return [
            {"name": f"{self.name}-{i}", "attributes": attrs, "capacity": caps}
            for i in range(start, start + self.count)
        ]


def _wire_quantity(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{round(v * 1000)}m"


class NodeSpec(_Strict):
    """One node, or ``count`` identical nodes named ``<name>-0 .. <name>-<count-1>``.

    Keys in camelCase (``maxPods``, as in scenario files) or snake_case (``max_pods``, as in cycle fixtures)."""

    name: str = Field(min_length=1)
    count: int = Field(default=1, ge=1, le=MAX_NODES)
    gpus: int = Field(default=0, ge=0)
    cpu: Quantity = 64.0  # cores (a Kubernetes quantity: 64, "96", "64000m")
    memory: Quantity = float(512 * 2**30)  # bytes (a Kubernetes quantity: "512Gi")
    gpu_memory: Quantity = 0.0  # per GPU: MiB as a number, or a quantity with a unit ("80Gi")
    max_pods: int = Field(default=110, ge=1)
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[NodeTaint] = Field(default_factory=list)
    unschedulable: bool = False  # cordoned
    ready: bool = True  # False: the node's Ready condition is False
    devices: list[DeviceSpec] = Field(default_factory=list)  # DRA devices (ResourceSlices of the node)
    # every other allocatable resource by its Kubernetes name: google.com/tpu, amd.com/gpu, nvidia.com/mig-1g.10gb,
    # ephemeral-storage, hugepages-2Mi (quantities as Kubernetes writes them)
    resources: dict[str, Quantity] = Field(default_factory=dict)

    @field_validator("resources")
    @classmethod
    def _own_fields_first(cls, value: dict[str, float]) -> dict[str, float]:
        own = {"cpu": "cpu", "memory": "memory", "pods": "maxPods", c.GPU_RESOURCE: "gpus"}
        for name, amount in value.items():
            if name in own:
                raise ValueError(f"{name}: set it with the node's {own[name]} field")
            if amount < 0:
                raise ValueError(f"{name}: must not be negative")
        return value

    @model_validator(mode="before")
    @classmethod
    def _gpu_memory_units(cls, data: Any) -> Any:
        """A bare number is MiB (the node label's unit); a quantity with a unit is converted to MiB."""
        if isinstance(data, dict):
            for key in ("gpuMemory", "gpu_memory"):
                raw = data.get(key)
                if isinstance(raw, str) and raw.strip() and not raw.strip().replace(".", "", 1).isdigit():
                    try:
                        data = {**data, key: parse_quantity(raw) / 2**20}
                    except QuantityError as exc:
                        raise ValueError(f"{key}: {exc}") from None
        return data

    def node_names(self) -> list[str]:
        if self.count == 1:
            return [self.name]
        return [f"{self.name}-{i}" for i in range(self.count)]

    def as_api_nodes(self) -> list[dict[str, Any]]:
        """v1 Node dicts, as the API server would list them (read by :func:`kai_ray.bridge.node_from_api`)."""
        labels = dict(self.labels)
        if self.gpu_memory and c.GPU_MEMORY_NODE_LABEL not in labels:
            labels[c.GPU_MEMORY_NODE_LABEL] = str(int(self.gpu_memory))
        out = []
        for name in self.node_names():
            alloc = {
                "cpu": f"{round(self.cpu * 1000)}m",
                "memory": str(int(self.memory)),
                "pods": str(self.max_pods),
                c.GPU_RESOURCE: str(self.gpus),
                **{name: _wire_quantity(v) for name, v in self.resources.items()},
            }
            node: dict[str, Any] = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {**labels, "kubernetes.io/hostname": name}},
                "status": {"allocatable": alloc, "capacity": alloc},
            }
            if self.taints or self.unschedulable:
                node["spec"] = {
                    **({"taints": [t.model_dump() for t in self.taints]} if self.taints else {}),
                    **({"unschedulable": True} if self.unschedulable else {}),
                }
            if not self.ready:
                node["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
            out.append(node)
        return out

    def as_resource_slices(self) -> list[dict[str, Any]]:
        """One ResourceSlice (resource.k8s.io/v1 shape) per node and driver, as a DRA driver would publish."""
        out = []
        for node in self.node_names():
            by_driver: dict[str, list[dict[str, Any]]] = {}
            for dev in self.devices:
                have = by_driver.setdefault(dev.driver, [])
                have.extend(dev.as_api(sum(1 for d in have if d["name"].startswith(f"{dev.name}-"))))
            for driver, devices in by_driver.items():
                out.append(
                    {
                        "apiVersion": "resource.k8s.io/v1",
                        "kind": "ResourceSlice",
                        "metadata": {"name": f"{node}-{driver}"},
                        "spec": {"driver": driver, "nodeName": node, "pool": {"name": node}, "devices": devices},
                    }
                )
        return out

    def as_nodes(self) -> list[Node]:
        """Scheduler-core Nodes, for callers that build a snapshot without the API's shapes (cycle fixtures)."""
        return [
            Node(
                name=name,
                allocatable=Resources(float(self.gpus), self.cpu * 1000.0, self.memory),
                max_pods=self.max_pods,
                labels=dict(self.labels),
                taints=[Taint(t.key, t.value, t.effect) for t in self.taints],
                gpu_memory_mib=int(self.gpu_memory),
                unschedulable=self.unschedulable,
                ready=self.ready,
                extended={k: float(v) for k, v in self.resources.items() if v},
            )
            for name in self.node_names()
        ]


class QueueEntry(_Strict):
    """A KAI Queue: the short form (``name`` + spec fields) or a full manifest (apiVersion/kind/metadata/spec)."""

    name: str | None = None
    display_name: str | None = None
    parent_queue: str | None = None
    priority: int | None = None
    resources: dict[str, Any] | None = None
    preempt_min_runtime: str | None = None
    reclaim_min_runtime: str | None = None
    path: str | None = None
    api_version: str | None = None
    kind: str | None = None
    metadata: dict[str, Any] | None = None
    spec: dict[str, Any] | None = None


class ScaleStep(_Strict):
    """At ``at`` seconds, set worker group ``group`` to ``replicas`` (what Ray Serve / the Ray autoscaler would ask)."""

    at: Seconds
    group: str = Field(min_length=1)
    replicas: int = Field(ge=0)


class ActivitySpec(_Strict):
    """Busy/idle phases in Ray: ``busy`` seconds with tasks or actors running, then ``idle`` seconds with
    none, repeating from each run's start (an interactive cluster left running between sessions)."""

    busy: Seconds = Field(ge=0)
    idle: Seconds = Field(ge=0)


class WorkloadSpec(_Strict):
    """A Ray CR (inline ``manifest`` or a file ``path``) that arrives at ``at`` and runs for ``duration`` seconds."""

    manifest: dict[str, Any] | None = None
    path: str | None = None
    at: Seconds = 0.0
    duration: Seconds | None = None  # None: runs until the end (a service)
    restart_cost: Seconds | None = None  # overrides simulation.restartCost
    scale: list[ScaleStep] = Field(default_factory=list)  # replaces the simple autoscaler policy when given
    # kai-ray Ray-native world (docs/ray-native.md)
    checkpoint_interval: Seconds | None = Field(default=None, ge=0)  # overrides simulation.checkpointInterval
    activity: ActivitySpec | None = None
    startup_failures: int = Field(default=0, ge=0)  # first placements whose pods never all turn Ready
    upgrade_at: Seconds | None = None  # RayService: a zero-downtime upgrade starts its pending cluster then

    @model_validator(mode="after")
    def _one_source(self) -> WorkloadSpec:
        if (self.manifest is None) == (self.path is None):
            raise ValueError("exactly one of 'manifest' or 'path' is required")
        return self


class SimulationOptions(_Strict):
    """How the simulated world behaves (not the scheduler: that is ``config``)."""

    schedule_period: Seconds = Field(default=1.0, gt=0)  # KAI's --schedule-period
    restart_cost: Seconds = 60.0  # seconds a preempted workload spends starting again before it makes progress
    checkpoint_interval: Seconds = 0.0  # 0: no work is lost on preemption; else work since the last checkpoint is
    autoscaler_period: Seconds = Field(default=10.0, gt=0)  # Ray autoscaler loop for enableInTreeAutoscaling
    termination_grace: Seconds = 0.0  # evicted pods hold their resources this long (Releasing)
    elastic_speedup: Literal["linear", "none"] = "linear"  # extra workers above the minimum speed a job up linearly
    until: Seconds | None = None  # stop the clock here (default: when every workload with a duration is done)
    ray_facts: bool = False  # tell the scheduler what Ray knows, as the operators do


def _config_model() -> type[BaseModel]:
    """A strict pydantic model mirroring :class:`SchedulerConfig`, so new core options are accepted automatically."""
    hints = typing.get_type_hints(SchedulerConfig)
    fields: dict[str, Any] = {}
    defaults = SchedulerConfig()
    for f in dataclasses.fields(SchedulerConfig):
        if f.name == "usage_params":
            continue  # KAI's usageParams mapping, parsed by usage_params_from
        typ = hints[f.name]
        default = getattr(defaults, f.name)
        if typ is float:
            fields[f.name] = (Annotated[float, BeforeValidator(_seconds)], default)
        else:
            fields[f.name] = (typ, default)
    model: type[BaseModel] = create_model(
        "SchedulerOptions",
        __config__=ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel),
        **fields,
    )
    return model


SchedulerOptions = _config_model()
PLACEMENTS = PLACEMENT_POLICIES


def scheduler_config(raw: dict[str, Any] | None) -> SchedulerConfig:
    """``config`` section -> SchedulerConfig. Accepts snake_case or camelCase keys, and KAI's
    ``placementStrategy: {gpu: spread, cpu: binpack}`` shorthand."""
    data = dict(raw or {})
    strategy = data.pop("placementStrategy", None)
    if strategy is not None:
        if not isinstance(strategy, dict):
            raise ValueError("placementStrategy: expected a mapping like {gpu: binpack, cpu: binpack}")
        unknown = set(strategy) - {"gpu", "cpu"}
        if unknown:
            raise ValueError(f"placementStrategy.{sorted(unknown)[0]}: unknown resource (gpu or cpu)")
        for res, value in strategy.items():
            data[f"placement_{res}"] = value
    usage = None
    for key in ("usageParams", "usage_params"):
        if key in data:
            raw = data.pop(key)
            if raw is not None and not isinstance(raw, dict):
                raise ValueError("usageParams: expected a mapping like {windowSize: 1d, halfLifePeriod: 6h}")
            try:
                usage = usage_params_from(raw or {})
            except UsageConfigError as exc:
                raise ValueError(str(exc)) from None
    model = SchedulerOptions.model_validate(data)
    values = model.model_dump()
    for key in ("placement_gpu", "placement_cpu"):
        if values[key] not in PLACEMENTS:
            raise ValueError(f"{to_camel(key)}: {values[key]!r} is not one of {', '.join(PLACEMENTS)}")
    known_actions = SchedulerConfig().actions
    for i, action in enumerate(values["actions"]):
        if action not in known_actions:
            raise ValueError(f"actions[{i}]: {action!r} is not one of {', '.join(known_actions)}")
    values["actions"] = tuple(values["actions"])
    if values["k_value"] < 0:
        raise ValueError(f"kValue: {values['k_value']:g} must not be negative (0 turns time-based fair share off)")
    return SchedulerConfig(**values, usage_params=usage)


def node_spec(raw: Any, where: str, defaults: dict[str, Any] | None = None) -> NodeSpec:
    """One node entry -> NodeSpec, or ScenarioError naming the field (``nodes[2].maxPods: ...``). ``defaults`` fill
    the keys (snake_case) the entry gives in neither spelling: a test harness's own node defaults."""
    if not isinstance(raw, dict):
        raise ScenarioError(f"{where}: expected a mapping, got {yaml_kind(raw)}")
    data = dict(raw)
    for key, value in (defaults or {}).items():
        if key not in data and to_camel(key) not in data:
            data[key] = value
    try:
        return NodeSpec.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_first_error(exc, where, NodeSpec)) from None


def config_from(raw: Any) -> SchedulerConfig:
    """A ``config:`` section -> SchedulerConfig, or ScenarioError naming the field (``config.kValue: ...``)."""
    if raw is not None and not isinstance(raw, dict):
        raise ScenarioError(f"config: expected a mapping, got {yaml_kind(raw)}")
    try:
        return scheduler_config(raw)
    except ValidationError as exc:
        raise ScenarioError(_first_error(exc, "config", SchedulerOptions)) from None
    except ValueError as exc:
        raise ScenarioError(f"config.{exc}") from None


class ScenarioFile(_Strict):
    nodes: list[NodeSpec] = Field(min_length=1)
    queues: list[QueueEntry] = Field(default_factory=list)
    workloads: list[WorkloadSpec] = Field(default_factory=list)
    # DRA objects: DeviceClass, ResourceClaimTemplate and ResourceClaim manifests (a workload's file may hold its
    # templates too); without a DeviceClass, gpu.nvidia.com (NVIDIA's DRA driver) is assumed
    dra: list[dict[str, Any]] = Field(default_factory=list)
    config: dict[str, Any] = Field(default_factory=dict)
    simulation: SimulationOptions = Field(default_factory=SimulationOptions)
    priority_classes: dict[str, int] = Field(default_factory=lambda: dict(c.PRIORITY_CLASSES))
    description: str | None = None


@dataclasses.dataclass
class Workload:
    """One validated workload of a scenario."""

    obj: RayObject
    at: float
    duration: float | None
    restart_cost: float | None
    source: str  # where it came from, for messages
    scale: list[ScaleStep] = dataclasses.field(default_factory=list)
    spec: WorkloadSpec | None = None  # the entry as written (Ray-native world options)

    @property
    def key(self) -> str:
        return f"{self.obj.metadata.namespace}/{self.obj.metadata.name}"


@dataclasses.dataclass
class Scenario:
    """A loaded scenario: everything validated, nothing simulated yet."""

    nodes: list[dict[str, Any]]
    queues: list[Queue]
    workloads: list[Workload]
    config: SchedulerConfig
    simulation: SimulationOptions
    priority_classes: dict[str, int]
    podgrouper: PodgrouperConfig
    source: str
    description: str | None = None
    warnings: list[str] = dataclasses.field(default_factory=list)  # unknown fields, ignored: "<where>: <field>: ..."
    dra: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # DRA manifests and the nodes' ResourceSlices
    notes: list[str] = dataclasses.field(default_factory=list)  # what was skipped or kept as written, on purpose
    advice: list[str] = dataclasses.field(default_factory=list)  # used as written, likely not as meant (a typo'd class)


def _first_error(exc: ValidationError, prefix: str = "", model: type[BaseModel] | None = None) -> str:
    err = exc.errors()[0]
    loc = field_path(tuple(err["loc"]))
    msg = pydantic_message(err)
    if err["type"] == "extra_forbidden":
        known = _known_keys(model, tuple(err["loc"])[:-1]) if model is not None else set()
        hint = did_you_mean(str(err["loc"][-1]), known) if known else None
        msg = "unknown field" + (f" (did you mean {hint}?)" if hint else "")
    where = ".".join(p for p in (prefix, loc) if p)
    return f"{where or '(root)'}: {msg}"


def _known_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> set[str]:
    """The keys a strict section accepts at ``loc`` (camelCase, as written in scenario files)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", {})
        field = next((f for name, f in fields.items() if part in (name, f.alias)), None)
        if field is None:
            return set()
        current = field.annotation
        while typing.get_origin(current) is not None:  # list[X], X | None -> X
            args = [a for a in typing.get_args(current) if a is not type(None)]
            current = args[-1] if args else None
    fields = getattr(current, "model_fields", None)
    return {f.alias or name for name, f in fields.items()} if fields else set()


def _read(path: Path, what: str) -> str:
    try:
        return read_text(path)
    except OSError as exc:
        raise ScenarioError(f"{what}: cannot read {str(path)!r}: {exc.strerror or exc}") from None
    except ManifestError as exc:
        raise ScenarioError(str(exc) if what == str(path) else f"{what}: {exc}") from None


def _queue_from_entry(entry: QueueEntry, where: str, warnings: list[str]) -> Queue:
    if entry.kind is not None or entry.spec is not None or entry.metadata is not None:
        doc = {k: v for k, v in entry.model_dump(by_alias=True, exclude_none=True).items()}
        doc.setdefault("apiVersion", "scheduling.run.ai/v2")
        doc.setdefault("kind", "Queue")
        for unknown in unknown_fields(doc, "Queue"):
            warnings.append(f"{where}: {unknown.located()}")
        try:
            obj = parse_object(doc, where)
        except ManifestError as exc:
            raise ScenarioError(str(exc)) from None
        assert isinstance(obj, Queue)
        return obj
    if not entry.name:
        raise ScenarioError(f"{where}.name: required")
    spec_fields = entry.model_dump(
        by_alias=True,
        exclude_none=True,
        include={"display_name", "parent_queue", "priority", "resources", "preempt_min_runtime", "reclaim_min_runtime"},
    )
    try:
        spec = QueueSpec.model_validate(spec_fields)
    except ValidationError as exc:
        raise ScenarioError(_first_error(exc, where)) from None
    for unknown in unknown_fields({"spec": spec_fields}, "Queue"):
        warnings.append(f"{where}: {unknown.located()}")
    return Queue(metadata=ObjectMeta(name=entry.name), spec=spec)


def _load_queues(entries: list[QueueEntry], base: Path, source: str, warnings: list[str]) -> list[Queue]:
    queues: list[Queue] = []
    for i, entry in enumerate(entries):
        where = f"{source}: queues[{i}]"
        if entry.path is not None:
            others = entry.model_dump(exclude_none=True, exclude={"path"})
            if others:
                raise ScenarioError(f"{where}.{to_camel(next(iter(others)))}: not allowed together with 'path'")
            path = base / entry.path
            text = _read(path, f"{where}.path")
            try:
                for label, doc in load_documents(text, str(entry.path)):
                    for unknown in unknown_fields(doc, "Queue" if isinstance(doc, dict) else None):
                        warnings.append(f"{where}.path: {label} ({describe(doc)}): {unknown.located()}")
                    obj = parse_object(doc, label)
                    if not isinstance(obj, Queue):
                        raise ScenarioError(f"{where}.path: {label} is a {type(obj).__name__}, not a Queue")
                    queues.append(obj)
            except ManifestError as exc:
                raise ScenarioError(f"{where}.path: {exc}") from None
        else:
            queues.append(_queue_from_entry(entry, where, warnings))
    if not queues:
        queues = [
            Queue.model_validate(
                {
                    "metadata": {"name": name},
                    "spec": {
                        **({"parentQueue": "default-parent-queue"} if name == c.DEFAULT_QUEUE else {}),
                        "resources": {
                            r: {"quota": 0, "limit": -1, "overQuotaWeight": 1} for r in ("gpu", "cpu", "memory")
                        },
                    },
                }
            )
            for name in ("default-parent-queue", c.DEFAULT_QUEUE)
        ]
    seen: set[str] = set()
    for i, q in enumerate(queues):
        for err in q.validate_spec():
            raise ScenarioError(f"{source}: queues[{i}] (Queue {q.name or '?'}): {err}")
        if q.name in seen:
            raise ScenarioError(f"{source}: queues[{i}].name: duplicate queue {q.name!r}")
        seen.add(q.name)
    for err in queue_cycles(queues):
        raise ScenarioError(f"{source}: queues: {err}")
    return queues


DRA_KINDS = ("DeviceClass", "ResourceClaimTemplate", "ResourceClaim", "ResourceSlice")


def _load_workload(
    spec: WorkloadSpec,
    i: int,
    base: Path,
    source: str,
    pg_config: PodgrouperConfig,
    warnings: list[str],
    dra_out: list[dict[str, Any]] | None = None,
    notes: list[str] | None = None,
    advice: list[str] | None = None,
) -> Workload:
    where = f"{source}: workloads[{i}]"
    if spec.path is not None:
        text = _read(base / spec.path, f"{where}.path")
        try:
            docs = list(load_documents(text, spec.path))
        except ManifestError as exc:
            raise ScenarioError(f"{where}.path: {exc}") from None
        dra_docs = [doc for _, doc in docs if isinstance(doc, dict) and doc.get("kind") in DRA_KINDS]
        docs = [d for d in docs if not (isinstance(d[1], dict) and d[1].get("kind") in DRA_KINDS)]
        if dra_out is not None:
            dra_out.extend(dra_docs)
        others = [d for d in docs if isinstance(d[1], dict) and d[1].get("kind") and d[1]["kind"] not in c.RAY_KINDS]
        if len(others) < len(docs):  # a file of a Role, a ConfigMap and the RayJob: the RayJob is the workload
            docs = [d for d in docs if d not in others]
            if notes is not None:
                notes += [f"{where}.path: {label} ({describe(doc)}): not a Ray CR; skipped" for label, doc in others]
        if len(docs) != 1:
            raise ScenarioError(f"{where}.path: {spec.path} holds {len(docs)} documents; a workload is one Ray CR")
        label, doc = docs[0]
        field = f"{where}.path"
    else:
        label, doc, field = f"{where}.manifest", spec.manifest, f"{where}.manifest"
    named = f"{field} ({describe(doc)})" if isinstance(doc, dict) else field
    if isinstance(doc, dict) and doc.get("kind") in ("RayCluster", "RayJob", "RayService"):
        for bad in refused_fields(doc):
            raise ScenarioError(f"{named}: {bad}")
        for unknown in unknown_fields(doc):
            warnings.append(f"{named}: {unknown.located()}")
        warnings += [f"{named}: {key}" for key in key_problems(doc)]
        if advice is not None:
            advice += [f"{named}: {p}" for p in priority_problems(doc, pg_config.priority_classes, every=True)]
    try:
        obj = parse_object(doc, label)
    except ManifestError as exc:
        raise ScenarioError(f"{field}: {exc}" if spec.path else str(exc)) from None
    if not isinstance(obj, RayCluster | RayJob | RayService):
        raise ScenarioError(f"{field}: a {type(obj).__name__} is not a Ray CR (RayCluster, RayJob or RayService)")
    if not obj.metadata.name:
        raise ScenarioError(f"{field}: metadata.name: required")
    obj.metadata.namespace = obj.metadata.namespace or "default"
    try:
        pg = group(obj, config=pg_config)
    except GroupingError as exc:
        raise ScenarioError(located(named, str(exc), doc)) from None
    if c.INVALID in pg.metadata.annotations:
        raise ScenarioError(located(named, pg.metadata.annotations[c.INVALID], doc))
    warnings += [f"{named}: {mismatch}" for mismatch in ray_resource_warnings(obj)]
    for finding in explain(obj, pg):
        if finding.reason == "Suspended":
            continue  # noted below, with what the simulator does with it
        if finding.type == "Warning" and advice is not None:
            advice.append(f"{named}: {finding.message}")
        elif finding.type != "Warning" and notes is not None:
            notes.append(f"{named}: {finding.message}")
    cluster_spec = effective_cluster_spec(obj)
    groups = {wg.group_name or f"worker-group-{k}": wg for k, wg in enumerate(cluster_spec.worker_group_specs)}
    for k, step in enumerate(spec.scale):
        wg = groups.get(step.group)
        if wg is None:
            known = ", ".join(sorted(groups)) or "none"
            raise ScenarioError(f"{where}.scale[{k}].group: {step.group!r} is not a worker group ({known})")
        if not wg.min <= step.replicas <= wg.max:
            raise ScenarioError(
                f"{where}.scale[{k}].replicas: {step.replicas} is outside [minReplicas {wg.min}, maxReplicas {wg.max}]"
            )
        if step.replicas * wg.hosts > pg_config.max_gang_pods:
            raise ScenarioError(
                f"{where}.scale[{k}].replicas: {step.replicas} x numOfHosts {wg.hosts} pods; at most "
                f"{pg_config.max_gang_pods} pods per gang"
            )
    if not isinstance(obj, RayService) and obj.spec.suspend is True and notes is not None:
        notes.append(f"{named}: spec.suspend is true: KubeRay creates no pods until it is resumed; it stays suspended")
    if spec.upgrade_at is not None and not isinstance(obj, RayService):
        raise ScenarioError(f"{where}.upgradeAt: only a RayService upgrades (this is a {obj.kind})")
    return Workload(
        obj=obj,
        at=spec.at,
        duration=spec.duration,
        restart_cost=spec.restart_cost,
        source=field,
        scale=spec.scale,
        spec=spec,
    )


def parse_scenario(data: Any, source: str = "<scenario>", base: Path | None = None) -> Scenario:
    """A decoded scenario document -> a validated :class:`Scenario`, or ScenarioError naming the field."""
    base = base or Path(".")
    if not isinstance(data, dict) or data.get("kind") or ("jobs" in data and "nodes" in data):
        raise ScenarioError(_not_a_scenario(source, [data]))
    try:
        raw = ScenarioFile.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(f"{source}: {_first_error(exc, model=ScenarioFile)}") from None
    try:
        config = config_from(raw.config)
    except ScenarioError as exc:
        raise ScenarioError(f"{source}: {exc}") from None
    nodes: list[dict[str, Any]] = []
    names: set[str] = set()
    for i, ns in enumerate(raw.nodes):
        for node in ns.as_api_nodes():
            name = node["metadata"]["name"]
            if name in names:
                raise ScenarioError(f"{source}: nodes[{i}].name: duplicate node name {name!r}")
            names.add(name)
            nodes.append(node)
    warnings: list[str] = []
    queues = _load_queues(raw.queues, base, source, warnings)
    pg_config = PodgrouperConfig(priority_classes=dict(raw.priority_classes))
    dra: list[dict[str, Any]] = []
    for i, doc in enumerate(raw.dra):
        if doc.get("kind") not in DRA_KINDS:
            raise ScenarioError(f"{source}: dra[{i}].kind: {doc.get('kind')!r} is not one of {', '.join(DRA_KINDS)}")
        dra.append(doc)
    notes: list[str] = []
    advice: list[str] = []
    workloads = [
        _load_workload(w, i, base, source, pg_config, warnings, dra, notes, advice) for i, w in enumerate(raw.workloads)
    ]
    dra.extend(sl for ns in raw.nodes for sl in ns.as_resource_slices())
    keys: set[str] = set()
    leaves = {q.name for q in queues} - {q.spec.parent_queue for q in queues if q.spec.parent_queue}
    for i, w in enumerate(workloads):
        if w.key in keys:
            raise ScenarioError(f"{w.source}: metadata.name: duplicate workload {w.key!r}")
        keys.add(w.key)
        queue = resolve_queue(w.obj.metadata, None, pg_config)
        if queue not in leaves:
            what = "has child queues (only leaf queues hold jobs)" if queue in {q.name for q in queues} else "is not"
            detail = f"queue {queue!r} {what}" + (" defined in queues" if what == "is not" else "")
            raise ScenarioError(f"{source}: workloads[{i}] ({w.obj.kind} {w.key}): {detail}")
    return Scenario(
        nodes=nodes,
        queues=queues,
        workloads=workloads,
        config=config,
        simulation=raw.simulation,
        priority_classes=dict(raw.priority_classes),
        podgrouper=pg_config,
        source=source,
        description=raw.description,
        warnings=warnings,
        dra=dra,
        notes=notes,
        advice=advice,
    )


def _not_a_scenario(source: str, docs: list[Any]) -> str:
    """A file of another kind says what it is, and what reads it."""
    if len(docs) == 1:
        what = what_is(docs[0])
    else:
        shown = ", ".join(describe(d) for d in docs[:3]) + (", ..." if len(docs) > 3 else "")
        what = f"{len(docs)} Kubernetes manifests ({shown})"
    ray = any(isinstance(d, dict) and d.get("kind") in ("RayCluster", "RayJob", "RayService") for d in docs)
    hint = f"; `kai-ray podgroup -f {source}` shows the PodGroups kai-ray would make" if ray else ""
    return f"{source} is {what}, not a simulator scenario (nodes, queues, workloads; see docs/simulator.md){hint}"


def load_scenario(path: str | Path) -> Scenario:
    """Read a scenario YAML file; manifests named by ``path`` are relative to the scenario's directory."""
    path = Path(path)
    text = _read(path, str(path))
    try:
        docs = list(load_documents(text, str(path)))
    except ManifestError as exc:
        raise ScenarioError(str(exc)) from None
    if len(docs) > 1 and all(isinstance(d, dict) and d.get("kind") for _, d in docs):
        raise ScenarioError(_not_a_scenario(str(path), [d for _, d in docs]))
    if len(docs) != 1:
        raise ScenarioError(f"{path}: expected one YAML document, found {len(docs)}")
    return parse_scenario(docs[0][1], str(path), path.parent)

"""Replaying the public Alibaba GPU cluster trace (``cluster-trace-gpu-v2023``) through the scheduler core.

Schema (github.com/alibaba/clusterdata, ``cluster-trace-gpu-v2023/README.md``):

* node list: ``sn, cpu_milli, memory_mib, gpu, model`` (``model`` empty or ``nan`` on CPU nodes);
* pod list: ``name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase, creation_time,
  deletion_time, scheduled_time``; ``gpu_milli`` is the share of one GPU when ``num_gpu`` is 1; ``gpu_spec`` a
  ``|``-separated list of allowed GPU models, or empty / ``nan`` for any.

Mapping: each pod is its own single-pod gang (no Ray podgrouper: these are not Ray pods), arriving at
``creation_time`` and running for ``deletion_time - scheduled_time`` seconds once bound. ``num_gpu == 1`` with
``gpu_milli < 1000`` becomes a fractional GPU (``gpu-fraction``); a ``gpu_spec`` becomes required node affinity on
the node label ``nvidia.com/gpu.product`` (set from the node's ``model``). Pods without a ``scheduled_time`` (never
ran in the trace) or with a negative run time are skipped and counted. All pods go to one queue (``trace``, no
quota, no limit) with priority class ``train``: the replay measures placement, not policy between tenants.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from kai_ray.scheduler.snapshot import (
    UNLIMITED,
    Node,
    NodeSelectorRequirement,
    Pod,
    Queue,
    Resources,
    SchedulerConfig,
)
from kai_ray.sim.engine import Engine, EngineOptions, SimResult
from kai_ray.sim.workloads import PodWorkload

TRACE_FORMATS = ("alibaba-v2023",)
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
MODEL_LABEL = "nvidia.com/gpu.product"
TRACE_QUEUE = "trace"
TRACE_NAMESPACE = "trace"
MIB = 2**20


class TraceError(ValueError):
    """A trace file that cannot be replayed; one line naming the file, the row and the column."""


@dataclass
class TracePod:
    name: str
    cpu_milli: float
    memory_mib: float
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...]
    qos: str
    creation: float
    run_time: float


@dataclass
class Trace:
    nodes: list[Node]
    pods: list[TracePod]
    skipped: dict[str, int] = field(default_factory=dict)


def _blank(v: str | None) -> bool:
    return v is None or v.strip() == "" or v.strip().lower() == "nan"


def _rows(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    try:
        fh = path.open(newline="")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        missing = [col for col in columns if col not in header]
        if missing:
            hint = ""
            if columns is POD_COLUMNS and all(col in header for col in POD_COLUMNS[:5]):
                hint = "; a pod list without times can only be inflated (--inflate)"
            raise TraceError(f"{path}: header: missing column {missing[0]!r} (expected {', '.join(columns)}){hint}")
        yield from enumerate(reader, start=2)


def _num(
    path: Path, line: int, row: dict[str, str], col: str, integer: bool = False, blank: float | None = None
) -> float:
    raw = row.get(col)
    if _blank(raw):
        if blank is not None:
            return blank
        raise TraceError(f"{path}: line {line}: {col}: missing value")
    assert raw is not None
    try:
        value = float(raw)
    except ValueError:
        raise TraceError(f"{path}: line {line}: {col}: {raw!r} is not a number") from None
    if math.isnan(value) or value < 0:
        raise TraceError(f"{path}: line {line}: {col}: {raw!r} must be a non-negative number")
    if integer and value != int(value):
        raise TraceError(f"{path}: line {line}: {col}: {raw!r} is not an integer")
    return value


def _unique_name(path: Path, line: int, row: dict[str, str], col: str, what: str, seen: set[str]) -> str:
    name = (row.get(col) or "").strip()
    if not name:
        raise TraceError(f"{path}: line {line}: {col}: missing {what} name")
    if name in seen:
        raise TraceError(f"{path}: line {line}: {col}: duplicate {what} {name!r}")
    seen.add(name)
    return name


def read_nodes(path: str | Path) -> list[Node]:
    path = Path(path)
    nodes: list[Node] = []
    seen: set[str] = set()
    for line, row in _rows(path, NODE_COLUMNS):
        name = _unique_name(path, line, row, "sn", "node", seen)
        gpus = _num(path, line, row, "gpu", integer=True)
        model = row.get("model")
        labels = {"kubernetes.io/hostname": name}
        if not _blank(model):
            assert model is not None
            labels[MODEL_LABEL] = model.strip()
        nodes.append(
            Node(
                name=name,
                allocatable=Resources(
                    gpu=gpus,
                    cpu=_num(path, line, row, "cpu_milli"),
                    memory=_num(path, line, row, "memory_mib") * MIB,
                ),
                labels=labels,
            )
        )
    if not nodes:
        raise TraceError(f"{path}: no nodes")
    return nodes


def pod_shape(path: Path, line: int, row: dict[str, str], seen: set[str]) -> TracePod:
    """What a pod row asks for (name, cpu, memory, GPUs, allowed GPU models), without its times."""
    name = _unique_name(path, line, row, "name", "pod", seen)
    num_gpu = int(_num(path, line, row, "num_gpu", integer=True))
    gpu_milli = int(_num(path, line, row, "gpu_milli", integer=True, blank=0))
    if num_gpu == 1 and gpu_milli > 1000:
        raise TraceError(f"{path}: line {line}: gpu_milli: {gpu_milli} exceeds 1000 (one GPU)")
    spec_raw = row.get("gpu_spec")
    spec = () if _blank(spec_raw) else tuple(s.strip() for s in (spec_raw or "").split("|") if s.strip())
    return TracePod(
        name=name,
        cpu_milli=_num(path, line, row, "cpu_milli"),
        memory_mib=_num(path, line, row, "memory_mib"),
        num_gpu=num_gpu,
        gpu_milli=gpu_milli,
        gpu_spec=spec,
        qos=(row.get("qos") or "").strip(),
        creation=0.0,
        run_time=0.0,
    )


def read_pods(path: str | Path, limit: int | None = None) -> tuple[list[TracePod], dict[str, int]]:
    path = Path(path)
    pods: list[TracePod] = []
    skipped: dict[str, int] = {}
    seen: set[str] = set()
    for line, row in _rows(path, POD_COLUMNS):
        if limit is not None and line - 1 > limit:  # the first ``limit`` rows, skipped ones included
            break
        tp = pod_shape(path, line, row, seen)
        creation = _num(path, line, row, "creation_time")
        deletion = _num(path, line, row, "deletion_time", blank=-1)
        scheduled = _num(path, line, row, "scheduled_time", blank=-1)
        if scheduled < 0 or deletion < 0:
            skipped["never scheduled in the trace"] = skipped.get("never scheduled in the trace", 0) + 1
            continue
        if deletion < scheduled:
            skipped["deleted before scheduled"] = skipped.get("deleted before scheduled", 0) + 1
            continue
        tp.creation, tp.run_time = creation, deletion - scheduled
        pods.append(tp)
    return pods, skipped


def pod_template(tp: TracePod) -> Pod:
    """The trace pod as a scheduler pod: whole GPUs, or a fraction of one GPU, and its GPU-model constraint."""
    fraction: float | None = None
    gpu = float(tp.num_gpu)
    if tp.num_gpu == 1 and 0 < tp.gpu_milli < 1000:
        fraction = tp.gpu_milli / 1000.0
        gpu = fraction
    affinity = [[NodeSelectorRequirement(MODEL_LABEL, "In", tp.gpu_spec)]] if tp.gpu_spec and tp.num_gpu else []
    return Pod(
        uid=f"{TRACE_NAMESPACE}/{tp.name}",
        name=tp.name,
        namespace=TRACE_NAMESPACE,
        job=f"{TRACE_NAMESPACE}/{tp.name}",
        request=Resources(gpu=gpu, cpu=tp.cpu_milli, memory=tp.memory_mib * MIB),
        gpu_fraction=fraction,
        required_affinity=affinity,
    )


def trace_queues() -> list[Queue]:
    unlimited = Resources(UNLIMITED, UNLIMITED, UNLIMITED)
    return [Queue(TRACE_QUEUE, quota=unlimited, limit=unlimited)]


def build_trace_engine(
    nodes: list[Node],
    pods: list[TracePod],
    config: SchedulerConfig | None = None,
    options: EngineOptions | None = None,
) -> Engine:
    """Pods arrive relative to the earliest creation time; times in the result are seconds from it."""
    opts = options or EngineOptions(restart_cost=0.0)
    engine = Engine(nodes, trace_queues(), config or SchedulerConfig(), opts)
    t0 = min((p.creation for p in pods), default=0.0)
    for tp in sorted(pods, key=lambda p: (p.creation, p.name)):
        engine.add(
            PodWorkload(
                key=f"{TRACE_NAMESPACE}/{tp.name}",
                kind="Pod",
                arrive_at=tp.creation - t0,
                duration=tp.run_time,
                restart_cost=opts.restart_cost,
                queue=TRACE_QUEUE,
                priority_class="train",
                priority=50,
                template=pod_template(tp),
            )
        )
    return engine


def replay_trace(
    fmt: str,
    nodes_csv: str | None,
    pods_csv: str | None,
    placement: str | None,
    limit: int | None,
    period: float,
    progress: bool,
) -> tuple[SimResult, dict[str, Any]]:
    """A trace read and replayed, with a progress bar on stderr when asked; a bad option or file is a
    :class:`TraceError` naming it."""
    if fmt not in TRACE_FORMATS:
        raise TraceError(f"--trace: {fmt!r} is not a known trace format ({', '.join(TRACE_FORMATS)})")
    if not nodes_csv:
        raise TraceError("--nodes: required with --trace (the node list CSV: sn, cpu_milli, memory_mib, gpu, model)")
    if not pods_csv:
        raise TraceError("--pods: required with --trace (the pod list CSV)")
    if limit is not None and limit < 1:
        raise TraceError(f"--limit: must be at least 1, got {limit}")
    if period <= 0:
        raise TraceError(f"--period: must be positive, got {period}")
    nodes = read_nodes(nodes_csv)
    pods, skipped = read_pods(pods_csv, limit)
    config = SchedulerConfig()
    if placement:
        config.placement_gpu = config.placement_cpu = placement
    engine = build_trace_engine(nodes, pods, config, EngineOptions(schedule_period=period, restart_cost=0.0))
    if progress:
        with Progress(
            TextColumn("[bold]replaying[/bold]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("pods done"),
            TextColumn("[dim]sim t={task.fields[t]}[/dim]"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=False,
        ) as bar:
            task = bar.add_task("replay", total=len(pods), t="0")

            def tick(t: float, done: int, total: int) -> None:
                if done % 25 == 0 or done == total:
                    bar.update(task, completed=done, t=f"{t / 3600:.1f}h")

            engine.progress = tick
            res = engine.run()
            bar.update(task, completed=sum(1 for w in res.workloads if w.completed_at is not None))
    else:
        res = engine.run()
    extra = {"trace": {"format": fmt, "nodes": nodes_csv, "pods": pods_csv, "skipped": skipped}}
    return res, extra

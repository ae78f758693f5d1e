"""``kai-ray bench vs-kai``: kai-ray's scheduler against KAI's own scheduler and binder — or, with ``--against
kube-scheduler``, against kube-scheduler's own gang scheduling — on identical control planes.

Each *round* gives one scheduler a fresh control plane (kube-apiserver + etcd + KWOK on loopback, ``nodes`` KWOK
nodes with ``gpus_per_node`` GPUs, the chart's PriorityClasses and default queues, that scheduler's own CRDs) and
runs every workload on it; rounds alternate A B A B. Both sides get the same objects: the benchmark writes every
PodGroup and pod itself (neither podgrouper runs), so what is timed is scheduling and binding only.

Workloads (all fit the cluster, so "all bound" is reached):

* **W1** single-GPU pods filling every GPU, one PodGroup each (``train``);
* **W2** gangs of 8 single-GPU pods filling every GPU;
* **W4** gangs of 4 single-GPU pods filling every GPU (the shape kube-scheduler's own gang benchmark reports);
* **W3** Ray-shaped gangs: a CPU head and 1-GPU workers, ``minMember`` = head + the minimum workers and elastic
  extras above it, mixed sizes and priorities, ~90% of the GPUs;
* **preemption**: on the cluster W1 left full, an 8 x 1-GPU ``inference`` gang (``minMember`` 8) preempting
  ``train`` pods, ``trials`` times.

**kube-scheduler** (Kubernetes 1.37, ``GenericWorkload`` on in the apiserver and the scheduler, its default
profile, which then carries the gang plugin) gets the same shapes in the upstream gang API: each gang a
``scheduling.k8s.io/v1beta1`` PodGroup (``schedulingPolicy.gang.minCount`` = the gang's minimum, the gang's
PriorityClass) and pods naming it in ``spec.schedulingGroup``; W1's single pods are plain pods. Its client has no
rate limit (``qps: -1``); it binds asynchronously without a worker bound of its own.

Two figures per workload (pods/s and gangs/s). *pre-created* (the fair throughput figure): every object exists before
the scheduler process is started; timed from its start to the last pod bound. *inside*: the scheduler runs (and has
bound a probe pod); timed from the first creation to the last pod bound, so creation is inside the window. Preemption
is timed from the gang's creation to its last pod bound, with phases: decision (each scheduler's log), first eviction
seen, last victim gone, first and last gang pod bound (all seen through one watch of the benchmark's pods).

The ceiling is the raw Binding-API rate of this same server, measured at the start of each round with one request
at a time and with ``workers`` concurrent requests (what both binders are allowed). Client limits are the same on
both sides: no client-side rate limit and ``workers`` concurrent bindings (kai-ray ``--bind-workers``; KAI's binder
``--max-concurrent-reconciles``, its scheduler and binder ``--qps=-1``), unless ``kai_limits="shipped"``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from kai_ray.bench.e2e import cpu_seconds, ensure, install_defaults, list_all, raw_binding_rate
from kai_ray.bench.tracking import BENCH_LABEL, PodTimes, Tracker, apiserver_requests, peak_rss, quiesce, retry
from kai_ray.k8s.base.rest import ApiError, Kube, podgroups_path, pods_path
from kai_ray.testing import kai_upstream as kai
from kai_ray.testing.controlplane import build
from kai_ray.testing.controlplane.harness import Component, ControlPlane, free_port, our_crd_dir

SCHEDULERS = ("kai-ray", "kai", "kube-scheduler")
AGAINST = ("kai", "kube-scheduler")  # what kai-ray is compared with
WORKLOADS = ("w1", "w2", "w3", "w4")
KAI_WORKLOADS = ("w1", "w2", "w3")  # the default series against KAI
PRIORITY_CLASSES = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
GANG = 8
SMALL_GANG = 4
UPSTREAM_GANG_GATE = "GenericWorkload"
UPSTREAM_PODGROUPS = "/apis/scheduling.k8s.io/v1beta1/namespaces/{ns}/podgroups"
# W3's Ray clusters: (minimum workers, elastic extra workers, PriorityClass), cycled.
RAY_SHAPES = ((2, 2, "train"), (4, 4, "train"), (8, 0, "build"), (1, 3, "train"), (3, 1, "build-preemptible"))
W3_FILL = 0.9
RUN_FIGURES = (
    "seconds",
    "pods_per_second",
    "gangs_per_second",
    "first_bound_s",
    "binding_pods_per_second",
    "ratio_to_raw_sequential",
    "ratio_to_raw_concurrent",
)
PREEMPTION_FIGURES = (
    "seconds",
    "decision_s",
    "first_eviction_seen_s",
    "last_victim_gone_s",
    "bindrequest_s",
    "first_bound_s",
    "gang_nodes",
    "victims",
)
KAI_DECISION = r"Successfully preempted for job <{job}>"
KAI_BINDREQUEST = r"Creating bind request for task <{job}-"
KAI_RAY_DECISION = r"evicting \d+ pods for {job}$"
KUBE_DECISION = r'"Start the preemption asynchronously" preemptor="{job}"'
KUBE_SCHEDULER_NAME = "default-scheduler"


@dataclass
class VsConfig:
    nodes: int = 500
    gpus_per_node: int = 8
    repeats: int = 5
    schedulers: tuple[str, ...] = ("kai-ray", "kai")
    workloads: tuple[str, ...] = KAI_WORKLOADS
    preemption_trials: int = 3
    inside: tuple[str, ...] = KAI_WORKLOADS  # workloads also timed with creation inside the window
    raw_pods: int = 1000
    workers: int = 32
    kai_limits: str = "same"  # same | shipped
    kai_verbosity: int = kai.VERBOSITY
    timeout: float = 1800.0
    out_dir: Path | None = None  # per-round JSON and the schedulers' logs
    kai_ray_args: tuple[str, ...] = ()
    lock: Path | None = None  # held (flock) around each round, so other benchmarks can run between rounds

    def validate(self) -> VsConfig:
        for name, value in (("nodes", self.nodes), ("gpus_per_node", self.gpus_per_node)):
            if value < 1:
                raise ValueError(f"--{name.replace('_', '-')}: {value} must be at least 1")
        if self.gpus_per_node < SMALL_GANG and "w4" in self.workloads:
            raise ValueError(f"--gpus-per-node: W4's gangs of {SMALL_GANG} need at least {SMALL_GANG} GPUs per node")
        if self.gpus_per_node < GANG and "w2" in self.workloads:
            raise ValueError(f"--gpus-per-node: W2's gangs of {GANG} need at least {GANG} GPUs per node")
        if self.repeats < 1 or self.raw_pods < 1 or self.workers < 1 or self.timeout <= 0:
            raise ValueError("--repeats, --raw-pods, --workers and --timeout must be positive")
        if self.preemption_trials < 0:
            raise ValueError(f"--preemption-trials: {self.preemption_trials} must not be negative")
        if self.preemption_trials and self.nodes * self.gpus_per_node < 2 * GANG:
            raise ValueError(f"preemption needs at least {2 * GANG} GPUs in the cluster")
        if self.preemption_trials * GANG > self.nodes * self.gpus_per_node // 2:
            raise ValueError("--preemption-trials: the inference gangs would take over half of the cluster")
        bad = [s for s in self.schedulers if s not in SCHEDULERS]
        if bad or not self.schedulers:
            raise ValueError(f"--scheduler: {', '.join(bad) or 'none'} is not one of {', '.join(SCHEDULERS)}")
        for flag, names in (("--workloads", self.workloads), ("--inside", self.inside)):
            bad = [w for w in names if w not in WORKLOADS]
            if bad:
                raise ValueError(f"{flag}: {', '.join(bad)} is not one of {', '.join(WORKLOADS)}")
        if self.kai_limits not in ("same", "shipped"):
            raise ValueError(f"--kai-limits: {self.kai_limits!r} is not 'same' or 'shipped'")
        return self


# --- workloads --------------------------------------------------------------------------------------------------


@dataclass
class Gang:
    name: str
    min_member: int
    priority: str
    pods: list[dict[str, Any]]


def _pod(
    ns: str, name: str, group: str, priority: str, gpus: int, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A pod of PodGroup ``group`` with ``gpus`` whole GPUs, or (0) a CPU pod like a Ray head."""
    resources: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "128Mi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    else:
        resources["requests"] = {"cpu": "1", "memory": "2Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {BENCH_LABEL: "vs", "kai.scheduler/queue": "default-queue", **(labels or {})},
            "annotations": {"pod-group-name": group},
        },
        "spec": {
            "schedulerName": kai.SCHEDULER_NAME,
            "priorityClassName": priority,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "registry.invalid/bench:0", "resources": resources}],
        },
    }


def _podgroup(ns: str, gang: Gang) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": gang.name, "namespace": ns, "labels": {BENCH_LABEL: "vs"}},
        "spec": {"minMember": gang.min_member, "queue": "default-queue", "priorityClassName": gang.priority},
    }


def workload(kind: str, ns: str, nodes: int, gpus_per_node: int) -> list[Gang]:
    """The gangs (PodGroup + pods) of one workload for a cluster of ``nodes`` x ``gpus_per_node`` GPUs."""
    total = nodes * gpus_per_node
    if kind == "w1":
        return [Gang(f"p-{i}", 1, "train", [_pod(ns, f"p-{i}", f"p-{i}", "train", 1)]) for i in range(total)]
    if kind in ("w2", "w4"):
        size = GANG if kind == "w2" else SMALL_GANG
        return [
            Gang(f"g-{g}", size, "train", [_pod(ns, f"g-{g}-{i}", f"g-{g}", "train", 1) for i in range(size)])
            for g in range(total // size)
        ]
    if kind == "w3":
        gangs: list[Gang] = []
        used = 0
        while True:
            min_w, extra, prio = RAY_SHAPES[len(gangs) % len(RAY_SHAPES)]
            workers = min_w + extra
            if used + workers > W3_FILL * total:
                return gangs
            used += workers
            name = f"ray-{len(gangs)}"
            head = {"ray.io/cluster": name, "ray.io/node-type": "head", "ray.io/group": "headgroup"}
            worker = {"ray.io/cluster": name, "ray.io/node-type": "worker", "ray.io/group": "gpu"}
            pods = [_pod(ns, f"{name}-head", name, prio, 0, head)]
            pods += [_pod(ns, f"{name}-worker-{i}", name, prio, 1, worker) for i in range(workers)]
            gangs.append(Gang(name, 1 + min_w, prio, pods))
    raise ValueError(f"unknown workload {kind!r}")


def inference_gang(ns: str, trial: int) -> Gang:
    name = f"inference-{trial}"
    return Gang(name, GANG, "inference", [_pod(ns, f"{name}-{i}", name, "inference", 1) for i in range(GANG)])


def upstream_podgroup(ns: str, gang: Gang) -> dict[str, Any]:
    """The gang in the upstream gang API: a standalone ``scheduling.k8s.io/v1beta1`` PodGroup."""
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": gang.name, "namespace": ns, "labels": {BENCH_LABEL: "vs"}},
        "spec": {"schedulingPolicy": {"gang": {"minCount": gang.min_member}}, "priorityClassName": gang.priority},
    }


def upstream_pod(pod: dict[str, Any], gang: Gang) -> dict[str, Any]:
    """A gang's pod for kube-scheduler: the default scheduler, the PodGroup named in ``spec.schedulingGroup`` (a
    one-pod gang is a plain pod), no KAI annotation or queue label."""
    meta = pod["metadata"]
    labels = {k: v for k, v in meta["labels"].items() if k != "kai.scheduler/queue"}
    spec = {**pod["spec"], "schedulerName": KUBE_SCHEDULER_NAME}
    if len(gang.pods) > 1:
        spec["schedulingGroup"] = {"podGroupName": gang.name}
    return {**pod, "metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": labels}, "spec": spec}


def create_gangs(kube: Kube, ns: str, gangs: list[Gang], workers: int, upstream: bool = False) -> None:
    """Each gang's PodGroup, then its pods; gangs in parallel (``workers`` requests at a time). ``upstream``: in the
    upstream gang API, for kube-scheduler."""

    def one(g: Gang) -> None:
        if not upstream:
            retry(lambda: ensure(kube, podgroups_path(ns), _podgroup(ns, g)))
        elif len(g.pods) > 1:
            retry(lambda: ensure(kube, UPSTREAM_PODGROUPS.format(ns=ns), upstream_podgroup(ns, g)))
        for p in g.pods:
            body = upstream_pod(p, g) if upstream else p
            retry(lambda body=body: ensure(kube, pods_path(ns), body))  # type: ignore[misc]

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, gangs))


# --- the two schedulers ------------------------------------------------------------------------------------------


@dataclass
class Side:
    """How to start one scheduler on a control plane (and what it leaves running between workloads)."""

    name: str
    plane: ControlPlane
    cfg: VsConfig
    log_dir: Path
    binder: Component | None = None
    scheduler: Component | None = None
    starts: int = 0
    peak_rss: dict[str, int] = field(default_factory=dict)

    @property
    def is_kai(self) -> bool:
        return self.name == "kai"

    @property
    def is_kube(self) -> bool:
        return self.name == "kube-scheduler"

    def limits(self) -> kai.ClientLimits:
        if self.cfg.kai_limits == "shipped":
            return kai.ClientLimits.as_shipped()
        return kai.ClientLimits(binder_workers=self.cfg.workers)

    def prepare(self) -> None:
        if self.is_kai:
            self.binder = kai.start_binder(self.plane.kubeconfig_path, self.log_dir, self.limits())
            kai.wait_listening(self.binder)

    def start(self) -> Component:
        self.starts += 1
        tag = f"-{self.starts}"
        if self.is_kai:
            comp = kai.start_scheduler(
                self.plane.kubeconfig_path, self.log_dir, self.limits(), self.cfg.kai_verbosity, tag=tag
            )
        elif self.is_kube:
            comp = kai.spawn(f"kube-scheduler{tag}", self._kube_scheduler_argv(), self.log_dir, dict(os.environ))
        else:
            argv = [
                sys.executable,
                "-m",
                "kai_ray",
                "operator",
                "scheduler",
                f"--kubeconfig={self.plane.kubeconfig_path}",
                "--no-leader-elect",
                "--bind-address=127.0.0.1",
                f"--metrics-port={free_port()}",
                f"--health-port={free_port()}",
                f"--bind-workers={self.cfg.workers}",
                *self.cfg.kai_ray_args,
            ]
            comp = kai.spawn(f"kai-ray-scheduler{tag}", argv, self.log_dir, dict(os.environ))
        self.scheduler = comp
        return comp

    def _kube_scheduler_argv(self) -> list[str]:
        """kube-scheduler's default profile with the upstream gang API on, no client rate limit, loopback only."""
        config = self.log_dir / "kube-scheduler.yaml"
        config.write_text(
            "apiVersion: kubescheduler.config.k8s.io/v1\n"
            "kind: KubeSchedulerConfiguration\n"
            f"clientConnection: {{kubeconfig: {self.plane.kubeconfig_path}, qps: -1}}\n"
            "leaderElection: {leaderElect: false}\n"
        )
        return [
            str(build.ensure("kube-scheduler")),
            f"--config={config}",
            f"--feature-gates={UPSTREAM_GANG_GATE}=true",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            "--v=2",
        ]

    def stop_scheduler(self) -> None:
        if self.scheduler is not None:
            self._note_rss(self.scheduler, "scheduler")
            self.scheduler.stop()
            self.scheduler = None

    def stop(self) -> None:
        self.stop_scheduler()
        if self.binder is not None:
            self._note_rss(self.binder, "binder")
            self.binder.stop()
            self.binder = None

    def _note_rss(self, comp: Component, role: str) -> None:
        self.peak_rss[role] = max(self.peak_rss.get(role, 0), peak_rss(comp.popen.pid))

    def pids(self) -> dict[str, int]:
        out = {n: c.popen.pid for n, c in self.plane.components.items()}
        if self.scheduler is not None:
            out["scheduler"] = self.scheduler.popen.pid
        if self.binder is not None:
            out["binder"] = self.binder.popen.pid
        return out

    def decision_times(self, job: str) -> list[float]:
        """When the scheduler decided to preempt for ``job`` (``ns/name``), from its log."""
        if self.is_kube:
            pattern = KUBE_DECISION.format(job=job)
            return [t for log in sorted(self.log_dir.glob("kube-scheduler-*.log")) for t in klog_times(log, pattern)]
        pattern = (KAI_DECISION if self.is_kai else KAI_RAY_DECISION).format(job=job)
        times: list[float] = []
        for log in sorted(self.log_dir.glob("kai-scheduler-*.log" if self.is_kai else "kai-ray-scheduler-*.log")):
            times += kai.log_times(log, pattern) if self.is_kai else _python_log_times(log, pattern)
        return times

    def bindrequest_times(self, job: str) -> list[float]:
        if not self.is_kai:
            return []
        times: list[float] = []
        for log in sorted(self.log_dir.glob("kai-scheduler-*.log")):
            times += kai.log_times(log, KAI_BINDREQUEST.format(job=job))
        return times


def _python_log_times(path: Path, pattern: str) -> list[float]:
    """Epoch seconds of lines matching ``pattern`` in a log written with ``%(asctime)s`` (local time, ms)."""
    rx = re.compile(pattern)
    out: list[float] = []
    with contextlib.suppress(OSError), open(path, errors="replace") as fh:
        for line in fh:
            if rx.search(line):
                with contextlib.suppress(ValueError):
                    out.append(datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp())
    return out


def klog_times(path: Path, pattern: str, year: int | None = None) -> list[float]:
    """Epoch seconds of lines matching ``pattern`` in a klog log (``I1128 05:38:06.155624 ...``, local time, no
    year: this year unless given)."""
    rx = re.compile(pattern)
    stamp = re.compile(r"^[IWEF](\d{4} \d{2}:\d{2}:\d{2}\.\d{6}) ")
    year = year or datetime.now().year
    out: list[float] = []
    with contextlib.suppress(OSError), open(path, errors="replace") as fh:
        for line in fh:
            m = stamp.match(line)
            if m and rx.search(line):
                with contextlib.suppress(ValueError):
                    out.append(datetime.strptime(f"{year}{m.group(1)}", "%Y%m%d %H:%M:%S.%f").timestamp())
    return out


# --- one round ---------------------------------------------------------------------------------------------------


def setup_cluster(kube: Kube, plane: ControlPlane, cfg: VsConfig) -> list[str]:
    """KAI's chart objects (PriorityClasses; default queues with unlimited quota so inference may preempt), then
    the namespaces KAI expects and the KWOK nodes."""
    install_defaults(kube, PRIORITY_CLASSES)
    for ns in (kai.KAI_NAMESPACE, kai.RESOURCE_RESERVATION, kai.SCALE_ADJUST):
        _namespace(kube, ns)
    return plane.create_gpu_nodes(
        cfg.nodes, gpus=cfg.gpus_per_node, prefix="bench", timeout=max(300.0, cfg.nodes * 0.2)
    )


def _namespace(kube: Kube, ns: str) -> None:
    ensure(kube, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})


def _clear(kube: Kube, tracker: Tracker, ns: str, timeout: float, workers: int = 32) -> None:
    """Delete a workload's pods (grace 0), its PodGroups and KAI's BindRequests, one request each in parallel (a
    delete-collection of thousands of pods outlasts the API server's request timeout); wait until the pods are gone.
    """
    collections = (
        pods_path(ns),
        podgroups_path(ns),
        f"/apis/scheduling.run.ai/v1alpha2/namespaces/{ns}/bindrequests",
        UPSTREAM_PODGROUPS.format(ns=ns),
    )
    for path in collections:
        try:
            names = [o["metadata"]["name"] for o in retry(lambda p=path: list_all(kube, p))]  # type: ignore[misc]
        except ApiError as exc:
            if exc.not_found:
                continue  # KAI's BindRequest type on kai-ray's control plane, the upstream gang API without its gate
            raise

        def delete(name: str, path: str = path) -> None:
            try:
                retry(lambda: kube.request("DELETE", f"{path}/{name}", query={"gracePeriodSeconds": 0}))
            except ApiError as exc:
                if not exc.not_found:
                    raise

        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(delete, names))
    tracker.wait_empty(ns, timeout)


BENCH_WRITES = ("POST pods", "POST podgroups", "DELETE pods")  # the benchmark's own creations and clean-ups


def _writes(before: dict[str, float], after: dict[str, float], pods: int) -> dict[str, float]:
    """API writes per pod during a run, by verb and resource, without the benchmark's own (KWOK's are included)."""
    out = {}
    for k, v in after.items():
        d = v - before.get(k, 0.0)
        if d < max(1.0, pods / 100) or k in BENCH_WRITES or k.split(" ", 1)[0] not in ("POST", "PUT", "PATCH"):
            continue
        out[k] = round(d / pods, 2)
    return out


def _gpus(pod: dict[str, Any]) -> int:
    return int(pod["spec"]["containers"][0]["resources"].get("limits", {}).get("nvidia.com/gpu", 0))


def _overcommitted(times: dict[str, PodTimes], gangs: list[Gang], gpus_per_node: int) -> int:
    """Nodes holding more GPUs than they have, among the pods bound and not gone (both schedulers must give 0)."""
    gpus = {p["metadata"]["name"]: _gpus(p) for g in gangs for p in g.pods}
    use: dict[str, int] = {}
    for name, t in times.items():
        if t.node and t.gone is None:
            use[t.node] = use.get(t.node, 0) + gpus.get(name, 0)
    return sum(1 for v in use.values() if v > gpus_per_node)


def _fill(
    side: Side, kube: Kube, tracker: Tracker, ns: str, kind: str, pre_created: bool, cfg: VsConfig
) -> dict[str, Any]:
    gangs = workload(kind, ns, cfg.nodes, cfg.gpus_per_node)
    pods = sum(len(g.pods) for g in gangs)
    _namespace(kube, ns)
    if pre_created:
        t_create = time.time()
        create_gangs(kube, ns, gangs, cfg.workers, upstream=side.is_kube)
        created_s = time.time() - t_create
    req0 = retry(lambda: apiserver_requests(kube))
    pids = side.pids()
    cpu0 = {n: cpu_seconds(p) for n, p in pids.items()}
    t0 = time.time()
    if pre_created:
        side.start()
        pids = side.pids()
        cpu0["scheduler"] = 0.0
    else:
        create_gangs(kube, ns, gangs, cfg.workers, upstream=side.is_kube)
        created_s = time.time() - t0
    tracker.wait_bound(ns, pods, cfg.timeout)
    cpu = {n: round(cpu_seconds(p) - cpu0.get(n, 0.0), 2) for n, p in pids.items()}
    req1 = retry(lambda: apiserver_requests(kube))
    times = tracker.of(ns)
    bound = sorted(t.bound for t in times.values() if t.bound is not None)
    seconds = bound[-1] - t0
    return {
        "workload": kind,
        "method": "pre-created" if pre_created else "inside",
        "pods": pods,
        "gangs": len(gangs),
        "seconds": round(seconds, 3),
        "pods_per_second": round(pods / seconds, 1),
        "gangs_per_second": round(len(gangs) / seconds, 1),
        "first_bound_s": round(bound[0] - t0, 3),
        "bind_span_s": round(bound[-1] - bound[0], 3),
        "binding_pods_per_second": round(pods / max(bound[-1] - bound[0], 1e-3), 1),
        "create_s": round(created_s, 2),
        "overcommitted_nodes": _overcommitted(times, gangs, cfg.gpus_per_node),
        "cpu_seconds": cpu,
        "writes_per_pod": _writes(req0, req1, pods),
    }


def _preempt(side: Side, kube: Kube, tracker: Tracker, ns: str, trial: int, cfg: VsConfig) -> dict[str, Any]:
    """One inference gang on the full cluster, once the API server is quiet; timed from its creation."""
    settled = quiesce(kube)
    gang = inference_gang(ns, trial)
    before = {k for k, t in tracker.of(ns).items() if t.gone is None and t.terminating is None}
    t0 = time.time()
    create_gangs(kube, ns, [gang], GANG, upstream=side.is_kube)
    t_created = time.time()
    names = {p["metadata"]["name"] for p in gang.pods}
    prefix = f"{ns}/"
    tracker.wait(
        f"inference gang {gang.name} bound",
        lambda: all((t := tracker.pods.get(prefix + n)) is not None and t.bound is not None for n in names),
        cfg.timeout,
    )
    bound_at = time.time()
    times = tracker.of(ns)
    gang_bound = sorted(times[n].bound or 0.0 for n in names)
    victims = {
        k: t
        for k, t in times.items()
        if k in before and (t.terminating or t.gone) and (t.terminating or t.gone or 0) >= t0
    }
    evicted = sorted(min(x for x in (t.terminating, t.gone) if x is not None) for t in victims.values())
    gone = sorted(t.gone for t in victims.values() if t.gone is not None)
    # a victim may still be going when the gang is bound elsewhere; give stragglers a moment to show up
    rel = lambda x: None if x is None else round(x - t0, 3)  # noqa: E731
    nodes = {times[n].node for n in names}
    return {
        "trial": trial,
        "job": f"{ns}/{gang.name}",
        "quiesced_s": round(settled, 1),
        "t0": t0,
        "seconds": round(gang_bound[-1] - t0, 3),
        "created_s": rel(t_created),
        "first_eviction_seen_s": rel(evicted[0] if evicted else None),
        "last_victim_gone_s": rel(gone[-1] if gone else None),
        "first_bound_s": rel(gang_bound[0]),
        "victims": len(victims),
        "gang_nodes": len(nodes),
        "waited_s": round(bound_at - t0, 3),
    }


def _add_decisions(side: Side, trials: list[dict[str, Any]]) -> None:
    """Decision (and KAI's BindRequest) times from the scheduler's logs, read once the process has flushed them."""
    for p in trials:
        t0 = p.pop("t0")
        decisions = [x for x in side.decision_times(p["job"]) if x >= t0 - 1]
        bindreqs = [x for x in side.bindrequest_times(p["job"]) if x >= t0 - 1]
        p["decision_s"] = round(min(decisions) - t0, 3) if decisions else None
        p["bindrequest_s"] = round(min(bindreqs) - t0, 3) if bindreqs else None


def run_round(name: str, cfg: VsConfig, round_no: int, say: Callable[[str], None]) -> dict[str, Any]:
    """One scheduler on one fresh control plane: raw rate, then every workload (and preemption after W1)."""
    crds = [kai.crd_dir()] if name == "kai" else [our_crd_dir()]
    upstream_gangs = [f"--feature-gates={UPSTREAM_GANG_GATE}=true", "--runtime-config=scheduling.k8s.io/v1beta1=true"]
    out: dict[str, Any] = {"scheduler": name, "round": round_no, "runs": [], "preemption": []}
    base = cfg.out_dir or Path(os.environ.get("TMPDIR", "/tmp"))
    log_dir = base / f"round-{round_no:02d}-{name}"
    log_dir.mkdir(parents=True, exist_ok=True)
    out["load_before"] = [round(x, 2) for x in os.getloadavg()]
    plane = ControlPlane(crds=crds, apiserver_extra_args=upstream_gangs if name == "kube-scheduler" else [])
    with plane:
        kube = Kube(plane.api_client(pool_size=cfg.workers + 8))
        t = time.monotonic()
        nodes = setup_cluster(kube, plane, cfg)
        took = plane.timings.total + time.monotonic() - t
        say(f"[{name} #{round_no}] control plane and {len(nodes)} nodes in {took:.0f}s")
        seq, par = raw_binding_rate(kube, nodes, cfg.raw_pods, cfg.workers)
        out["raw_bindings_per_second"] = {"sequential": round(seq, 1), "concurrent": round(par, 1)}
        say(f"[{name} #{round_no}] raw Binding API: {seq:.0f}/s sequential, {par:.0f}/s with {cfg.workers} at a time")
        side = Side(name, plane, cfg, log_dir)
        try:
            with Tracker(kube) as tracker:
                side.prepare()
                inside = [w for w in cfg.workloads if w in cfg.inside]
                for pre, kinds in ((True, list(cfg.workloads)), (False, inside)):
                    if not kinds:
                        continue
                    if not pre:
                        _probe(side, kube, tracker, cfg)
                    for kind in kinds:
                        ns = f"{kind}-{'pre' if pre else 'in'}"
                        run = _fill(side, kube, tracker, ns, kind, pre, cfg)
                        run["ratio_to_raw_sequential"] = round(run["pods_per_second"] / seq, 3)
                        run["ratio_to_raw_concurrent"] = round(run["pods_per_second"] / par, 3)
                        out["runs"].append(run)
                        say(
                            f"[{name} #{round_no}] {kind} {run['method']}: {run['pods']} pods in {run['seconds']:.1f}s "
                            f"({run['pods_per_second']:.0f}/s; first bound at {run['first_bound_s']:.1f}s)"
                        )
                        if kind == "w1" and pre:
                            for trial in range(cfg.preemption_trials):
                                p = _preempt(side, kube, tracker, ns, trial, cfg)
                                out["preemption"].append(p)
                                say(
                                    f"[{name} #{round_no}] preemption {trial}: {p['seconds']:.2f}s (victims gone at "
                                    f"{p['last_victim_gone_s']}s, gang on {p['gang_nodes']} node(s))"
                                )
                        if pre:
                            side.stop_scheduler()
                        _clear(kube, tracker, ns, cfg.timeout)
                side.stop_scheduler()
        finally:
            side.stop()
        _add_decisions(side, out["preemption"])
        out["peak_rss_mib"] = {k: round(v / 2**20, 1) for k, v in side.peak_rss.items()}
        out["peak_rss_mib"].update({n: round(peak_rss(c.popen.pid) / 2**20, 1) for n, c in plane.components.items()})
    out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    (log_dir / "round.json").write_text(json.dumps(out, indent=2))
    return out


def _probe(side: Side, kube: Kube, tracker: Tracker, cfg: VsConfig) -> None:
    """Start the scheduler and wait until it has bound one pod (it is then watching and binding)."""
    side.start()
    ns = "probe"
    _namespace(kube, ns)
    probe = Gang("probe", 1, "train", [_pod(ns, "probe", "probe", "train", 1)])
    create_gangs(kube, ns, [probe], 1, upstream=side.is_kube)
    tracker.wait_bound(ns, 1, 300)
    _clear(kube, tracker, ns, 120)


# --- the series and its summary ------------------------------------------------------------------------------------


def spread(values: list[float]) -> dict[str, float]:
    """Median with min/max and the quartiles (``n`` samples)."""
    vs = sorted(values)
    if not vs:
        return {"n": 0}
    q = statistics.quantiles(vs, n=4, method="inclusive") if len(vs) > 1 else [vs[0]] * 3
    return {
        "n": len(vs),
        "median": round(statistics.median(vs), 3),
        "min": round(vs[0], 3),
        "max": round(vs[-1], 3),
        "q1": round(q[0], 3),
        "q3": round(q[2], 3),
    }


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per scheduler: each workload/method's seconds and pods/s, preemption phases, raw rates, RSS."""
    out: dict[str, Any] = {}
    for name in SCHEDULERS:
        mine = [r for r in rounds if r["scheduler"] == name]
        if not mine:
            continue
        s: dict[str, Any] = {"rounds": len(mine)}
        raw_seq = [r["raw_bindings_per_second"]["sequential"] for r in mine]
        raw_par = [r["raw_bindings_per_second"]["concurrent"] for r in mine]
        s["raw_sequential"] = spread(raw_seq)
        s["raw_concurrent"] = spread(raw_par)
        for run_key in sorted({(x["workload"], x["method"]) for r in mine for x in r["runs"]}):
            pairs = [(r, x) for r in mine for x in r["runs"] if (x["workload"], x["method"]) == run_key]
            runs = [x for _, x in pairs]
            entry: dict[str, Any] = {"pods": runs[0]["pods"], "gangs": runs[0]["gangs"]}
            for k in RUN_FIGURES:
                entry[k] = spread([x[k] for x in runs if x.get(k) is not None])
            entry["binding_ratio_to_raw_concurrent"] = spread(
                [x["binding_pods_per_second"] / r["raw_bindings_per_second"]["concurrent"] for r, x in pairs]
            )
            entry["overcommitted_nodes"] = max(x["overcommitted_nodes"] for x in runs)
            entry["writes_per_pod"] = round(statistics.median(sum(x["writes_per_pod"].values()) for x in runs), 2)
            s[f"{run_key[0]}/{run_key[1]}"] = entry
        pre = [p for r in mine for p in r["preemption"]]
        if pre:
            s["preemption"] = {k: spread([p[k] for p in pre if p.get(k) is not None]) for k in PREEMPTION_FIGURES}
        rss: dict[str, float] = {}
        for r in mine:
            for k, v in r.get("peak_rss_mib", {}).items():
                rss[k] = max(rss.get(k, 0.0), v)
        s["peak_rss_mib"] = rss
        s["load_1m"] = spread([x for r in mine for x in (r["load_before"][0], r["load_after"][0])])
        out[name] = s
    return out


@contextlib.contextmanager
def _locked(path: Path | None, say: Callable[[str], None]) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` for the duration (the convention two benchmarks never overlap by)."""
    if path is None:
        yield
        return
    with open(path, "a") as fh:
        if not _try_lock(fh):
            say(f"waiting for {path}")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _try_lock(fh: Any) -> bool:
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def run_series(cfg: VsConfig, say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """``repeats`` rounds per scheduler, alternating A B A B; returns every round and the summary."""
    cfg.validate()
    if "kai" in cfg.schedulers:
        kai.binaries()
        kai.crd_dir()
    rounds: list[dict[str, Any]] = []
    for _ in range(cfg.repeats):
        for name in cfg.schedulers:
            with _locked(cfg.lock, say):
                rounds.append(run_round(name, cfg, len(rounds), say))
    return {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()},
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "rounds": rounds,
        "summary": summarize(rounds),
    }


# --- the report -----------------------------------------------------------------------------------------------------

LABELS = {"kai-ray": "kai-ray", "kai": "KAI", "kube-scheduler": "kube-scheduler"}
WORKLOAD_TITLES = {
    "w1": "W1 single-GPU pods",
    "w2": f"W2 gangs of {GANG}",
    "w4": f"W4 gangs of {SMALL_GANG}",
    "w3": "W3 Ray-shaped gangs + elastic extras",
}
PHASE_TITLES = {
    "decision_s": "decision (scheduler log)",
    "first_eviction_seen_s": "first eviction seen",
    "last_victim_gone_s": "last victim gone",
    "bindrequest_s": "BindRequest created (KAI log)",  # KAI only
    "first_bound_s": "first gang pod bound",
    "seconds": "**all bound**",
}


def _cell(sp: dict[str, Any] | None, digits: int = 1) -> str:
    if not sp or not sp.get("n"):
        return "-"
    return f"{sp['median']:.{digits}f} ({sp['min']:.{digits}f}-{sp['max']:.{digits}f})"


def _ratio(a: dict[str, Any] | None, b: dict[str, Any] | None) -> str:
    if not a or not b or not a.get("n") or not b.get("n") or not a["median"]:
        return "-"
    return f"{b['median'] / a['median']:.1f}x"


def markdown(summary: dict[str, Any]) -> str:
    """The summary as Markdown tables: medians with (min-max) over all samples; ratios are theirs / kai-ray, where
    theirs is KAI or, in a series against it, kube-scheduler."""
    other = next((n for n in AGAINST if n in summary), "kai")
    them = LABELS[other]
    ours, theirs = summary.get("kai-ray", {}), summary.get(other, {})
    lines = [
        f"| workload | method | pods | kai-ray s | {them} s | {them} / kai-ray | kai-ray pods/s | {them} pods/s "
        f"| gangs | kai-ray gangs/s | {them} gangs/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    keys = sorted({k for k in (*ours, *theirs) if "/" in k}, key=lambda k: (k.split("/")[1] != "pre-created", k))
    for key in keys:
        a, b = ours.get(key) or {}, theirs.get(key) or {}
        kind, method = key.split("/")
        pods = a.get("pods") or b.get("pods")
        lines.append(
            f"| {WORKLOAD_TITLES.get(kind, kind)} | {method} | {pods} | {_cell(a.get('seconds'))} | "
            f"{_cell(b.get('seconds'))} | {_ratio(a.get('seconds'), b.get('seconds'))} | "
            f"{_cell(a.get('pods_per_second'), 0)} | {_cell(b.get('pods_per_second'), 0)} | "
            f"{a.get('gangs') or b.get('gangs')} | {_cell(a.get('gangs_per_second'), 0)} | "
            f"{_cell(b.get('gangs_per_second'), 0)} |"
        )
    if ours.get("preemption") or theirs.get("preemption"):
        lines += ["", f"| preemption: seconds after the gang's creation | kai-ray | {them} |", "|---|---|---|"]
        pa, pb = ours.get("preemption") or {}, theirs.get("preemption") or {}
        for k, title in PHASE_TITLES.items():
            lines.append(f"| {title} | {_cell(pa.get(k), 2)} | {_cell(pb.get(k), 2)} |")
        lines.append(
            f"| nodes the gang landed on | {_cell(pa.get('gang_nodes'), 0)} | {_cell(pb.get('gang_nodes'), 0)} |"
        )
        lines.append(f"| {them} / kai-ray (all bound) | {_ratio(pa.get('seconds'), pb.get('seconds'))} | |")
    lines += ["", f"| ceiling and cost | kai-ray rounds | {them} rounds |", "|---|---|---|"]
    for k, title in (
        ("raw_sequential", "raw bindings/s, 1 at a time"),
        ("raw_concurrent", "raw bindings/s, concurrent"),
    ):
        lines.append(f"| {title} | {_cell(ours.get(k), 0)} | {_cell(theirs.get(k), 0)} |")
    for key in keys:
        a, b = ours.get(key) or {}, theirs.get(key) or {}
        for k, title in (
            ("ratio_to_raw_concurrent", "fill / raw concurrent"),
            ("binding_ratio_to_raw_concurrent", "first-to-last binding rate / raw concurrent"),
            ("first_bound_s", "first pod bound after the start, s"),
        ):
            lines.append(f"| {key}: {title} | {_cell(a.get(k), 2)} | {_cell(b.get(k), 2)} |")
        lines.append(
            f"| {key}: apiserver writes per pod | {a.get('writes_per_pod', '-')} | {b.get('writes_per_pod', '-')} |"
        )
    rss_a, rss_b = ours.get("peak_rss_mib") or {}, theirs.get("peak_rss_mib") or {}
    for k in sorted({*rss_a, *rss_b}):
        lines.append(f"| peak RSS MiB, {k} | {rss_a.get(k, '-')} | {rss_b.get(k, '-')} |")
    lines.append(
        f"| 1-min load average (start/end of rounds) | {_cell(ours.get('load_1m'))} | {_cell(theirs.get('load_1m'))} |"
    )
    return "\n".join(lines) + "\n"

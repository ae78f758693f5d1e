"""``kai-ray bench e2e``: pods per second through the real operators, against the raw Binding API rate.

It starts the test control plane (kube-apiserver + etcd + KWOK on loopback), creates KWOK GPU nodes, and then:

1. **raw**: the same raw-JSON client binds pods to nodes in a tight loop - one request at a time, then with as many
   concurrent requests as the binder uses (``raw_concurrent``, the ceiling). No scheduling, no grouping: the physical
   limit of this server on this machine.
2. **grouping**: the podgrouper runs as its own process (``kai-ray operator podgrouper``, as the Helm chart runs it)
   while the benchmark creates single-GPU pods, ``workers`` requests at a time; timed until every pod has its
   PodGroup. The scheduler is not running yet, so the creating client cannot pace the binding phase.
3. **fill**: once the API server is quiet, ``kai-ray operator scheduler`` is started on the pre-created pods, as the
   pre-created figures of ``bench vs-kai`` are taken: the fill is timed from the process start to the last pod
   bound, the *binding phase* from the first pod bound to the last; its rate over the raw concurrent rate is the
   figure that must hold as the cluster grows.
4. **preemption**: on the full cluster, one whole-node ``inference`` pod at a time, timed from its creation (through
   the podgrouper) to bound, with its victims evicted.

Every pod's times come from one watch of the benchmark's pods. Afterwards it checks that no node holds more GPUs
than it has, and reports the peak RSS of every process, the API writes per pod during the fill and until the API
server is quiet again (the writes the scheduler defers until its bindings are sent), and the scheduler's cycles over
the fill: how many, their p50/p99 length, and the share of the fill its loop spent in each phase.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kai_ray.bench.tracking import BENCH_LABEL, PodTimes, Tracker, apiserver_requests, peak_rss, quiesce, retry
from kai_ray.k8s.base.rest import ApiError, Kube, podgroups_path, pods_path, queues_path

SCHEDULER = "kai-scheduler"


@dataclass
class E2EConfig:
    nodes: int = 500
    pods: int = 4000
    gpus_per_node: int = 8
    raw_pods: int = 1000
    workers: int = 32  # concurrent creations in the benchmark and bindings in the scheduler
    timeout: float = 900.0
    preemption_trials: int = 3
    settle_timeout: float = 300.0  # at most this long after the fill for the API server to be quiet
    keep_workdir: bool = False


@dataclass
class E2EResult:
    nodes: int
    gpus_per_node: int
    pods: int
    bound: int
    raw_bindings_per_second: float
    raw_concurrent_bindings_per_second: float
    raw_concurrent_after_per_second: float  # measured again at the end: the machine's load may have changed
    created_seconds: float  # every pod created (the podgrouper running, the scheduler not yet)
    grouped_seconds: float  # from the first creation until every pod had its PodGroup
    fill_seconds: float  # scheduler process start -> last pod bound
    first_bound_seconds: float  # scheduler process start -> first pod bound
    binding_seconds: float  # first pod bound -> last pod bound
    pods_per_second: float  # over the fill
    binding_pods_per_second: float  # over the binding phase
    fill_ratio_to_raw_concurrent: float
    binding_ratio_to_raw_concurrent: float
    binding_ratio_to_raw_concurrent_after: float
    overcommitted_nodes: int
    raw_bindings: int
    preemption: list[dict[str, Any]] = field(default_factory=list)
    peak_rss_mib: dict[str, float] = field(default_factory=dict)
    scheduler: dict[str, float] = field(default_factory=dict)
    podgrouper: dict[str, float] = field(default_factory=dict)
    control_plane: dict[str, Any] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)
    cpu_seconds: dict[str, float] = field(default_factory=dict)  # per process, during the fill
    apiserver_writes_per_pod: dict[str, float] = field(default_factory=dict)  # during the fill, the bench's aside
    settle_seconds: float = 0.0  # after the last pod bound, until the API server was quiet (deferred writes done)
    apiserver_writes_per_pod_settled: dict[str, float] = field(default_factory=dict)  # from the start until quiet
    cycles: dict[str, float] = field(default_factory=dict)  # the scheduler's cycles over the fill (cycle_stats)
    timed_out: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)


def _pod(name: str, scheduler: str, gpus: int = 1, priority: str | None = None) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench", BENCH_LABEL: "e2e"}},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/bench:0",
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                        "limits": {"nvidia.com/gpu": str(gpus)},
                    },
                }
            ],
        },
    }
    if priority:
        pod["spec"]["priorityClassName"] = priority
    return pod


def ensure(kube: Kube, path: str, body: dict[str, Any]) -> None:
    try:
        kube.create(path, body)
    except ApiError as exc:
        if not exc.conflict:
            raise


def _transient(exc: ApiError) -> bool:
    """No answer (a timeout under load, a dropped connection), or the API server asking us to come back."""
    return exc.status in (0, 429, 500, 503, 504)


def _create_pod(
    kube: Kube, ns: str, name: str, scheduler: str, tries: int = 5, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Create one pod, retrying what load makes transient; a retry that finds the pod (the earlier try went through
    after all) takes it."""
    for attempt in range(tries):
        try:
            created: dict[str, Any] = kube.create(pods_path(ns), body or _pod(name, scheduler))
            return created
        except ApiError as exc:
            if exc.conflict and attempt > 0:
                existing: dict[str, Any] = kube.get(pods_path(ns, name))
                return existing
            if not _transient(exc) or attempt == tries - 1:
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def install_defaults(kube: Kube, priority_classes: dict[str, int]) -> None:
    """PriorityClasses and KAI's default queues (``default-parent-queue`` / ``default-queue``), unlimited quota."""
    for name, value in priority_classes.items():
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        ensure(kube, "/apis/scheduling.k8s.io/v1/priorityclasses", body)
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    res = {"gpu": unlimited, "cpu": unlimited, "memory": unlimited}
    for name, parent in (("default-parent-queue", None), ("default-queue", "default-parent-queue")):
        spec: dict[str, Any] = {"resources": res, **({"parentQueue": parent} if parent else {})}
        ensure(
            kube,
            queues_path(),
            {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec},
        )


def _create_pods(kube: Kube, ns: str, names: list[str], scheduler: str, workers: int) -> list[dict[str, Any]]:
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda n: _create_pod(kube, ns, n, scheduler), names))


def _delete_all_pods(kube: Kube, ns: str, timeout: float = 900.0) -> None:
    """Delete every pod of ``ns`` and wait until they are gone. A collection DELETE of thousands of pods can outlast
    the request timeout under load while the API server goes on deleting: not an error, we wait and ask again.
    Pods still there at the deadline are an error: the raw-rate pods hold GPUs, and a fill that cannot place its
    last pods would only time out much later, without its preemption trials."""
    deadline = time.monotonic() + timeout
    while True:
        if time.monotonic() >= deadline:
            raise TimeoutError(f"pods of namespace {ns} still there {timeout:.0f}s after deleting them")
        try:
            kube.request("DELETE", pods_path(ns), query={"gracePeriodSeconds": 0}, timeout=120.0)
        except ApiError as exc:
            if not _transient(exc):
                raise
        try:
            if not kube.get(pods_path(ns), limit=1).get("items"):
                return
        except ApiError as exc:
            if not _transient(exc):
                raise
        time.sleep(1.0)


def _metrics(port: int) -> dict[str, float]:
    """The kai_ray_* samples of an operator's /metrics (counters and gauges only)."""
    out: dict[str, float] = {}
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return out
    for line in text.splitlines():
        if line.startswith("kai_ray_") and not line.startswith("#") and "_bucket" not in line:
            name, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                out[name] = float(value)
    return out


def _histograms(port: int, name: str) -> dict[str, list[tuple[float, float]]]:
    """The cumulative buckets ``(le, count)`` of one histogram family of an operator's /metrics, ``+Inf`` last, by
    its labels other than ``le`` (as written, ``""`` when it has none)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    out: dict[str, list[tuple[float, float]]] = {}
    for line in text.splitlines():
        if line.startswith(f"{name}_bucket{{"):
            labels = line[line.index("{") + 1 : line.rindex("}")]
            le = labels[labels.index('le="') + 4 :].split('"', 1)[0]
            rest = ",".join(part for part in labels.split(",") if not part.startswith("le="))
            out.setdefault(rest, []).append((float(le), float(line.rpartition(" ")[2])))
    return {k: sorted(v) for k, v in out.items()}


def quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """The ``q`` quantile of a histogram, interpolated inside its bucket as Prometheus' histogram_quantile does;
    None without observations, the largest finite bound when it falls in ``+Inf``."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if le == float("inf"):
                return lower
            return lower + (le - lower) * ((rank - below) / (count - below) if count > below else 1.0)
        lower, below = le, count
    return lower


PHASES = ("snapshot", "core", "dispatch", "report")


def cycle_stats(
    before: dict[str, float],
    after: dict[str, float],
    buckets: list[tuple[float, float]],
    span: float,
    phases: dict[str, list[tuple[float, float]]] | None = None,
) -> dict[str, float]:
    """The scheduler's cycles between two /metrics reads: count, p50/p99 of their length (from the histogram,
    which starts with the process), seconds per phase and each phase's share of ``span`` (the loop's share), and
    p50/p99 per phase where the scheduler exports ``kai_ray_scheduler_phase_duration_seconds``."""
    out: dict[str, float] = {}
    for labels, phase_buckets in sorted((phases or {}).items()):
        phase = labels.partition('phase="')[2].rstrip('"')
        for q in (0.5, 0.99):
            v = quantile(phase_buckets, q)
            if phase and v is not None:
                out[f"{phase}_p{round(q * 100)}_seconds"] = round(v, 4)

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    cycles = delta("kai_ray_scheduler_cycles_total")
    out["cycles"] = cycles
    for q in (0.5, 0.99):
        v = quantile(buckets, q)
        if v is not None:
            out[f"p{round(q * 100)}_seconds"] = round(v, 4)
    busy = 0.0
    for phase in PHASES:
        took = delta(f'kai_ray_scheduler_phase_seconds_total{{phase="{phase}"}}')
        busy += took
        out[f"{phase}_seconds"] = round(took, 2)
        out[f"{phase}_share"] = round(took / span, 3) if span > 0 else 0.0
    out["loop_share"] = round(busy / span, 3) if span > 0 else 0.0
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (and its waited-for children), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / ticks


def _wait_http(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200 and b'"leader": true' in resp.read():
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not report a leader in {timeout:.0f}s")


class Operators:
    """The operators as subprocesses (``kai-ray operator ...``), started one at a time; stopped on exit."""

    def __init__(self, kubeconfig: Path, workers: int, log_dir: Path) -> None:
        self.kubeconfig, self.workers, self.log_dir = kubeconfig, workers, log_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.ports: dict[str, int] = {}
        self.started: dict[str, float] = {}  # epoch seconds

    def start(self, kind: str, wait: bool = True) -> None:
        from kai_ray.testing.controlplane.harness import free_port
        from kai_ray.testing.testbed import operator_command

        metrics, health = free_port(), free_port()
        self.ports[kind] = metrics
        log = open(self.log_dir / f"{kind}.log", "wb")  # noqa: SIM115 - closed with the process
        cmd = operator_command(
            kind,
            self.kubeconfig,
            health,
            "--no-leader-elect",
            "--metrics-port",
            str(metrics),
            "--bind-workers",
            str(self.workers),
            "--log-level",
            "WARNING",
        )
        self.started[kind] = time.time()
        self.procs[kind] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        if wait:
            _wait_http(f"http://127.0.0.1:{health}/healthz", 300)

    def pids(self) -> dict[str, int]:
        return {k: p.pid for k, p in self.procs.items()}

    def __enter__(self) -> Operators:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        for p in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=5)
        self.procs.clear()


def raw_binding_rate(
    kube: Kube, nodes: list[str], n: int, workers: int, sequential: bool = True
) -> tuple[float, float]:
    """(sequential, concurrent) bindings per second of this client on pods nobody schedules (sequential 0.0 when
    not asked for)."""
    ns = "bench-raw"
    ensure(kube, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    created = _create_pods(kube, ns, [f"raw-{i}" for i in range((2 if sequential else 1) * n)], "nobody", workers)
    targets = [(p["metadata"]["name"], p["metadata"]["uid"], nodes[i % len(nodes)]) for i, p in enumerate(created)]
    seq, par = (targets[:n], targets[n:]) if sequential else ([], targets)
    rate = 0.0
    if seq:
        t0 = time.perf_counter()
        for name, uid, node in seq:
            kube.bind(ns, name, uid, node)
        rate = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda t: kube.bind(ns, *t), par))
    concurrent = n / (time.perf_counter() - t0)
    _delete_all_pods(kube, ns)
    return rate, concurrent


def _count(kube: Kube, path: str, **query: Any) -> int:
    """How many objects a list would return, from one item and ``remainingItemCount`` (no full list)."""
    page = kube.get(path, limit=1, **query)
    meta = page.get("metadata") or {}
    n = len(page.get("items") or [])
    if meta.get("continue") and meta.get("remainingItemCount") is None:
        return len(list_all(kube, path, **query))
    return n + int(meta.get("remainingItemCount") or 0)


def list_all(kube: Kube, path: str, **query: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cont = None
    while True:
        page = kube.get(path, limit=500, **{"continue": cont}, **query)
        items.extend(page.get("items") or [])
        cont = (page.get("metadata") or {}).get("continue")
        if not cont:
            return items


def _wait_grouped(kube: Kube, ns: str, pods: int, timeout: float) -> None:
    """Until ``ns`` holds a PodGroup for every pod (counted from one item and ``remainingItemCount``, every 0.5 s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if _count(kube, podgroups_path(ns)) >= pods:
                return
        except ApiError as exc:
            if not _transient(exc):
                raise
        time.sleep(0.5)
    raise TimeoutError(f"the podgrouper did not group {pods} pods in {timeout:.0f}s")


def _overcommitted(times: dict[str, PodTimes], gpus: dict[str, int], gpus_per_node: int) -> int:
    """Nodes holding more GPUs than they have, among the pods bound and not gone."""
    use: dict[str, int] = {}
    for name, t in times.items():
        if t.node and t.gone is None:
            use[t.node] = use.get(t.node, 0) + gpus.get(name, 1)
    return sum(1 for v in use.values() if v > gpus_per_node)


BENCH_WRITES = ("POST pods", "DELETE pods")  # the benchmark's own creations and clean-ups


def _writes(before: dict[str, float], after: dict[str, float], pods: int) -> dict[str, float]:
    """API writes per pod, by verb and resource, without the benchmark's own (KWOK's are included)."""
    out = {}
    for k, v in after.items():
        d = v - before.get(k, 0.0)
        if d < max(1.0, pods / 100) or k in BENCH_WRITES or k.split(" ", 1)[0] not in ("POST", "PUT", "PATCH"):
            continue
        out[k] = round(d / pods, 3)
    return out


CYCLES = "kai_ray_scheduler_cycles_total"
CYCLE_SECONDS = "kai_ray_scheduler_cycle_duration_seconds_sum"
RELEASE_BINDS = "kai_ray_release_binds_total"
CYCLE_PHASES = ("snapshot", "session_open", "actions", "dispatch", "report")  # the phase histogram's


def _phase(name: str) -> str:
    return f'kai_ray_scheduler_phase_duration_seconds_sum{{phase="{name}"}}'


def _preempt(
    kube: Kube, tracker: Tracker, ns: str, trial: int, gpus: int, timeout: float, port: int, pid: int
) -> dict[str, Any]:
    """One whole-node ``inference`` pod on the full cluster, once the API server is quiet; timed from its creation
    to bound, through the podgrouper (its PodGroup) and the scheduler (the eviction of a node's pods, the binding).
    The scheduler's metrics say how many cycles ran meanwhile, for how long in all and in each phase, and whether
    the pod was bound as its victims left (bind on release) rather than by a cycle; its CPU time over the same span
    says how much of that wall time the process actually ran.

    Quiet means the fill's deferred PodGroup status writes are done; at thousands of nodes they take minutes (the
    writer pool yields to bindings), so the wait is capped at 90 s and the trial may run while they go on."""
    settled = quiesce(kube, most=90.0)
    m0 = _metrics(port)
    cpu0 = cpu_seconds(pid)
    name = f"inference-{trial}"
    before = {k for k, t in tracker.of(ns).items() if t.gone is None and t.terminating is None}
    t0 = time.time()
    _create_pod(kube, ns, name, SCHEDULER, body=_pod(name, SCHEDULER, gpus=gpus, priority="inference"))
    key = f"{ns}/{name}"
    tracker.wait(
        f"inference pod {name} bound", lambda: (t := tracker.pods.get(key)) is not None and t.bound is not None, timeout
    )
    m1 = _metrics(port)
    cpu = cpu_seconds(pid) - cpu0
    names = (CYCLES, CYCLE_SECONDS, RELEASE_BINDS, *map(_phase, CYCLE_PHASES))
    delta = {k: m1.get(k, 0.0) - m0.get(k, 0.0) for k in names}
    times = tracker.of(ns)
    victims = [t for k, t in times.items() if k in before and (t.terminating or t.gone or 0) >= t0]
    evicted = sorted(min(x for x in (t.terminating, t.gone) if x is not None) for t in victims)
    gone = sorted(t.gone for t in victims if t.gone is not None)
    rel = lambda x: None if x is None else round(x - t0, 3)  # noqa: E731
    return {
        "trial": trial,
        "quiesced_s": round(settled, 1),
        "seconds": rel(times[name].bound),
        "first_eviction_seen_s": rel(evicted[0] if evicted else None),
        "last_victim_gone_s": rel(gone[-1] if gone else None),
        "victims": len(victims),
        "cycles": int(delta[CYCLES]),
        "cycle_seconds": round(delta[CYCLE_SECONDS], 3),
        "phase_seconds": {name: round(delta[_phase(name)], 3) for name in CYCLE_PHASES},
        "scheduler_cpu_seconds": round(cpu, 2),
        "bound_on_release": delta[RELEASE_BINDS] > 0,
    }


def _rss_mib(pids: dict[str, int]) -> dict[str, float]:
    return {n: round(peak_rss(pid) / 2**20, 1) for n, pid in pids.items()}


def run_e2e(cfg: E2EConfig, progress: Any = None) -> E2EResult:
    from kai_ray.testing.controlplane.harness import ControlPlane

    say = progress or (lambda msg: None)
    load_start = round(os.getloadavg()[0], 2)
    plane = ControlPlane(keep_workdir=cfg.keep_workdir)
    with plane:
        say(f"control plane up in {plane.timings.total:.1f}s; installing CRDs")
        plane.install_crds(kuberay=False)
        kube = Kube(plane.api_client(pool_size=cfg.workers + 8))
        install_defaults(kube, {"train": 50, "inference": 125})
        say(f"creating {cfg.nodes} KWOK nodes x {cfg.gpus_per_node} GPUs")
        t = time.monotonic()
        nodes = plane.create_gpu_nodes(
            cfg.nodes, gpus=cfg.gpus_per_node, prefix="bench", timeout=max(300.0, cfg.nodes * 0.2)
        )
        say(f"nodes ready in {time.monotonic() - t:.1f}s; raw binding rate on {cfg.raw_pods} + {cfg.raw_pods} pods")
        raw_seq, raw_par = raw_binding_rate(kube, nodes, cfg.raw_pods, cfg.workers)
        say(f"raw: {raw_seq:.0f}/s sequential, {raw_par:.0f}/s with {cfg.workers} concurrent; starting the podgrouper")
        assert plane.workdir is not None
        ns = "bench-e2e"
        ensure(kube, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        with (
            Tracker(kube, f"{BENCH_LABEL}=e2e") as tracker,
            Operators(plane.kubeconfig_path, cfg.workers, plane.workdir / "logs") as ops,
        ):
            ops.start("podgrouper")
            t_c = time.time()
            _create_pods(kube, ns, [f"p-{i}" for i in range(cfg.pods)], SCHEDULER, cfg.workers)
            created = time.time() - t_c
            say(f"{cfg.pods} pods created in {created:.1f}s; waiting for their PodGroups")
            _wait_grouped(kube, ns, cfg.pods, cfg.timeout)
            grouped = time.time() - t_c
            settled = quiesce(kube)
            say(f"grouped after {grouped:.1f}s, quiet {settled:.0f}s later; starting the scheduler")
            pids = {**ops.pids(), **{n: c.popen.pid for n, c in plane.components.items()}}
            cpu0 = {n: cpu_seconds(pid) for n, pid in pids.items()}
            req0 = retry(lambda: apiserver_requests(kube))
            ops.start("scheduler", wait=False)
            t0 = ops.started["scheduler"]
            pids["scheduler"] = ops.procs["scheduler"].pid
            cpu0["scheduler"] = 0.0
            finished = True
            try:
                tracker.wait_bound(ns, cfg.pods, cfg.timeout)
            except TimeoutError:
                finished = False
            cpu = {n: round(cpu_seconds(pid) - cpu0.get(n, 0.0), 2) for n, pid in pids.items()}
            req1 = retry(lambda: apiserver_requests(kube))
            port = ops.ports["scheduler"]
            sched_fill = _metrics(port)
            buckets = _histograms(port, "kai_ray_scheduler_cycle_duration_seconds").get("", [])
            phases = _histograms(port, "kai_ray_scheduler_phase_duration_seconds")
            settle = quiesce(kube, most=cfg.settle_timeout) if finished else 0.0
            req2 = retry(lambda: apiserver_requests(kube))
            say(f"the API server was quiet {settle:.0f}s after the fill (the scheduler's deferred writes)")
            times = tracker.of(ns)
            bound_at = sorted(t.bound for t in times.values() if t.bound is not None)
            last = bound_at[-1] if bound_at else time.time()
            first = bound_at[0] if bound_at else last
            say(f"{len(bound_at)} bound {last - t0:.1f}s after the scheduler's start (first at {first - t0:.1f}s)")
            trials = []
            for trial in range(cfg.preemption_trials if finished else 0):
                trials.append(
                    _preempt(kube, tracker, ns, trial, cfg.gpus_per_node, cfg.timeout, port, pids["scheduler"])
                )
                say(f"preemption {trial}: bound {trials[-1]['seconds']}s after its creation")
            gpus = {f"inference-{i}": cfg.gpus_per_node for i in range(cfg.preemption_trials)}
            over = _overcommitted(tracker.of(ns), gpus, cfg.gpus_per_node)
            sched = _metrics(ops.ports["scheduler"])
            grouper = _metrics(ops.ports["podgrouper"])
            rss = _rss_mib(pids)
            rss["bench"] = round(peak_rss(os.getpid()) / 2**20, 1)
            ops.stop()
        _, raw_after = raw_binding_rate(kube, nodes, cfg.raw_pods, cfg.workers, sequential=False)
        say(f"raw again at the end: {raw_after:.0f}/s with {cfg.workers} concurrent")
        fill = last - t0
        span = max(last - first, 1e-3)
        pps = len(bound_at) / fill if fill > 0 else 0.0
        bps = len(bound_at) / span
        return E2EResult(
            nodes=cfg.nodes,
            gpus_per_node=cfg.gpus_per_node,
            pods=cfg.pods,
            bound=len(bound_at),
            raw_bindings_per_second=round(raw_seq, 1),
            raw_concurrent_bindings_per_second=round(raw_par, 1),
            raw_concurrent_after_per_second=round(raw_after, 1),
            created_seconds=round(created, 2),
            grouped_seconds=round(grouped, 2),
            fill_seconds=round(fill, 2),
            first_bound_seconds=round(first - t0, 2),
            binding_seconds=round(span, 2),
            pods_per_second=round(pps, 1),
            binding_pods_per_second=round(bps, 1),
            fill_ratio_to_raw_concurrent=round(pps / raw_par, 3) if raw_par else 0.0,
            binding_ratio_to_raw_concurrent=round(bps / raw_par, 3) if raw_par else 0.0,
            binding_ratio_to_raw_concurrent_after=round(bps / raw_after, 3) if raw_after else 0.0,
            overcommitted_nodes=over,
            raw_bindings=cfg.raw_pods,
            preemption=trials,
            peak_rss_mib=rss,
            scheduler=sched,
            podgrouper=grouper,
            control_plane=plane.timings.as_dict(),
            machine={
                "cpus": os.cpu_count(),
                "loadavg_1m_start": load_start,
                "loadavg_1m_end": round(os.getloadavg()[0], 2),
            },
            cpu_seconds=cpu,
            apiserver_writes_per_pod=_writes(req0, req1, cfg.pods),
            settle_seconds=round(settle, 1),
            apiserver_writes_per_pod_settled=_writes(req0, req2, cfg.pods),
            cycles=cycle_stats({}, sched_fill, buckets, fill, phases),
            timed_out=not finished,
        )

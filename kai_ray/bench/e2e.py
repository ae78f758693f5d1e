"""``kai-ray bench e2e``: pods per second through the real operators, against the raw Binding API rate.

It starts the test control plane (kube-apiserver + etcd + KWOK on loopback), creates KWOK GPU nodes, and then:

1. **raw**: the same raw-JSON client binds pods to nodes in a tight loop - one request at a time (``raw``, the
   figure the target is measured against), then with as many concurrent requests as the binder uses
   (``raw_concurrent``). No scheduling, no grouping: the physical limit of this machine.
2. **e2e**: the two operators run as separate processes exactly as the Helm chart runs them (``kai-ray operator
   podgrouper|scheduler``); the benchmark creates single-GPU pods and times creation-to-all-bound. Every pod goes the
   whole way: the podgrouper writes its PodGroup and stamps it, the scheduler runs the core and binds it, and KWOK
   marks it Running, all on the same two cores.

Afterwards it checks that no node holds more GPUs than it has.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

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
    keep_workdir: bool = False


@dataclass
class E2EResult:
    nodes: int
    gpus_per_node: int
    pods: int
    pods_per_second: float
    raw_bindings_per_second: float
    raw_concurrent_bindings_per_second: float
    ratio_to_raw: float
    ratio_to_raw_concurrent: float
    target_met: bool
    seconds: float
    all_created_seconds: float
    all_grouped_seconds: float
    bound: int
    overcommitted_nodes: int
    raw_bindings: int
    scheduler: dict[str, float] = field(default_factory=dict)
    podgrouper: dict[str, float] = field(default_factory=dict)
    control_plane: dict[str, Any] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)
    cpu_seconds: dict[str, float] = field(default_factory=dict)  # per process, during the e2e run
    apiserver_requests_per_pod: dict[str, float] = field(default_factory=dict)  # during the e2e run
    timed_out: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)


def _pod(name: str, scheduler: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench"}},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/bench:0",
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }


def ensure(kube: Kube, path: str, body: dict[str, Any]) -> None:
    try:
        kube.create(path, body)
    except ApiError as exc:
        if not exc.conflict:
            raise


def _transient(exc: ApiError) -> bool:
    """No answer (a timeout under load, a dropped connection), or the API server asking us to come back."""
    return exc.status in (0, 429, 500, 503, 504)


def _create_pod(kube: Kube, ns: str, name: str, scheduler: str, tries: int = 5) -> dict[str, Any]:
    """Create one pod, retrying what load makes transient; a retry that finds the pod (the earlier try went through
    after all) takes it."""
    for attempt in range(tries):
        try:
            created: dict[str, Any] = kube.create(pods_path(ns), _pod(name, scheduler))
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


def _delete_all_pods(kube: Kube, ns: str, timeout: float = 180.0) -> None:
    """Delete every pod of ``ns`` and wait until they are gone. A collection DELETE of thousands of pods can outlast
    the request timeout under load while the API server goes on deleting: not an error, we wait and ask again."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
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


def apiserver_requests(kube: Kube) -> dict[str, float]:
    """``apiserver_request_total`` summed by verb/resource[/subresource] (watch requests left out)."""
    resp = kube.pool.request("GET", kube.url("/metrics"), headers=kube._headers(None), retries=False)
    out: dict[str, float] = {}
    for line in resp.data.decode().splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(part.split("=", 1) for part in line[line.index("{") + 1 : line.rindex("}")].split(","))
        labels = {k: v.strip('"') for k, v in labels.items()}
        if labels.get("verb") in ("WATCH", "CONNECT"):
            continue
        key = f"{labels.get('verb')} {labels.get('resource')}" + (
            f"/{labels['subresource']}" if labels.get("subresource") else ""
        )
        out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
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


@contextlib.contextmanager
def operators(kubeconfig: Path, workers: int, log_dir: Path) -> Iterator[dict[str, Any]]:
    """Both operators as subprocesses (``kai-ray operator ...``); yields their metrics ports and pids."""
    from kai_ray.testing.controlplane.harness import free_port
    from kai_ray.testing.testbed import operator_command

    procs: list[subprocess.Popen[bytes]] = []
    ports: dict[str, Any] = {"pids": {}}
    try:
        for kind in ("podgrouper", "scheduler"):
            metrics, health = free_port(), free_port()
            ports[kind] = metrics
            log = open(log_dir / f"{kind}.log", "wb")  # noqa: SIM115 - closed with the process
            cmd = operator_command(
                kind,
                kubeconfig,
                health,
                "--no-leader-elect",
                "--metrics-port",
                str(metrics),
                "--bind-workers",
                str(workers),
                "--log-level",
                "WARNING",
            )
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            ports["pids"][kind] = procs[-1].pid
            _wait_http(f"http://127.0.0.1:{health}/healthz", 120)
        yield ports
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=5)


def raw_binding_rate(kube: Kube, nodes: list[str], n: int, workers: int) -> tuple[float, float]:
    """(sequential, concurrent) bindings per second of this client on pods nobody schedules."""
    ns = "bench-raw"
    ensure(kube, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    created = _create_pods(kube, ns, [f"raw-{i}" for i in range(2 * n)], "nobody", workers)
    targets = [(p["metadata"]["name"], p["metadata"]["uid"], nodes[i % len(nodes)]) for i, p in enumerate(created)]
    seq, par = targets[:n], targets[n:]
    t0 = time.perf_counter()
    for name, uid, node in seq:
        kube.bind(ns, name, uid, node)
    sequential = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda t: kube.bind(ns, *t), par))
    concurrent = n / (time.perf_counter() - t0)
    _delete_all_pods(kube, ns)
    return sequential, concurrent


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


def _poll_progress(kube: Kube, ns: str, pods: int, out: dict[str, float], stop: threading.Event) -> None:
    """Every 50 ms: when every pod has a PodGroup ("grouped") and when none is left unbound ("bound").

    Polling two counts instead of watching every pod keeps the benchmark's own cost off the machine it measures.
    """
    while not stop.is_set():
        now = time.perf_counter()
        try:
            if "grouped" not in out and _count(kube, podgroups_path(ns)) >= pods:
                out["grouped"] = now
            if _count(kube, pods_path(ns)) >= pods and _count(kube, pods_path(ns), fieldSelector="spec.nodeName=") == 0:
                out["bound"] = now
                out.setdefault("grouped", now)
                return
        except ApiError as exc:
            if not _transient(exc):
                raise
        stop.wait(0.05)


def run_e2e(cfg: E2EConfig, progress: Any = None) -> E2EResult:
    from kai_ray.testing.controlplane.harness import ControlPlane

    say = progress or (lambda msg: None)
    plane = ControlPlane(keep_workdir=cfg.keep_workdir)
    with plane:
        say(f"control plane up in {plane.timings.total:.1f}s; installing CRDs")
        plane.install_crds(kuberay=False)
        kube = Kube(plane.api_client(pool_size=cfg.workers + 8))
        install_defaults(kube, {"train": 50})
        say(f"creating {cfg.nodes} KWOK nodes x {cfg.gpus_per_node} GPUs")
        t = time.monotonic()
        nodes = plane.create_gpu_nodes(cfg.nodes, gpus=cfg.gpus_per_node, prefix="bench", timeout=300)
        say(f"nodes ready in {time.monotonic() - t:.1f}s; raw binding rate on {cfg.raw_pods} + {cfg.raw_pods} pods")
        raw_seq, raw_par = raw_binding_rate(kube, nodes, cfg.raw_pods, cfg.workers)
        say(f"raw: {raw_seq:.0f}/s sequential, {raw_par:.0f}/s with {cfg.workers} concurrent; starting operators")
        assert plane.workdir is not None
        with operators(plane.kubeconfig_path, cfg.workers, plane.workdir / "logs") as ports:
            ns = "bench-e2e"
            ensure(kube, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
            pids = {**ports["pids"], **{n: c.popen.pid for n, c in plane.components.items()}}
            cpu0 = {n: cpu_seconds(pid) for n, pid in pids.items()}
            cpu0["bench"] = time.process_time()
            req0 = apiserver_requests(kube)
            progress_log: dict[str, float] = {}
            stop = threading.Event()
            poller = threading.Thread(
                target=_poll_progress, args=(kube, ns, cfg.pods, progress_log, stop), name="bench-poll", daemon=True
            )
            t0 = time.perf_counter()
            progress_log["t0"] = t0
            poller.start()
            _create_pods(kube, ns, [f"p-{i}" for i in range(cfg.pods)], SCHEDULER, cfg.workers)
            t_created = time.perf_counter() - t0
            say(f"all created in {t_created:.1f}s; waiting for bindings")
            poller.join(cfg.timeout)
            stop.set()
            finished = "bound" in progress_log
            elapsed = progress_log.get("bound", time.perf_counter()) - t0
            cpu = {n: round(cpu_seconds(pid) - cpu0[n], 2) for n, pid in pids.items()}
            cpu["bench"] = round(time.process_time() - cpu0["bench"], 2)
            req1 = apiserver_requests(kube)
            requests = {k: v - req0.get(k, 0.0) for k, v in sorted(req1.items()) if v - req0.get(k, 0.0) > 0}
            t_grouped = progress_log.get("grouped", float("nan")) - t0
            sched = _metrics(ports["scheduler"])
            grouper = _metrics(ports["podgrouper"])
            bound = {
                p["metadata"]["name"]: p["spec"]["nodeName"]
                for p in list_all(kube, pods_path(ns))
                if p["spec"].get("nodeName")
            }
        use: dict[str, int] = {}
        for node in bound.values():
            use[node] = use.get(node, 0) + 1
        over = sum(1 for v in use.values() if v > cfg.gpus_per_node)
        pps = len(bound) / elapsed if elapsed > 0 else 0.0
        return E2EResult(
            nodes=cfg.nodes,
            gpus_per_node=cfg.gpus_per_node,
            pods=cfg.pods,
            pods_per_second=round(pps, 1),
            raw_bindings_per_second=round(raw_seq, 1),
            raw_concurrent_bindings_per_second=round(raw_par, 1),
            ratio_to_raw=round(pps / raw_seq, 3) if raw_seq else 0.0,
            ratio_to_raw_concurrent=round(pps / raw_par, 3) if raw_par else 0.0,
            target_met=bool(finished and raw_seq and pps >= 0.5 * raw_seq),
            seconds=round(elapsed, 2),
            all_created_seconds=round(t_created, 2),
            all_grouped_seconds=round(t_grouped, 2),
            bound=len(bound),
            overcommitted_nodes=over,
            raw_bindings=cfg.raw_pods,
            scheduler=sched,
            podgrouper=grouper,
            control_plane=plane.timings.as_dict(),
            machine={"cpus": os.cpu_count(), "loadavg_1m_after": round(os.getloadavg()[0], 2)},
            cpu_seconds=cpu,
            apiserver_requests_per_pod={k: round(v / cfg.pods, 2) for k, v in requests.items() if v >= cfg.pods / 100},
            timed_out=not finished,
        )

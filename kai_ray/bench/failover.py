"""``kai-ray bench failover``: how long scheduling stops when the scheduler's leader goes, and after a cold start.

On the test control plane (kube-apiserver + etcd + KWOK) with ``nodes`` GPU nodes it runs the podgrouper and two
scheduler replicas as processes, exactly as the Helm chart runs them, fills the cluster with ``running`` single-GPU
pods, then keeps single-GPU pods arriving at ``rate`` per second and:

1. **SIGTERM** the leader (a rolling update): it stops, releases its Lease, the follower takes over;
2. starts a new follower, then **SIGKILL** the leader (a crash): the follower waits for the Lease to expire;
3. SIGTERM the last replica and starts a fresh process alone (**cold start**, the Lease free).

Each step is timed from the signal (or the process start) and from the moment the Lease changed hands (as the
benchmark's own Lease watch saw it) to the first pod the new leader binds (as its pod watch saw it). The cold start
is also split by what the process reports on its liveness probe: start-up until built (interpreter, imports, the
runtime), until every informer had listed, and its first cycle. Afterwards: no pod was ever refused a second
binding by the API server (409 on ``pods/binding``) and no node holds more GPUs than it has.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kai_ray.bench.e2e import (
    SCHEDULER,
    _count,
    _create_pod,
    _create_pods,
    ensure,
    install_defaults,
    list_all,
)
from kai_ray.k8s.base.rest import ApiError, Kube, iter_json_lines, pods_path

LEASE_NS = "kai-ray-bench"
LEASE = "kai-ray-scheduler"


@dataclass
class FailoverConfig:
    nodes: int = 500
    gpus_per_node: int = 16
    running: int = 4000
    rate: float = 20.0  # new single-GPU pods per second while the leader changes
    lease_duration: float = 15.0  # the chart's defaults (client-go's, KAI's)
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    workers: int = 32
    keep_workdir: bool = False


@dataclass
class FailoverResult:
    nodes: int
    gpus_per_node: int
    running: int
    arrival_rate: float
    lease: dict[str, float]
    first_bind_after_takeover_seconds: float | None
    first_bind_after_sigterm_seconds: float | None
    first_bind_after_sigkill_seconds: float | None
    first_bind_after_process_start_seconds: float | None
    takeover_after_sigterm_seconds: float | None
    takeover_after_sigkill_seconds: float | None
    first_bind_after_takeover: dict[str, float | None] = field(default_factory=dict)
    cold_start: dict[str, Any] = field(default_factory=dict)
    new_leaders: dict[str, Any] = field(default_factory=dict)  # each new leader's startup record (process clock)
    binding_conflicts: float = 0.0
    overcommitted_nodes: int = 0
    bound: int = 0
    goals: dict[str, bool] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)


class _Watch(threading.Thread):
    """Follows one collection and records when each pod was first seen bound, or each Lease holder took over."""

    def __init__(self, kube: Kube, path: str, query: dict[str, Any] | None = None) -> None:
        super().__init__(name=f"bench-watch-{path}", daemon=True)
        self.kube, self.path, self.query = kube, path, query or {}
        self.bound: dict[str, float] = {}
        self.holders: list[tuple[float, str]] = []
        self.stopped = threading.Event()
        self.ready = threading.Event()
        self._resp: Any = None

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                rv = (self.kube.get(self.path, limit=1).get("metadata") or {}).get("resourceVersion", "")
                query = {**self.query, "watch": "1", "resourceVersion": rv, "timeoutSeconds": 600}
                self._resp = self.kube.open_stream(self.path, query, timeout=630)
                self.ready.set()
                for event in iter_json_lines(self._resp):
                    self._record(event.get("object") or {}, time.monotonic())
            except Exception:
                self.stopped.wait(0.2)

    def _record(self, obj: dict[str, Any], now: float) -> None:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        if obj.get("kind") == "Lease":
            holder = spec.get("holderIdentity") or ""
            if not self.holders or self.holders[-1][1] != holder:
                self.holders.append((now, holder))
        elif spec.get("nodeName"):
            self.bound.setdefault(meta.get("name", ""), now)

    def took_over(self, identity: str, after: float) -> float | None:
        return next((t for t, h in self.holders if h == identity and t >= after), None)

    def first_bound(self, after: float) -> float | None:
        return min((t for t in self.bound.values() if t >= after), default=None)

    def stop(self) -> None:
        self.stopped.set()
        with contextlib.suppress(Exception):
            self._resp.shutdown()


class _Arrivals(threading.Thread):
    """Creates single-GPU pods at a steady rate until stopped."""

    def __init__(self, kube: Kube, ns: str, rate: float) -> None:
        super().__init__(name="bench-arrivals", daemon=True)
        self.kube, self.ns, self.period = kube, ns, 1.0 / rate
        self.created = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        next_at = time.monotonic()
        for i in itertools.count():
            if self.stopped.wait(max(0.0, next_at - time.monotonic())):
                return
            with contextlib.suppress(ApiError):
                _create_pod(self.kube, self.ns, f"a-{i}", SCHEDULER)
                self.created += 1
            next_at += self.period


def _health(port: int) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
            body: dict[str, Any] = json.loads(resp.read()).get("scheduler") or {}
            return body
    except (OSError, ValueError):
        return {}


def _until(what: str, check: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(f"{what} did not happen in {timeout:.0f}s")


class _Fleet:
    def __init__(self, kubeconfig: Path, cfg: FailoverConfig, log_dir: Path) -> None:
        self.kubeconfig, self.cfg, self.log_dir = kubeconfig, cfg, log_dir
        self.procs: dict[str, tuple[subprocess.Popen[bytes], int]] = {}

    def start(self, kind: str, identity: str, *extra: str) -> tuple[subprocess.Popen[bytes], int]:
        from kai_ray.testing.controlplane.harness import free_port
        from kai_ray.testing.testbed import operator_command

        health = free_port()
        cfg = self.cfg
        cmd = operator_command(
            kind,
            self.kubeconfig,
            health,
            "--identity",
            identity,
            "--lease-namespace",
            LEASE_NS,
            "--lease-duration",
            f"{cfg.lease_duration}s",
            "--renew-deadline",
            f"{cfg.renew_deadline}s",
            "--retry-period",
            f"{cfg.retry_period}s",
            "--metrics-port",
            "0",
            "--bind-workers",
            str(cfg.workers),
            "--log-level",
            "INFO",
            *extra,
        )
        out = open(self.log_dir / f"{identity}.log", "ab")  # noqa: SIM115 - owned by the process
        popen = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        self.procs[identity] = (popen, health)
        return popen, health

    def signal(self, identity: str, sig: signal.Signals) -> None:
        popen, _ = self.procs[identity]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, sig)

    def wait_gone(self, identity: str, timeout: float = 30.0) -> None:
        popen, _ = self.procs.pop(identity)
        try:
            popen.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGKILL)
            popen.wait(10)

    def stop_all(self) -> None:
        for identity in list(self.procs):
            self.signal(identity, signal.SIGTERM)
        for identity in list(self.procs):
            self.wait_gone(identity)


def _conflicts(kube: Kube) -> float:
    return apiserver_requests_by_code(kube).get("409", 0.0)


def apiserver_requests_by_code(kube: Kube) -> dict[str, float]:
    """``pods/binding`` requests the API server answered so far, by HTTP code."""
    resp = kube.pool.request("GET", kube.url("/metrics"), headers=kube._headers(None), retries=False)
    out: dict[str, float] = {}
    for line in resp.data.decode().splitlines():
        if line.startswith("apiserver_request_total{") and 'subresource="binding"' in line:
            code = line.split('code="', 1)[1].split('"', 1)[0]
            out[code] = out.get(code, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def _first_cycle(port: int) -> dict[str, Any] | None:
    startup = _health(port).get("startup") or {}
    return startup if startup.get("first_cycle") else None


def _seconds(t: float | None, since: float | None) -> float | None:
    return round(t - since, 3) if t is not None and since is not None else None


def run_failover(cfg: FailoverConfig, progress: Any = None) -> FailoverResult:
    from kai_ray.testing.controlplane.harness import ControlPlane

    say = progress or (lambda msg: None)
    plane = ControlPlane(keep_workdir=cfg.keep_workdir)
    with plane:
        plane.install_crds(kuberay=False)
        kube = Kube(plane.api_client(pool_size=cfg.workers + 8))
        install_defaults(kube, {"train": 50})
        for ns in (LEASE_NS, "running", "arrive"):
            ensure(kube, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        say(f"creating {cfg.nodes} KWOK nodes x {cfg.gpus_per_node} GPUs")
        plane.create_gpu_nodes(cfg.nodes, gpus=cfg.gpus_per_node, prefix="fo", timeout=300)
        assert plane.workdir is not None
        log_dir = plane.workdir / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        fleet = _Fleet(plane.kubeconfig_path, cfg, log_dir)
        pods = _Watch(kube, pods_path("arrive"))
        lease = _Watch(
            kube,
            f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases",
            {"fieldSelector": f"metadata.name={LEASE}"},
        )
        arrivals = _Arrivals(kube, "arrive", cfg.rate)
        try:
            return _run(cfg, kube, fleet, pods, lease, arrivals, say)
        finally:
            arrivals.stopped.set()
            pods.stop()
            lease.stop()
            fleet.stop_all()


def _run(
    cfg: FailoverConfig, kube: Kube, fleet: _Fleet, pods: _Watch, lease: _Watch, arrivals: _Arrivals, say: Any
) -> FailoverResult:
    fleet.start("podgrouper", "grouper", "--no-leader-elect")
    _, h1 = fleet.start("scheduler", "s1")
    _until("s1 leading", lambda: _health(h1).get("leader"), 180)
    _, h2 = fleet.start("scheduler", "s2")
    say(f"leader up; filling the cluster with {cfg.running} running pods")
    t = time.monotonic()
    _create_pods(kube, "running", [f"r-{i}" for i in range(cfg.running)], SCHEDULER, cfg.workers)
    _until(
        "the running pods bound",
        lambda: _count(kube, pods_path("running"), fieldSelector="spec.nodeName=") == 0,
        900,
    )
    say(f"{cfg.running} pods running after {time.monotonic() - t:.0f}s; {cfg.rate:g} pods/s arriving")
    _until("s2 synced", lambda: _health(h2).get("synced"), 120)
    conflicts0 = _conflicts(kube)
    pods.start()
    lease.start()
    _until("the benchmark's watches", lambda: pods.ready.is_set() and lease.ready.is_set(), 30)
    arrivals.start()
    _until("arrivals bound by s1", lambda: len(pods.bound) >= 2 * cfg.rate, 60)

    say("SIGTERM to the leader")
    t_term = time.monotonic()
    fleet.signal("s1", signal.SIGTERM)
    take1 = _until("s2 to take over", lambda: lease.took_over("s2", t_term), 3 * cfg.lease_duration + 30)
    bind1 = _until("a bind by s2", lambda: pods.first_bound(take1), 60)
    leader_startup = {"sigterm": _until("s2's first cycle", lambda: _first_cycle(h2), 60)}
    fleet.wait_gone("s1")

    _, h3 = fleet.start("scheduler", "s3")
    _until("s3 synced", lambda: _health(h3).get("synced"), 120)
    time.sleep(2.0)  # a few arrivals bound by s2 in steady state
    say("SIGKILL to the leader")
    t_kill = time.monotonic()
    fleet.signal("s2", signal.SIGKILL)
    take2 = _until("s3 to take over", lambda: lease.took_over("s3", t_kill), 3 * cfg.lease_duration + 30)
    bind2 = _until("a bind by s3", lambda: pods.first_bound(take2), 60)
    leader_startup["sigkill"] = _until("s3's first cycle", lambda: _first_cycle(h3), 60)
    fleet.wait_gone("s2")

    say("SIGTERM to the last replica; cold start of a new one")
    fleet.signal("s3", signal.SIGTERM)
    fleet.wait_gone("s3")
    _until("pods waiting", lambda: _count(kube, pods_path("arrive"), fieldSelector="spec.nodeName=") > 0, 30)
    t_start = time.monotonic()
    _, h4 = fleet.start("scheduler", "s4")
    take3 = _until("s4 to take the Lease", lambda: lease.took_over("s4", t_start), 120)
    bind3 = _until("a bind by s4", lambda: pods.first_bound(t_start), 120)
    startup = _until("s4's first cycle", lambda: _first_cycle(h4), 60)
    arrivals.stopped.set()
    arrivals.join(10)

    conflicts = _conflicts(kube) - conflicts0
    use: dict[str, int] = {}
    bound = 0
    for ns in ("running", "arrive"):
        for p in list_all(kube, pods_path(ns)):
            node = p["spec"].get("nodeName")
            if node:
                bound += 1
                use[node] = use.get(node, 0) + 1
    over = sum(1 for v in use.values() if v > cfg.gpus_per_node)
    after_take = {"sigterm": _seconds(bind1, take1), "sigkill": _seconds(bind2, take2), "cold": _seconds(bind3, take3)}
    worst = max((v for k, v in after_take.items() if k != "cold" and v is not None), default=None)
    after_term, after_kill, after_start = _seconds(bind1, t_term), _seconds(bind2, t_kill), _seconds(bind3, t_start)
    return FailoverResult(
        nodes=cfg.nodes,
        gpus_per_node=cfg.gpus_per_node,
        running=cfg.running,
        arrival_rate=cfg.rate,
        lease={
            "lease_duration_seconds": cfg.lease_duration,
            "renew_deadline_seconds": cfg.renew_deadline,
            "retry_period_seconds": cfg.retry_period,
        },
        first_bind_after_takeover_seconds=worst,
        first_bind_after_sigterm_seconds=after_term,
        first_bind_after_sigkill_seconds=after_kill,
        first_bind_after_process_start_seconds=after_start,
        takeover_after_sigterm_seconds=_seconds(take1, t_term),
        takeover_after_sigkill_seconds=_seconds(take2, t_kill),
        first_bind_after_takeover=after_take,
        cold_start={"process_start_to_first_bind_seconds": after_start, **startup},
        new_leaders=leader_startup,
        binding_conflicts=conflicts,
        overcommitted_nodes=over,
        bound=bound,
        goals={
            "takeover_le_1s": worst is not None and worst <= 1.0,
            "sigterm_le_2s": after_term is not None and after_term <= 2.0,
            "cold_start_le_2s": after_start is not None and after_start <= 2.0,
            "never_bound_twice": conflicts == 0 and over == 0,
        },
        machine={"cpus": os.cpu_count(), "loadavg_after": [round(x, 2) for x in os.getloadavg()]},
    )

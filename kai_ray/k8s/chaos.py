"""Chaos on the real API server: the operators are SIGKILLed (leaders too, during a preemption) while invariants hold.

Used by the test suite (a short run on the session control plane) and by ``kai-ray bench chaos`` (a longer one on its
own control plane). What runs: kube-apiserver + etcd + KWOK GPU nodes, and ``replicas`` processes of each operator
exactly as the Helm chart runs them (``kai-ray operator podgrouper|scheduler`` with leader election, a short Lease).
A kill is ``SIGKILL`` (no Lease released, bindings and evictions in flight) followed by a fresh process, as a
Deployment would restart it.

The workload, in waves: training gangs (bring-your-own PodGroups, preemptible) and bare training pods (grouped by the
podgrouper) fill the cluster over their queue's quota; serving gangs (non-preemptible, their own queue with quota)
arrive and reclaim room; the scheduler's leader is killed as soon as the first victim goes. Kills of random
replicas (leaders and followers of both operators) go on throughout.

Invariants, checked by :class:`InvariantMonitor` from the API every few hundred milliseconds, as a user would see
them: no node holds more GPUs than it has (terminating pods included); no pod is bound to a second node; no gang stays
partly bound (some but fewer than ``minMember`` pods bound) for longer than ``partial_grace``; no PodGroup disappears
while its pods exist; after the last kill, everything that fits is bound within ``recovery_timeout`` (the recovery
time is reported); no operator logged a traceback; the operators' memory (RSS) stays below a bound.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kai_ray import constants as c
from kai_ray.k8s.rest import ApiError, Kube, podgroups_path, pods_path, queues_path

SCHEDULER = c.SCHEDULER_NAME
TRACEBACK = "Traceback (most recent call last)"
GPU = c.GPU_RESOURCE


# --- operator processes -----------------------------------------------------------------------------------------


@dataclass
class OperatorProcess:
    kind: str
    identity: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    health_port: int
    started: float
    max_rss_mb: float = 0.0

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def rss_mb(self) -> float:
        try:
            for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
        except OSError:
            pass
        return 0.0


class OperatorFleet:
    """Operator processes of one namespace, each with its own log file; killed with SIGKILL, stopped with SIGTERM."""

    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        node_selector: dict[str, str],
        log_dir: Path,
        *,
        lease_duration: float = 4.0,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.node_selector = node_selector
        self.log_dir = log_dir
        self.lease_duration = lease_duration
        self.extra_args = extra_args
        self.procs: dict[str, OperatorProcess] = {}
        self.dead: list[OperatorProcess] = []
        self._n = 0
        log_dir.mkdir(parents=True, exist_ok=True)

    def start(self, kind: str) -> OperatorProcess:
        from kai_ray.controlplane.harness import free_port

        self._n += 1
        identity = f"{kind}-{self._n}"
        health = free_port()
        log_path = self.log_dir / f"{identity}.log"
        renew = self.lease_duration * 0.7
        cmd = [
            sys.executable,
            "-m",
            "kai_ray",
            "operator",
            kind,
            "--kubeconfig",
            str(self.kubeconfig),
            "--namespace",
            self.namespace,
            "--lease-namespace",
            self.namespace,
            "--lease-duration",
            f"{self.lease_duration}s",
            "--renew-deadline",
            f"{renew:.2f}s",
            "--retry-period",
            "500ms",
            "--identity",
            identity,
            "--bind-address",
            "127.0.0.1",
            "--metrics-port",
            "0",
            "--health-port",
            str(health),
            "--log-level",
            "INFO",
            *self.extra_args,
        ]
        if kind == "scheduler":
            selector = ",".join(f"{k}={v}" for k, v in sorted(self.node_selector.items()))
            cmd += ["--node-selector", selector, "--schedule-period", "500ms"]
        out = open(log_path, "ab")  # noqa: SIM115 - owned by the process
        popen = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        proc = OperatorProcess(kind, identity, popen, log_path, health, time.monotonic())
        self.procs[identity] = proc
        return proc

    def leader(self, kind: str, kube: Kube) -> str | None:
        """The identity holding operator ``kind``'s Lease (None when free or unknown)."""
        try:
            lease = kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/kai-ray-{kind}")
        except ApiError:
            return None
        holder = (lease.get("spec") or {}).get("holderIdentity")
        return str(holder) if holder else None

    def leading(self, kind: str, kube: Kube) -> OperatorProcess | None:
        """The live process holding the Lease and reporting itself leader on /healthz."""
        holder = self.leader(kind, kube)
        proc = self.procs.get(holder or "")
        if proc is None or not proc.alive:
            return None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{proc.health_port}/healthz", timeout=2) as resp:
                return proc if b'"leader": true' in resp.read() else None
        except OSError:
            return None

    def kill(self, identity: str) -> None:
        proc = self.procs.pop(identity)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.popen.pid, signal.SIGKILL)
        proc.popen.wait(timeout=30)
        self.dead.append(proc)

    def sample_memory(self) -> None:
        for proc in self.procs.values():
            proc.max_rss_mb = max(proc.max_rss_mb, proc.rss_mb())

    def max_rss(self, kind: str) -> float:
        return round(max((p.max_rss_mb for p in [*self.procs.values(), *self.dead] if p.kind == kind), default=0.0), 1)

    def tracebacks(self) -> list[str]:
        """``file: first line after the traceback`` for every traceback in any operator's log."""
        out = []
        for proc in [*self.procs.values(), *self.dead]:
            try:
                lines = proc.log_path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            for i, line in enumerate(lines):
                if TRACEBACK in line:
                    context = " | ".join(lines[max(0, i - 1) : i + 12])
                    out.append(f"{proc.log_path.name}: {context[:1500]}")
        return out

    def stop(self) -> None:
        for proc in list(self.procs.values()):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGTERM)
        for identity, proc in list(self.procs.items()):
            try:
                proc.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGKILL)
                proc.popen.wait(timeout=10)
            self.dead.append(self.procs.pop(identity))


# --- invariants -------------------------------------------------------------------------------------------------


def _gpus(pod: dict[str, Any]) -> float:
    total = 0.0
    for ctr in (pod.get("spec") or {}).get("containers") or []:
        res = ctr.get("resources") or {}
        value = (res.get("limits") or {}).get(GPU) or (res.get("requests") or {}).get(GPU) or 0
        with contextlib.suppress(ValueError, TypeError):
            total += float(value)
    return total


def _group(pod: dict[str, Any]) -> str | None:
    meta = pod.get("metadata") or {}
    name = (meta.get("annotations") or {}).get(c.PODGROUP_ANNOTATION)
    if name:
        return str(name)
    if not meta.get("ownerReferences") and meta.get("uid"):
        return f"pg-{meta.get('name')}-{meta['uid']}"
    return None


@dataclass
class Violations:
    overcommitted: list[str] = field(default_factory=list)
    double_bound: list[str] = field(default_factory=list)
    partial_gangs: list[str] = field(default_factory=list)
    lost_podgroups: list[str] = field(default_factory=list)

    def total(self) -> int:
        return len(self.overcommitted) + len(self.double_bound) + len(self.partial_gangs) + len(self.lost_podgroups)


class InvariantMonitor:
    """Polls the namespace's pods and PodGroups and records every invariant violation (see the module docstring)."""

    def __init__(
        self, kube: Kube, namespace: str, capacity: dict[str, float], partial_grace: float, interval: float = 0.3
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.capacity = capacity
        self.partial_grace = partial_grace
        self.interval = interval
        self.v = Violations()
        self.samples = 0
        self.max_gpu: dict[str, float] = {}
        self._first_node: dict[str, str] = {}
        self._partial_since: dict[str, float] = {}
        self._pg_seen: set[str] = set()
        self._missing_since: dict[str, float] = {}
        self.deleted: set[str] = set()  # PodGroups the workload itself deleted
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chaos-monitor", daemon=True)

    def __enter__(self) -> InvariantMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(ApiError):
                self.check()
            self._stop.wait(self.interval)

    def check(self) -> None:
        pods = self.kube.get(pods_path(self.namespace))["items"]
        groups = {g["metadata"]["name"]: g for g in self.kube.get(podgroups_path(self.namespace))["items"]}
        now = time.monotonic()
        self.samples += 1
        use: dict[str, float] = {}
        bound_in: dict[str, int] = {}
        members: dict[str, int] = {}
        for p in pods:
            meta, spec = p["metadata"], p.get("spec") or {}
            node = spec.get("nodeName")
            phase = (p.get("status") or {}).get("phase")
            group = _group(p)
            if group is not None:
                members[group] = members.get(group, 0) + 1
            if not node or phase in ("Succeeded", "Failed"):
                continue
            first = self._first_node.setdefault(meta["uid"], node)
            if first != node and f"{meta['name']}" not in self.v.double_bound:
                self.v.double_bound.append(f"{meta['name']}: {first} then {node}")
            use[node] = use.get(node, 0.0) + _gpus(p)
            if group is not None and not meta.get("deletionTimestamp"):
                bound_in[group] = bound_in.get(group, 0) + 1
        for node, used in use.items():
            self.max_gpu[node] = max(self.max_gpu.get(node, 0.0), used)
            if used > self.capacity.get(node, float("inf")) + 1e-9:
                self.v.overcommitted.append(f"{node}: {used:g} GPUs bound on {self.capacity[node]:g}")
        for name, pg in groups.items():
            self._pg_seen.add(name)
            minimum = int((pg.get("spec") or {}).get("minMember") or 0)
            b = bound_in.get(name, 0)
            if 0 < b < minimum:
                since = self._partial_since.setdefault(name, now)
                if now - since > self.partial_grace and not any(x.startswith(f"{name}:") for x in self.v.partial_gangs):
                    self.v.partial_gangs.append(f"{name}: {b}/{minimum} pods bound for over {self.partial_grace:g}s")
            else:
                self._partial_since.pop(name, None)
        for name in self._pg_seen - set(groups) - self.deleted:
            if members.get(name):  # its pods are still there: the PodGroup was lost
                since = self._missing_since.setdefault(name, now)
                if now - since > 10.0 and name not in self.v.lost_podgroups:
                    self.v.lost_podgroups.append(name)
            else:
                self._missing_since.pop(name, None)


# --- the run ----------------------------------------------------------------------------------------------------


@dataclass
class ChaosConfig:
    nodes: int = 6
    gpus_per_node: int = 8
    replicas: int = 2  # processes of each operator
    kills: int = 6  # in all: one of the scheduler's leader during the preemption, one of it last
    kill_interval: tuple[float, float] = (3.0, 7.0)  # seconds between kills (uniform)
    lease_duration: float = 4.0
    partial_grace: float = 30.0
    recovery_timeout: float = 180.0
    memory_limit_mb: float = 800.0
    seed: int = 12


@dataclass
class ChaosResult:
    nodes: int
    gpus: int
    kills: int = 0
    leader_kills: int = 0
    kills_during_preemption: int = 0
    overcommitted: list[str] = field(default_factory=list)
    double_bound: list[str] = field(default_factory=list)
    partial_gangs: list[str] = field(default_factory=list)
    lost_podgroups: list[str] = field(default_factory=list)
    recovered: bool = False
    recovery_seconds: float = 0.0  # after the last kill, until everything that fits is bound
    serving_bound_seconds: float = 0.0  # after the serving gangs arrived
    bound_gpus: float = 0.0
    max_gpu_per_node: float = 0.0
    tracebacks: list[str] = field(default_factory=list)
    max_rss_mb: dict[str, float] = field(default_factory=dict)
    monitor_samples: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.recovered and not (
            self.overcommitted or self.double_bound or self.partial_gangs or self.lost_podgroups or self.tracebacks
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def _queue(name: str, gpu_quota: float, parent: str | None, priority: int | None = None) -> dict[str, Any]:
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    spec: dict[str, Any] = {
        "resources": {
            "gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1},
            "cpu": unlimited,
            "memory": unlimited,
        }
    }
    if parent:
        spec["parentQueue"] = parent
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def _pod(
    name: str, gpus: int, queue: str, priority: str, group: str | None = None, extra: dict[str, str] | None = None
) -> dict[str, Any]:
    labels = {c.QUEUE_LABEL: queue, c.PRIORITY_LABEL: priority, **(extra or {})}
    annotations: dict[str, str] = {}
    if group:
        annotations[c.PODGROUP_ANNOTATION] = group
        labels[c.SKIP_PODGROUPER] = "true"  # a bring-your-own PodGroup, as KAI requires
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {
            "schedulerName": SCHEDULER,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "main", "image": "registry.invalid/chaos:0", "resources": {"limits": {GPU: str(gpus)}}}
            ],
        },
    }


def _gang(
    kube: Kube,
    ns: str,
    name: str,
    pods: int,
    gpus: int,
    queue: str,
    priority: str,
    labels: dict[str, str] | None = None,
) -> list[str]:
    body = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": pods, "queue": queue, "priorityClassName": priority},
    }
    kube.create(podgroups_path(ns), body)
    names = [f"{name}-{i}" for i in range(pods)]
    for pod in names:
        kube.create(pods_path(ns), _pod(pod, gpus, queue, priority, group=name, extra=labels))
    return names


def _bound(kube: Kube, ns: str, names: list[str]) -> int:
    want = set(names)
    return sum(
        1
        for p in kube.get(pods_path(ns))["items"]
        if p["metadata"]["name"] in want and p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
    )


def _used(kube: Kube, ns: str) -> float:
    return sum(_gpus(p) for p in kube.get(pods_path(ns))["items"] if p["spec"].get("nodeName"))


def _wait(what: str, check: Callable[[], bool], timeout: float, stop: Callable[[], None] | None = None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ApiError):
            if check():
                return True
        if stop is not None:
            stop()
        time.sleep(0.25)
    return False


def run_chaos(
    kube: Kube,
    kubeconfig: Path,
    namespace: str,
    node_selector: dict[str, str],
    capacity: dict[str, float],
    cfg: ChaosConfig,
    log_dir: Path,
    say: Callable[[str], None] = lambda msg: None,
) -> ChaosResult:
    """One chaos run in ``namespace`` on the nodes matching ``node_selector`` (``capacity``: node -> GPUs); the
    namespace's queues are created here and deleted afterwards. Never raises for a violated invariant: they are in
    the result."""
    rng = random.Random(cfg.seed)
    t_start = time.monotonic()
    total = sum(capacity.values())
    result = ChaosResult(nodes=len(capacity), gpus=int(total))
    dept, train, serve = f"{namespace}-dept", f"{namespace}-train", f"{namespace}-serve"
    half = total / 2
    queues = [_queue(dept, -1, None), _queue(train, half, dept, 50), _queue(serve, half, dept, 200)]
    for q in queues:
        kube.create(queues_path(), q)
    fleet = OperatorFleet(kubeconfig, namespace, node_selector, log_dir, lease_duration=cfg.lease_duration)
    state = {"preempting": False}
    try:
        for _ in range(cfg.replicas):
            fleet.start("scheduler")
            fleet.start("podgrouper")
        if not _wait(
            "leaders", lambda: bool(fleet.leading("scheduler", kube) and fleet.leading("podgrouper", kube)), 120
        ):
            result.tracebacks = fleet.tracebacks() or ["no leader was elected in 120 s"]
            return result
        say(f"{cfg.replicas} replicas of each operator up; filling {int(total)} GPUs with training")
        with InvariantMonitor(kube, namespace, capacity, cfg.partial_grace) as monitor:
            kills_left = [max(0, cfg.kills - 2)]  # two are kept for the scheduler's leader (preemption, last)
            next_kill = [time.monotonic() + rng.uniform(*cfg.kill_interval)]
            last_kill = [time.monotonic()]

            def kill(kind: str | None = None, leader: bool | None = None, reserved: bool = False) -> None:
                if kills_left[0] <= 0 and not reserved:
                    return
                kind = kind or rng.choice(["scheduler", "podgrouper"])
                lead = fleet.leader(kind, kube)
                live = [p for p in fleet.procs.values() if p.kind == kind]
                if not live:
                    return
                if leader is None:
                    leader = rng.random() < 0.6
                target = next((p for p in live if p.identity == lead), None) if leader else None
                target = target or rng.choice(live)
                is_leader = target.identity == lead
                fleet.kill(target.identity)
                fleet.start(kind)
                kills_left[0] -= 0 if reserved else 1
                result.kills += 1
                result.leader_kills += int(is_leader)
                result.kills_during_preemption += int(state["preempting"] and kind == "scheduler" and is_leader)
                last_kill[0] = time.monotonic()
                say(f"killed {target.identity} ({'leader' if is_leader else 'follower'}); {kills_left[0]} kills left")
                next_kill[0] = time.monotonic() + rng.uniform(*cfg.kill_interval)

            def tick() -> None:
                fleet.sample_memory()
                if time.monotonic() >= next_kill[0]:
                    kill()

            # 1. Training fills the cluster (gangs of 2 x 2 GPUs), plus bare pods the podgrouper groups.
            training: list[str] = []
            for i in range(int(total) // 4):
                training += _gang(kube, namespace, f"train-{i}", 2, 2, train, "train")
                tick()
            bare = [f"bare-{i}" for i in range(4)]
            for name in bare:
                kube.create(pods_path(namespace), _pod(name, 1, train, "train"))
            filled = _wait("training to fill the cluster", lambda: _used(kube, namespace) >= total, 120, tick)
            say(f"training {'fills' if filled else 'did not fill'} the cluster; serving arrives")

            # 2. Serving arrives in its own queue (in quota): the training over-quota half is reclaimed. The
            #    scheduler's leader is killed as soon as the first victim goes.
            before = _bound(kube, namespace, training + bare)
            state["preempting"] = True
            t_serve = time.monotonic()
            serving: list[str] = []
            per_gang = max(1, cfg.gpus_per_node // 2)
            for i in range(max(1, int(half) // (2 * per_gang))):
                serving += _gang(kube, namespace, f"serve-{i}", 2, per_gang, serve, "inference")

            def first_victim() -> bool:
                return _bound(kube, namespace, training + bare) < before

            if _wait("the first victim", first_victim, 60, lambda: fleet.sample_memory()):
                kill("scheduler", leader=True, reserved=True)
            _wait("serving to be bound", lambda: _bound(kube, namespace, serving) == len(serving), 120, tick)
            result.serving_bound_seconds = round(time.monotonic() - t_serve, 1)
            state["preempting"] = False

            # 3. Churn while the other kills go on: a bound training gang finishes, a new one arrives. The last kill
            #    is the scheduler's leader, right before more churn; recovery is timed from it.
            generation = [len(training) // 2]

            def churn() -> None:
                items = kube.get(pods_path(namespace))["items"]
                gangs = sorted(
                    {
                        _group(p) or ""
                        for p in items
                        if p["spec"].get("nodeName") and p["metadata"]["name"].startswith("train-")
                    }
                    - {""}
                )
                if gangs:
                    gone = rng.choice(gangs)
                    monitor.deleted.add(gone)
                    for p in items:
                        if _group(p) == gone:
                            with contextlib.suppress(ApiError):
                                kube.delete_pod(namespace, p["metadata"]["name"], None, grace_seconds=0)
                    with contextlib.suppress(ApiError):
                        kube.delete(podgroups_path(namespace, gone))
                _gang(kube, namespace, f"train-{generation[0]}", 2, 2, train, "train")
                generation[0] += 1

            while kills_left[0] > 0:
                tick()
                with contextlib.suppress(ApiError):
                    churn()
                time.sleep(rng.uniform(1.0, 2.5))
            _wait("a scheduler leader", lambda: fleet.leading("scheduler", kube) is not None, 60, fleet.sample_memory)
            kill("scheduler", leader=True, reserved=True)
            for _ in range(2):
                with contextlib.suppress(ApiError):
                    churn()
            t_last = last_kill[0]
            say("last kill done (the scheduler's leader); waiting for recovery")

            def settled() -> bool:
                """Serving is bound, and no pending pod or gang would fit in what is free."""
                items = kube.get(pods_path(namespace))["items"]
                if _bound(kube, namespace, serving) != len(serving):
                    return False
                free = dict(capacity)
                pending: list[dict[str, Any]] = []
                for p in items:
                    node = p["spec"].get("nodeName")
                    if node:
                        free[node] = free.get(node, 0.0) - _gpus(p)
                    elif not p["metadata"].get("deletionTimestamp"):
                        pending.append(p)
                bare_waits = any(p["metadata"]["name"].startswith("bare-") for p in pending)
                if bare_waits and any(f >= 1 for f in free.values()):
                    return False
                gang_waits = any(p["metadata"]["name"].startswith("train-") for p in pending)
                return not (gang_waits and sum(int(f // 2) for f in free.values()) >= 2)

            result.recovered = _wait("recovery", settled, cfg.recovery_timeout, lambda: fleet.sample_memory())
            result.recovery_seconds = round(time.monotonic() - t_last, 1)
            time.sleep(1.0)  # a last look after recovery
        v = monitor.v
        result.overcommitted, result.double_bound = v.overcommitted, v.double_bound
        result.partial_gangs, result.lost_podgroups = v.partial_gangs, v.lost_podgroups
        result.monitor_samples = monitor.samples
        result.max_gpu_per_node = max(monitor.max_gpu.values(), default=0.0)
        items = kube.get(pods_path(namespace))["items"]
        result.bound_gpus = sum(_gpus(p) for p in items if p["spec"].get("nodeName"))
    finally:
        fleet.sample_memory()
        fleet.stop()
        result.tracebacks = fleet.tracebacks()
        result.max_rss_mb = {k: fleet.max_rss(k) for k in ("scheduler", "podgrouper")}
        for q in reversed(queues):
            with contextlib.suppress(ApiError):
                kube.delete(queues_path(q["metadata"]["name"]))
        result.seconds = round(time.monotonic() - t_start, 1)
    return result

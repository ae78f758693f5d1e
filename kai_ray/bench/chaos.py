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
import random
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kai_ray.k8s.base.rest import ApiError, Kube, podgroups_path, pods_path, queues_path
from kai_ray.testing.testbed import (
    OperatorFleet,
    count_bound,
    delete_queues,
    gpus,
    make_gang,
    nothing_fits,
    pod_body,
    pod_group,
    queue_body,
    used_gpus,
    wait_for,
)

# --- invariants -------------------------------------------------------------------------------------------------


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
        self.errors: list[str] = []
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
            try:
                self.check()
            except ApiError:
                pass  # a slow answer under load: the next poll looks again
            except Exception as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
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
            group = pod_group(p)
            if group is not None:
                members[group] = members.get(group, 0) + 1
            if not node or phase in ("Succeeded", "Failed"):
                continue
            first = self._first_node.setdefault(meta["uid"], node)
            if first != node and f"{meta['name']}" not in self.v.double_bound:
                self.v.double_bound.append(f"{meta['name']}: {first} then {node}")
            use[node] = use.get(node, 0.0) + gpus(p)
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
    monitor_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    log: list[str] = field(default_factory=list)  # what happened when (seconds since the start)

    @property
    def ok(self) -> bool:
        return self.recovered and not (
            self.overcommitted
            or self.double_bound
            or self.partial_gangs
            or self.lost_podgroups
            or self.tracebacks
            or self.monitor_errors
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def run_chaos(
    kube: Kube,
    kubeconfig: Path,
    namespace: str,
    node_selector: dict[str, str],
    capacity: dict[str, float],
    cfg: ChaosConfig,
    log_dir: Path,
    progress: Callable[[str], None] = lambda msg: None,
) -> ChaosResult:
    """One chaos run in ``namespace`` on the nodes matching ``node_selector`` (``capacity``: node -> GPUs); the
    namespace's queues are created here and deleted afterwards. Never raises for a violated invariant: they are in
    the result."""
    rng = random.Random(cfg.seed)
    t_start = time.monotonic()
    total = sum(capacity.values())
    result = ChaosResult(nodes=len(capacity), gpus=int(total))

    def say(msg: str) -> None:
        result.log.append(f"{time.monotonic() - t_start:6.1f}s {msg}")
        progress(msg)

    dept, train, serve = f"{namespace}-dept", f"{namespace}-train", f"{namespace}-serve"
    half = total / 2
    queues = [
        queue_body(dept),
        queue_body(train, gpu_quota=half, parent=dept, priority=50),
        queue_body(serve, gpu_quota=half, parent=dept, priority=200),
    ]
    for q in queues:
        kube.create(queues_path(), q)
    fleet = OperatorFleet(kubeconfig, namespace, node_selector, log_dir, lease_duration=cfg.lease_duration)
    state = {"preempting": False}
    try:
        for _ in range(cfg.replicas):
            fleet.start("scheduler")
            fleet.start("podgrouper")
        if not wait_for(
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
                training += make_gang(kube, namespace, f"train-{i}", 2, 2, train, "train")
                tick()
            bare = [f"bare-{i}" for i in range(4)]
            for name in bare:
                kube.create(pods_path(namespace), pod_body(name, 1, train, "train"))
            filled = wait_for(
                "training to fill the cluster", lambda: nothing_fits(kube, namespace, capacity), 120, tick
            )
            say(f"training {'fills' if filled else 'did not fill'} the cluster ({used_gpus(kube, namespace):g} GPUs)")

            # 2. Serving arrives in its own queue (in quota): the training over-quota half is reclaimed. The
            #    scheduler's leader is killed as soon as the first victim goes.
            before = count_bound(kube, namespace, training + bare)
            state["preempting"] = True
            t_serve = time.monotonic()
            serving: list[str] = []
            per_gang = max(1, cfg.gpus_per_node // 2)
            for i in range(max(1, int(half) // (2 * per_gang))):
                serving += make_gang(kube, namespace, f"serve-{i}", 2, per_gang, serve, "inference")

            def first_victim() -> bool:
                return count_bound(kube, namespace, training + bare) < before

            if wait_for("the first victim", first_victim, 60, lambda: fleet.sample_memory()):
                kill("scheduler", leader=True, reserved=True)
            else:
                say("no victim went within 60 s")
            wait_for("serving to be bound", lambda: count_bound(kube, namespace, serving) == len(serving), 120, tick)
            result.serving_bound_seconds = round(time.monotonic() - t_serve, 1)
            say(f"serving bound after {result.serving_bound_seconds:g}s")
            state["preempting"] = False

            # 3. Churn while the other kills go on: a bound training gang finishes, a new one arrives. The last kill
            #    is the scheduler's leader, right before more churn; recovery is timed from it.
            generation = [len(training) // 2]

            def churn() -> None:
                items = kube.get(pods_path(namespace))["items"]
                gangs = sorted(
                    {
                        pod_group(p) or ""
                        for p in items
                        if p["spec"].get("nodeName") and p["metadata"]["name"].startswith("train-")
                    }
                    - {""}
                )
                if gangs:
                    gone = rng.choice(gangs)
                    monitor.deleted.add(gone)
                    for p in items:
                        if pod_group(p) == gone:
                            with contextlib.suppress(ApiError):
                                kube.delete_pod(namespace, p["metadata"]["name"], None, grace_seconds=0)
                    with contextlib.suppress(ApiError):
                        kube.delete(podgroups_path(namespace, gone))
                make_gang(kube, namespace, f"train-{generation[0]}", 2, 2, train, "train")
                generation[0] += 1

            while kills_left[0] > 0:
                tick()
                with contextlib.suppress(ApiError):
                    churn()
                time.sleep(rng.uniform(1.0, 2.5))
            wait_for(
                "a scheduler leader", lambda: fleet.leading("scheduler", kube) is not None, 60, fleet.sample_memory
            )
            kill("scheduler", leader=True, reserved=True)
            for _ in range(2):
                with contextlib.suppress(ApiError):
                    churn()
            t_last = last_kill[0]
            say("last kill done (the scheduler's leader); waiting for recovery")

            def settled() -> bool:
                """Serving is bound, and no pending pod or gang would fit in what is free."""
                return count_bound(kube, namespace, serving) == len(serving) and nothing_fits(kube, namespace, capacity)

            result.recovered = wait_for("recovery", settled, cfg.recovery_timeout, lambda: fleet.sample_memory())
            result.recovery_seconds = round(time.monotonic() - t_last, 1)
            verdict = "recovered" if result.recovered else "NOT recovered"
            say(f"{verdict} {result.recovery_seconds:g}s after the last kill")
            time.sleep(1.0)  # a last look after recovery
        v = monitor.v
        result.overcommitted, result.double_bound = v.overcommitted, v.double_bound
        result.partial_gangs, result.lost_podgroups = v.partial_gangs, v.lost_podgroups
        result.monitor_samples = monitor.samples
        result.monitor_errors = monitor.errors[:10]
        result.max_gpu_per_node = max(monitor.max_gpu.values(), default=0.0)
        items = kube.get(pods_path(namespace))["items"]
        result.bound_gpus = sum(gpus(p) for p in items if p["spec"].get("nodeName"))
    finally:
        result.tracebacks, result.max_rss_mb = fleet.finish()
        delete_queues(kube, [q["metadata"]["name"] for q in queues])
        result.seconds = round(time.monotonic() - t_start, 1)
    return result

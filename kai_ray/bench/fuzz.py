"""Fuzz through the real API server: mutated Ray CRs, PodGroups, Queues and pods, while good jobs keep being scheduled.

Used by the test suite (500 objects) and by ``kai-ray bench fuzz`` (more). Every object starts from a valid base and
gets one to three random mutations: numbers at the edges of their type (negative, zero, int32 max, 10^9), strings
empty, long or odd, fields removed, unknown fields added, KAI's labels and annotations with bad values (queues that
do not exist, ``gpu-fraction`` outside (0, 1], topology levels without a topology, garbage in kai-ray's own
annotations), owner references that dangle, worker groups duplicated or multiplied. What the API server's schema
rejects is counted and dropped; what it accepts is what the operators must cope with. Pods of accepted RayClusters
are created as KubeRay would (CPU only, so fuzz never takes the GPUs the good jobs need).

Meanwhile, every ``good_every`` objects a good gang (two 1-GPU pods, a bring-your-own PodGroup in a queue with quota)
is created and must be bound within ``good_within`` seconds; it is deleted once bound. The operators run as processes
(:class:`~kai_ray.bench.chaos.OperatorFleet`); afterwards their logs must hold no traceback, neither may have died, and
their memory (RSS) must stay below a bound.
"""

from __future__ import annotations

import contextlib
import copy
import random
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kai_ray import constants as c
from kai_ray.k8s.base.rest import ApiError, Kube, podgroups_path, pods_path, queues_path, ray_path
from kai_ray.testing.testbed import OperatorFleet, delete_queues, make_gang, queue_body

KINDS = ("RayCluster", "RayJob", "RayService", "PodGroup", "Queue", "Pod")
NUMBERS: list[Any] = [-(2**31), -5, -1, 0, 1, 3, 2**31 - 1, 10**9, 2**40, 1.5, "7", None]
STRINGS: list[Any] = ["", "x" * 300, "ünïcödé", "a/b", "UPPER_case", "-lead", "0", None, 12]
FRACTIONS = ["1.5", "0", "-1", "abc", "0.5", "1e-9", "nan", "inf", ""]
LABEL_VALUES = ["preemptible", "non-preemptible", "x", "", "true", "false", "team-ünï"]


@dataclass
class FuzzConfig:
    objects: int = 500  # accepted by the API server
    good_every: int = 25
    good_within: float = 60.0
    seed: int = 7
    memory_limit_mb: float = 800.0
    max_attempts_factor: int = 4  # give up after objects x this many attempts


@dataclass
class FuzzResult:
    attempted: int = 0
    accepted: int = 0
    accepted_by_kind: dict[str, int] = field(default_factory=dict)
    rejected_by_kind: dict[str, int] = field(default_factory=dict)
    kuberay_pods: int = 0
    transient: int = 0
    good_jobs: int = 0
    good_bound: int = 0
    good_late: list[str] = field(default_factory=list)
    good_latency_p50: float = 0.0
    good_latency_max: float = 0.0
    tracebacks: list[str] = field(default_factory=list)
    died: list[str] = field(default_factory=list)
    max_rss_mb: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.good_bound == self.good_jobs and not self.good_late and not self.tracebacks and not self.died

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


# --- bases and mutations ----------------------------------------------------------------------------------------


def _container(gpus: int = 0, cpu: str = "100m") -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": cpu, "memory": "128Mi"}
    if gpus:
        limits[c.GPU_RESOURCE] = str(gpus)
    return {"name": "main", "image": "registry.invalid/fuzz:0", "resources": {"limits": limits}}


def _cluster_spec(autoscaling: bool = False) -> dict[str, Any]:
    return {
        "enableInTreeAutoscaling": autoscaling,
        "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [_container()]}}},
        "workerGroupSpecs": [
            {
                "groupName": "gpu",
                "replicas": 1,
                "minReplicas": 1,
                "maxReplicas": 2,
                "numOfHosts": 1,
                "rayStartParams": {},
                "template": {"spec": {"containers": [_container(1)]}},
            }
        ],
    }


def base(kind: str, name: str, ns: str, queue: str) -> dict[str, Any]:
    labels = {c.QUEUE_LABEL: queue}
    meta = {"name": name, "labels": labels, "annotations": {}}
    if kind == "RayCluster":
        return {"apiVersion": "ray.io/v1", "kind": kind, "metadata": meta, "spec": _cluster_spec()}
    if kind == "RayJob":
        spec = {"entrypoint": "python train.py", "shutdownAfterJobFinishes": True, "rayClusterSpec": _cluster_spec()}
        return {"apiVersion": "ray.io/v1", "kind": kind, "metadata": meta, "spec": spec}
    if kind == "RayService":
        spec = {"serveConfigV2": "applications: []\n", "rayClusterConfig": _cluster_spec()}
        return {"apiVersion": "ray.io/v1", "kind": kind, "metadata": meta, "spec": spec}
    if kind == "PodGroup":
        spec = {
            "minMember": 1,
            "queue": queue,
            "priorityClassName": "train",
            "subGroups": [{"name": "a", "minMember": 1}],
        }
        return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": kind, "metadata": meta, "spec": spec}
    if kind == "Queue":
        q = queue_body(f"{ns}-{name}", gpu_quota=1, parent=f"{ns}-fuzz")
        q["metadata"]["labels"] = {}
        return q
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"schedulerName": c.SCHEDULER_NAME, "terminationGracePeriodSeconds": 0, "containers": [_container()]},
    }


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into the object's spec and metadata (dict keys and list indices)."""
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not prefix and k not in ("spec", "metadata"):
                continue
            if prefix == ("metadata",) and k == "name":
                continue
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


def _parent(obj: Any, path: tuple[Any, ...]) -> Any:
    for part in path[:-1]:
        obj = obj[part]
    return obj


def mutate(rng: random.Random, obj: dict[str, Any], ns: str, names: dict[str, list[str]]) -> str:
    """One random mutation in place; returns what was done (for the record)."""
    kind = obj["kind"]
    meta = obj["metadata"]
    choice = rng.randrange(11)
    if choice in (0, 1):  # a number at the edge of its type (or of another type), or an odd string
        kind_of, pool = ((int, float), NUMBERS) if choice == 0 else ((str,), STRINGS)
        paths = [p for p in _paths(obj) if isinstance(_parent(obj, p)[p[-1]], kind_of)]
        if paths:
            p = rng.choice(paths)
            value = rng.choice(pool)
            _parent(obj, p)[p[-1]] = value
            return f"{'.'.join(map(str, p))}={value!r}"
    if choice == 2:  # a field removed
        paths = [p for p in _paths(obj) if len(p) > 1]
        if paths:
            p = rng.choice(paths)
            parent = _parent(obj, p)
            if isinstance(parent, dict):
                del parent[p[-1]]
            elif isinstance(parent, list) and parent:
                parent.pop(p[-1])
            return f"-{'.'.join(map(str, p))}"
    if choice == 3:  # an unknown field
        paths = [p for p in _paths(obj) if isinstance(_parent(obj, p)[p[-1]], dict)] or [("spec",)]
        p = rng.choice(paths)
        _parent(obj, p)[p[-1]]["zzFuzz"] = {"x": rng.choice(NUMBERS)}
        return f"+{'.'.join(map(str, p))}.zzFuzz"
    if choice == 4:
        meta.setdefault("annotations", {})[c.GPU_FRACTION] = value = rng.choice(FRACTIONS)
        return f"gpu-fraction={value!r}"
    if choice == 5:
        key = rng.choice([c.GPU_MEMORY, c.MAX_MEMBER, c.SUBGROUP_MAX, c.SUBGROUP_NAMES, c.INVALID, c.STALE_SINCE])
        meta.setdefault("annotations", {})[key] = value = rng.choice(["abc", "-5", "{", "[]", "99999999999", "{}"])
        return f"annotations[{key}]={value!r}"
    if choice == 6:
        key = rng.choice([c.QUEUE_LABEL, c.PRIORITY_LABEL, c.PREEMPTIBILITY_LABEL, c.RAY_PRIORITY_LABEL])
        pool = [f"{ns}-nowhere", f"{ns}-fuzz", "inference", "no-such-class", *LABEL_VALUES]
        meta.setdefault("labels", {})[key] = value = rng.choice([v for v in pool if v])
        return f"labels[{key}]={value!r}"
    if choice == 7:
        key = rng.choice([c.TOPOLOGY, c.TOPOLOGY_REQUIRED, c.TOPOLOGY_PREFERRED, c.PREEMPTION_DELAY, c.STALENESS_GRACE])
        meta.setdefault("annotations", {})[key] = value = rng.choice(["rack", "", "1h", "-1s", "zone", "banana"])
        return f"annotations[{key}]={value!r}"
    if choice == 8:  # an owner reference, dangling or to something real
        existing = names.get("RayCluster") or []
        target = rng.choice(existing) if existing and rng.random() < 0.5 else f"ghost-{rng.randrange(100)}"
        ref_kind = rng.choice(["RayCluster", "RayJob", "RayService"])
        meta["ownerReferences"] = [
            {
                "apiVersion": "ray.io/v1",
                "kind": ref_kind,
                "name": target,
                "uid": str(uuid.UUID(int=rng.getrandbits(128))),
                "controller": rng.random() < 0.7,
            }
        ]
        return f"ownerReferences -> {ref_kind}/{target}"
    if choice == 9 and kind in ("RayCluster", "RayJob", "RayService"):  # worker groups multiplied or duplicated
        spec = (
            obj["spec"]
            if kind == "RayCluster"
            else obj["spec"].get("rayClusterSpec") or obj["spec"].get("rayClusterConfig")
        )
        groups = (spec or {}).get("workerGroupSpecs")
        if isinstance(groups, list) and groups:
            n = rng.choice([2, 30])
            same = rng.random() < 0.5
            for i in range(n):
                g = copy.deepcopy(groups[0])
                if not same:
                    g["groupName"] = f"g{i}"
                groups.append(g)
            return f"workerGroupSpecs x{n + 1} ({'duplicates' if same else 'distinct'})"
    if choice == 10 and kind == "Queue":  # parents: another fuzz queue (maybe one yet to come: cycles), or none
        i = rng.randrange(1, len(names.get("Queue") or []) + 20)
        obj["spec"]["parentQueue"] = value = f"{ns}-fz-{i}" if rng.random() < 0.8 else f"{ns}-nowhere"
        return f"parentQueue={value!r}"
    if choice == 10 and kind == "PodGroup":  # subgroups: cycles, unknown parents, bad names
        obj["spec"]["subGroups"] = [
            {"name": "a", "parent": "b"},
            {"name": "b", "parent": "a", "minMember": 1},
            {"name": "Bad_Name", "parent": "nowhere", "minMember": -1},
        ][: rng.randrange(1, 4)]
        return "subGroups: cycle / unknown parent / bad name"
    if kind == "Pod" and rng.random() < 0.5:
        meta.setdefault("annotations", {})[c.PODGROUP_ANNOTATION] = value = rng.choice(
            [*(names.get("PodGroup") or [])[-5:], "pg-nowhere", ""]
        )
        return f"pod-group-name={value!r}"
    meta.setdefault("labels", {})["fuzz"] = "no-op"
    return "no-op"


def _path(kind: str, ns: str, name: str | None = None) -> str:
    if kind in ("RayCluster", "RayJob", "RayService"):
        return ray_path(kind, ns, name)
    if kind == "PodGroup":
        return podgroups_path(ns, name)
    if kind == "Queue":
        return queues_path(name)
    return pods_path(ns, name)


def _kuberay_pod(cluster: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """A pod KubeRay would create for an accepted RayCluster (head or worker), CPU only."""
    meta = cluster["metadata"]
    head = rng.random() < 0.5
    group = "headgroup" if head else "gpu"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{meta['name']}-{'head' if head else 'gpu-worker-0'}",
            "labels": {
                c.RAY_CLUSTER: meta["name"],
                c.RAY_NODE_TYPE: "head" if head else "worker",
                c.RAY_GROUP: group,
                **{k: v for k, v in (meta.get("labels") or {}).items() if k == c.QUEUE_LABEL},
            },
            "ownerReferences": [
                {
                    "apiVersion": "ray.io/v1",
                    "kind": "RayCluster",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {"schedulerName": c.SCHEDULER_NAME, "terminationGracePeriodSeconds": 0, "containers": [_container()]},
    }


# --- the run ----------------------------------------------------------------------------------------------------


def run_fuzz(
    kube: Kube,
    kubeconfig: Path,
    namespace: str,
    node_selector: dict[str, str],
    cfg: FuzzConfig,
    log_dir: Path,
    say: Callable[[str], None] = lambda msg: None,
) -> FuzzResult:
    """One fuzz run in ``namespace`` (queues created here and deleted afterwards)."""
    rng = random.Random(cfg.seed)
    t0 = time.monotonic()
    result = FuzzResult()
    dept, good_q, fuzz_q = f"{namespace}-dept", f"{namespace}-good", f"{namespace}-fuzz"
    made_queues = [dept, good_q, fuzz_q]
    for q in (
        queue_body(dept),
        queue_body(good_q, gpu_quota=8, parent=dept, priority=200),
        queue_body(fuzz_q, gpu_quota=0, parent=dept, priority=50),
    ):
        kube.create(queues_path(), q)
    fleet = OperatorFleet(kubeconfig, namespace, node_selector, log_dir)
    names: dict[str, list[str]] = {k: [] for k in KINDS}
    good: dict[str, tuple[float, list[str]]] = {}  # gang -> (created, pods)
    latencies: list[float] = []
    try:
        fleet.start("scheduler")
        fleet.start("podgrouper")
        deadline = time.monotonic() + 120
        while not (fleet.leading("scheduler", kube) and fleet.leading("podgrouper", kube)):
            if time.monotonic() > deadline:
                result.died = ["no leader was elected in 120 s"]
                return result
            time.sleep(0.3)
        say(f"operators up; sending {cfg.objects} accepted objects")

        def check_good(final: bool = False) -> None:
            if not good:
                return
            bound = {
                p["metadata"]["name"]
                for p in kube.get(pods_path(namespace), labelSelector="fuzz-good=true")["items"]
                if p["spec"].get("nodeName")
            }
            now = time.monotonic()
            for gang, (created, pods) in list(good.items()):
                if all(p in bound for p in pods):
                    latencies.append(now - created)
                    result.good_bound += 1
                    del good[gang]
                    for p in pods:
                        with contextlib.suppress(ApiError):
                            kube.delete_pod(namespace, p, None, grace_seconds=0)
                    with contextlib.suppress(ApiError):
                        kube.delete(podgroups_path(namespace, gang))
                elif now - created > cfg.good_within and gang not in result.good_late:
                    result.good_late.append(gang)

        i = 0
        while result.accepted < cfg.objects and result.attempted < cfg.objects * cfg.max_attempts_factor:
            i += 1
            kind = rng.choice(KINDS)
            name = f"fz-{i}"
            obj = base(kind, name, namespace, fuzz_q)
            for _ in range(rng.randrange(1, 4)):
                mutate(rng, obj, namespace, names)
            result.attempted += 1
            try:
                created = kube.create(_path(kind, namespace), obj)
            except ApiError as exc:
                if exc.status in (0, 429, 500, 503, 504):
                    result.transient += 1  # no answer under load: neither accepted nor rejected
                    continue
                result.rejected_by_kind[kind] = result.rejected_by_kind.get(kind, 0) + 1
                continue
            result.accepted += 1
            result.accepted_by_kind[kind] = result.accepted_by_kind.get(kind, 0) + 1
            names[kind].append(created["metadata"]["name"])
            if kind == "Queue":
                made_queues.append(created["metadata"]["name"])
            if kind == "RayCluster" and rng.random() < 0.4:
                with contextlib.suppress(ApiError):
                    kube.create(pods_path(namespace), _kuberay_pod(created, rng))
                    result.kuberay_pods += 1
            if result.accepted % cfg.good_every == 0:
                gang = f"good-{result.good_jobs}"
                pods = make_gang(kube, namespace, gang, 2, 1, good_q, "inference", {"fuzz-good": "true"})
                good[gang] = (time.monotonic(), pods)
                result.good_jobs += 1
            if i % 5 == 0:
                check_good()
                fleet.sample_memory()
            if i % 100 == 0:
                say(f"{result.accepted} accepted of {result.attempted}; good gangs bound {result.good_bound}")
        end = time.monotonic() + cfg.good_within
        while good and time.monotonic() < end:
            check_good()
            fleet.sample_memory()
            time.sleep(0.5)
        check_good(final=True)
        result.good_late += [g for g in good if g not in result.good_late]
        time.sleep(2.0)  # what the operators make of the last objects
        result.died = [p.identity for p in fleet.procs.values() if not p.alive]
    finally:
        result.tracebacks, result.max_rss_mb = fleet.finish()
        delete_queues(kube, made_queues)
        if latencies:
            result.good_latency_p50 = round(statistics.median(latencies), 2)
            result.good_latency_max = round(max(latencies), 2)
        result.seconds = round(time.monotonic() - t0, 1)
    return result

"""The three loops closed, with the real KubeRay operator, kai-ray's operators, Ray's autoscaler and real Ray nodes.

What is real: kube-apiserver + etcd + KWOK nodes; KubeRay's operator (``kai-scheduler`` batch scheduler) creating and
deleting pods; kai-ray's podgrouper and scheduler operators (the scheduler with its default
:class:`RayReclaim` taking its victims, and publishing the headroom itself after its cycles); Ray's
autoscaler v2 through ``python -m kai_ray.autoscaler``; a Ray head and one Ray worker node per bound worker pod. What
stands in: KWOK pods run no containers, so a small "kubelet" in the test starts a real Ray worker node
(``RAY_CLOUD_INSTANCE_ID`` = pod name) for each bound worker pod and stops it when the pod is deleted; and since the
KWOK head pod's IP leads nowhere, the reclaimer drains through the test's real Ray head instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kai_ray.headroom import contract as hr
from kai_ray.k8s.base.rest import ApiError, Kube, events_path, podgroups_path, pods_path, queues_path, ray_path
from kai_ray.k8s.podgrouping.operator import PodgrouperOperator
from kai_ray.k8s.ray import elastic, raygcs
from kai_ray.k8s.scheduling.operator import build_scheduler
from kai_ray.testing.controlplane.harness import NODE_BATCH_LABEL, ControlPlane
from kai_ray.testing.inprocess import operator_config
from tests.autoscaler.conftest import OBJECT_STORE
from tests.autoscaler.helpers import queue, raycluster, start_autoscaler, stop_process, wait_until, worker_group

pytestmark = [pytest.mark.ray, pytest.mark.kuberay, pytest.mark.slow, pytest.mark.controlplane]

WORKER_RESOURCES = {"worker": 1}


def _pods(kube: Kube, ns: str, cluster: str, kind: str = "worker") -> list[dict[str, Any]]:
    sel = f"ray.io/cluster={cluster},ray.io/node-type={kind}"
    return list(kube.get(pods_path(ns), labelSelector=sel)["items"])


def _diag(kube: Kube, ns: str) -> str:
    """What the namespace looks like, for failure messages."""
    lines = []
    for p in kube.get(pods_path(ns))["items"]:
        m, sp = p["metadata"], p["spec"]
        lines.append(
            f"pod {m['name']} node={sp.get('nodeName')} sched={sp.get('schedulerName')} "
            f"pg={(m.get('annotations') or {}).get('pod-group-name')} phase={p.get('status', {}).get('phase')}"
        )
    for pg in kube.get(podgroups_path(ns))["items"]:
        conds = [
            (c.get("type"), c.get("reason"), c.get("message")) for c in (pg.get("status") or {}).get("conditions") or []
        ]
        sched = (pg.get("status") or {}).get("schedulingConditions")
        lines.append(f"podgroup {pg['metadata']['name']} spec={pg['spec']} conditions={conds} sched={sched}")
    return "\n".join(lines)


def _live(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


class Kubelet:
    """Plays kubelet + container runtime for one RayCluster's worker pods: a real Ray node per bound pod.

    ``sync()`` runs on the test's main thread (Ray starts nodes only there); the waits below call it as they poll."""

    def __init__(self, kube: Kube, ns: str, cluster: str, ray_cluster: Any) -> None:
        self.kube, self.ns, self.cluster, self.ray = kube, ns, cluster, ray_cluster
        self.nodes: dict[str, Any] = {}
        self.started: list[str] = []
        self.stopped: list[str] = []

    def sync(self) -> Kubelet:
        pods = _pods(self.kube, self.ns, self.cluster)
        bound = {p["metadata"]["name"] for p in _live(pods) if p["spec"].get("nodeName")}
        for name in sorted(set(self.nodes) - bound):
            self.ray.remove_node(self.nodes.pop(name))
            self.stopped.append(name)
        for name in sorted(bound - set(self.nodes)):
            self.nodes[name] = self.ray.add_node(
                num_cpus=0,
                num_gpus=1,
                resources=WORKER_RESOURCES,
                object_store_memory=OBJECT_STORE,
                env_vars={"RAY_CLOUD_INSTANCE_ID": name, "RAY_NODE_TYPE_NAME": "workers"},
            )
            self.started.append(name)
        return self

    def hold(self, seconds: float) -> None:
        """Keep syncing for ``seconds``."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.sync()
            time.sleep(0.3)


class Sampler:
    """Samples the RayCluster's worker pods: every name ever seen, and how long each stayed unbound."""

    def __init__(self, kube: Kube, ns: str, cluster: str) -> None:
        self.kube, self.ns, self.cluster = kube, ns, cluster
        self.first_seen: dict[str, float] = {}
        self.bound_at: dict[str, float] = {}
        self.max_live = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="test-sampler", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(ApiError):
                live = _live(_pods(self.kube, self.ns, self.cluster))
                now = time.monotonic()
                self.max_live = max(self.max_live, len(live))
                for p in live:
                    name = p["metadata"]["name"]
                    self.first_seen.setdefault(name, now)
                    if p["spec"].get("nodeName"):
                        self.bound_at.setdefault(name, now)
            self._stop.wait(0.2)

    def pending_for(self, name: str) -> float:
        return self.bound_at.get(name, time.monotonic()) - self.first_seen[name]


@contextlib.contextmanager
def _operators(
    control_plane: ControlPlane, kube: Kube, ns: str, gpu_nodes: Any, gcs_address: str | None, ray_aware: bool
) -> Iterator[dict[str, Any]]:
    """Queues (train: 1 GPU quota, serve: 2), one 3-GPU KWOK node, kai-ray's podgrouper and scheduler operators (the
    scheduler's shrink on when ``ray_aware``, draining through ``gcs_address``) and the KubeRay operator; stopped in
    reverse order."""
    names = gpu_nodes(1, gpus=3)
    batch = kube.get(f"/api/v1/nodes/{names[0]}")["metadata"]["labels"][NODE_BATCH_LABEL]
    made_queues = [f"{ns}-root", f"{ns}-train", f"{ns}-serve"]
    kube.create(queues_path(), queue(made_queues[0]))
    kube.create(queues_path(), queue(made_queues[1], gpu_quota=1, parent=made_queues[0]))
    kube.create(queues_path(), queue(made_queues[2], gpu_quota=2, parent=made_queues[0]))
    grouper = PodgrouperOperator(operator_config(control_plane, ns, bind_workers=4, write_workers=2)).start()
    sched = build_scheduler(
        operator_config(
            control_plane,
            ns,
            node_selector={NODE_BATCH_LABEL: batch},
            bind_workers=4,
            write_workers=2,
            elastic_reclaim=ray_aware,
            drain_deadline=3.0,
            headroom_interval=0.5,
        )
    )
    reclaimer = sched.reclaimer
    assert reclaimer is not None  # suspend for RayJobs stays on; the shrink follows ``ray_aware``
    reclaimer.gcs_address = gcs_address
    sched.start()
    try:
        control_plane.start_kuberay_operator(batch_scheduler="kai-scheduler", watch_namespace=ns)
        wait_until("the operators to sync", lambda: grouper.synced() and sched.synced() and sched.is_leader(), 30)
        yield {"ns": ns, "sched": sched, "reclaimer": reclaimer, "queues": made_queues}
    finally:
        control_plane.stop_component("kuberay-operator")
        sched.stop()
        grouper.stop()
        for q in reversed(made_queues):
            with contextlib.suppress(ApiError):
                kube.delete(queues_path(q))


@pytest.fixture
def stack(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    gpu_nodes: Any,
    ray_cluster: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[dict[str, Any]]:
    """The operators with the elastic shrink, plus a Ray head whose GCS the reclaim drains through."""
    monkeypatch.setenv("RAY_enable_autoscaler_v2", "1")
    monkeypatch.setenv("ENABLE_DETERMINISTIC_HEAD_POD_NAME", "true")
    head = ray_cluster(env_vars={"RAY_CLOUD_INSTANCE_ID": "rc-head", "RAY_NODE_TYPE_NAME": "headgroup"})
    with _operators(control_plane, kube, namespace, gpu_nodes, str(head.gcs_address), ray_aware=True) as st:
        yield {**st, "head": head}


def _cluster(name: str, queue_name: str, replicas: int, min_replicas: int, autoscaling: bool) -> dict[str, Any]:
    group = worker_group("workers", replicas, min_replicas, 3, gpus=1)
    group["rayStartParams"] = {"num-cpus": "0", "num-gpus": "1", "resources": json.dumps(json.dumps(WORKER_RESOURCES))}
    body = raycluster(name, group, labels={"kai.scheduler/queue": queue_name}, autoscaling=autoscaling)
    body["spec"]["headGroupSpec"]["rayStartParams"] = {"num-cpus": "0"}
    if autoscaling:
        body["spec"]["autoscalerOptions"] = {"version": "v2", "idleTimeoutSeconds": 600}
    return body


def test_reclaim_shrinks_without_recreation_and_scale_up_stays_within_headroom(
    stack: dict[str, Any], control_plane: ControlPlane, kube: Kube, ray_env: Path
) -> None:
    import ray

    ns, head, sched = stack["ns"], stack["head"], stack["sched"]
    train, serve = stack["queues"][1], stack["queues"][2]
    sampler = Sampler(kube, ns, "rc").start()
    kubelet = Kubelet(kube, ns, "rc", head)
    proc: subprocess.Popen[bytes] | None = None
    try:
        # 1. Training takes the whole node (3 GPUs, 2 above its queue's quota of 1).
        kube.create(ray_path("RayCluster", ns), _cluster("rc", train, 3, 1, autoscaling=True))
        try:
            wait_until("3 Ray workers for rc's bound pods", lambda: len(kubelet.sync().nodes) == 3, 120, 0.3)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{_diag(kube, ns)}") from None
        ray.init(address=head.address)

        @ray.remote(num_cpus=0, resources=WORKER_RESOURCES)
        class Worker:
            def pod(self) -> str:
                return os.environ.get("RAY_CLOUD_INSTANCE_ID", "")

        actors = [Worker.remote() for _ in range(3)]
        by_pod = dict(zip(ray.get([a.pod.remote() for a in actors], timeout=60), actors, strict=True))
        assert set(by_pod) == set(kubelet.nodes)
        before = set(sampler.first_seen)

        # 2. Serving arrives in its own, in-quota queue: the scheduler reclaims two elastic training workers.
        t_reclaim = time.monotonic()
        kube.create(ray_path("RayCluster", ns), _cluster("serve", serve, 2, 2, autoscaling=False))
        wait_until(
            "serve's gang to be bound",
            lambda: (
                kubelet.sync() and len([p for p in _live(_pods(kube, ns, "serve")) if p["spec"].get("nodeName")]) == 2
            ),
            120,
            0.3,
        )
        reclaim_s = time.monotonic() - t_reclaim
        rc = kube.get(ray_path("RayCluster", ns, "rc"))
        wg = rc["spec"]["workerGroupSpecs"][0]
        assert wg["replicas"] == 1
        victims = set(wg["scaleStrategy"]["workersToDelete"])
        assert len(victims) == 2 and victims <= before
        records = wait_until(  # the record is kept once the shrink's last write is back
            "the shrink to be recorded",
            lambda: [r for r in stack["reclaimer"].records if r.kind == "shrink" and r.ok],
            30,
        )
        assert {d.status for d in records[0].drains} == {raygcs.ACCEPTED}
        wait_until("KubeRay to delete the victims", lambda: victims <= set(kubelet.sync().stopped), 60, 0.3)
        for pod in victims:
            with pytest.raises(ray.exceptions.RayActorError) as err:
                ray.get(by_pod[pod].pod.remote(), timeout=60)
            assert err.value.preempted
        (survivor,) = set(by_pod) - victims
        assert ray.get(by_pod[survivor].pod.remote(), timeout=30) == survivor

        kubelet.hold(10)  # KubeRay reconciles many times meanwhile
        recreated = set(sampler.first_seen) - before
        live_rc = {p["metadata"]["name"] for p in _live(_pods(kube, ns, "rc"))}
        print(f"\nreclaim: serve bound after {reclaim_s:.1f} s; shrink took {records[0].seconds:.1f} s; ")
        print(f"pods recreated after the reclaim: {len(recreated)}")
        assert recreated == set(), recreated
        assert live_rc == {survivor}
        pg = kube.get(
            podgroups_path(ns, next(iter(_pods(kube, ns, "rc")))["metadata"]["annotations"]["pod-group-name"])
        )
        shrink = json.loads(pg["metadata"]["annotations"][elastic.SHRINK_ANNOTATION])
        assert shrink["groups"]["workers"]["to"] == 1 and set(shrink["groups"]["workers"]["deleted"]) == victims

        # 3. The autoscaler wants more workers than the queue can get now: it is capped, no pod is created.
        ray.kill(by_pod[survivor])
        published = wait_until(
            "the scheduler to publish the headroom",
            lambda: hr.limits_from_podgroup(kube.get(podgroups_path(ns, pg["metadata"]["name"]))).headroom,
            30,
        )
        assert published.subgroups["workers"] == hr.SubgroupHeadroom(1, 0), published
        assert sched.headroom is not None and sched.headroom.writes >= 1
        log_path = ray_env / "autoscaler.log"
        proc = start_autoscaler(str(control_plane.kubeconfig_path), ns, head.gcs_address, log_path)

        release = ray_env / "release"

        @ray.remote(num_cpus=0, resources=WORKER_RESOURCES)
        def step(release: str) -> str:
            """Holds its worker until released, so three of them need three workers at once."""
            end = time.monotonic() + 300
            while not Path(release).exists() and time.monotonic() < end:
                time.sleep(0.1)
            return os.environ.get("RAY_CLOUD_INSTANCE_ID", "")

        demand = [step.remote(str(release)) for _ in range(3)]
        try:
            wait_until(
                "the autoscaler's capped scale-up to be reported",
                lambda: any(
                    e["reason"] == hr.SCALE_UP_CAPPED
                    for e in kube.get(events_path(ns), fieldSelector="involvedObject.name=rc")["items"]
                ),
                90,
            )
        except AssertionError as exc:
            Path("/tmp/kai-loop-autoscaler.log").write_text(log_path.read_text(errors="replace"))
            raise AssertionError(f"{exc}\n{log_path.read_text(errors='replace')[-4000:]}") from None
        kubelet.hold(8)
        assert kube.get(ray_path("RayCluster", ns, "rc"))["spec"]["workerGroupSpecs"][0]["replicas"] == 1
        assert {p["metadata"]["name"] for p in _live(_pods(kube, ns, "rc"))} == {survivor}

        # 4. Capacity returns (serve goes away; no garbage collector here, so its pods too): the scale-up follows.
        kube.delete(ray_path("RayCluster", ns, "serve"))
        for p in _pods(kube, ns, "serve") + _pods(kube, ns, "serve", "head"):
            with contextlib.suppress(ApiError):
                kube.delete(pods_path(ns, p["metadata"]["name"]), {"gracePeriodSeconds": 0})
        t_up = time.monotonic()
        wait_until("two more Ray workers", lambda: len(kubelet.sync().nodes) == 3, 180, 0.3)
        up_s = time.monotonic() - t_up
        release.touch()
        ran_on = ray.get(demand, timeout=120)
        assert len(set(ran_on)) == 3, ran_on
        created = set(sampler.first_seen) - before
        pending = {name: round(sampler.pending_for(name), 1) for name in created}
        print(f"scale-up after capacity returned: 3 Ray workers after {up_s:.1f} s; new pods {sorted(pending)}")
        print(f"pending pods beyond headroom: {sum(1 for s in pending.values() if s > 15)} (pending seconds {pending})")
        assert len(created) == 2 and all(s <= 15 for s in pending.values()), pending
        assert sampler.max_live <= 3
        assert proc.poll() is None, log_path.read_text(errors="replace")[-3000:]
    finally:
        stop_process(proc)
        sampler.stop()


@pytest.mark.parametrize("ray_aware", [False, True], ids=["plain-eviction", "elastic-shrink"])
def test_reclaim_recreations_with_and_without_the_shrink(
    ray_aware: bool, control_plane: ControlPlane, kube: Kube, namespace: str, gpu_nodes: Any
) -> None:
    """The loop itself, measured (no Ray processes: draining is skipped). Plain eviction of elastic workers makes
    KubeRay recreate them and the new pods stay Pending; the shrink leaves nothing to recreate."""
    ns = namespace
    with _operators(control_plane, kube, ns, gpu_nodes, None, ray_aware=ray_aware) as st:
        sampler = Sampler(kube, ns, "rc").start()
        try:
            kube.create(ray_path("RayCluster", ns), _cluster("rc", st["queues"][1], 3, 1, autoscaling=True))
            wait_until("rc's 3 workers bound", lambda: len(sampler.bound_at) == 3, 120, 0.3)
            before = set(sampler.first_seen)
            kube.create(ray_path("RayCluster", ns), _cluster("serve", st["queues"][2], 2, 2, autoscaling=False))
            wait_until(
                "serve's gang to be bound",
                lambda: len([p for p in _live(_pods(kube, ns, "serve")) if p["spec"].get("nodeName")]) == 2,
                120,
                0.3,
            )
            time.sleep(10)
            recreated = set(sampler.first_seen) - before
            pending = [p["metadata"]["name"] for p in _live(_pods(kube, ns, "rc")) if not p["spec"].get("nodeName")]
            replicas = kube.get(ray_path("RayCluster", ns, "rc"))["spec"]["workerGroupSpecs"][0]["replicas"]
        finally:
            sampler.stop()
    print(
        f"\n{'elastic shrink' if ray_aware else 'plain eviction'}: recreated {len(recreated)}, pending {len(pending)}"
    )
    if ray_aware:
        assert (len(recreated), len(pending), replicas) == (0, 0, 1)
    else:
        assert len(recreated) >= 2 and len(pending) >= 2 and replicas == 3  # the loop the shrink closes

"""Drain first: every path by which kai-ray takes a Ray pod drains its Ray node before the pod goes.

What is real: kube-apiserver + etcd with KubeRay's CRDs (the RayCluster a shrink patches, the RayJob a suspend
patches), the Eviction API, and Ray processes (``ray.cluster_utils.Cluster``: a GCS and one raylet per "pod", each
raylet carrying the pod's name as ``RAY_CLOUD_INSTANCE_ID`` as KubeRay sets it). What stands in: the scheduler's cycle
(the victims and their decisions are written here as the core writes them) and KubeRay's deletion of pods.

Each path's victims go, as victim records, through the operator's :class:`RayReclaim`; the plain eviction that its
outcomes ask for (as dispatch applies them) looks at the GCS at the moment it is called and records whether the pod's
Ray node had been drained. If any path skipped the drain, that record (or the suspend's drain record) says so and the
test fails.
"""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray import constants as c
from kai_ray.k8s.base.rest import ApiError, Kube, podgroups_path, pods_path, queues_path, ray_path
from kai_ray.k8s.ray import drainfirst
from kai_ray.k8s.ray.ray_reclaim import RayReclaim
from kai_ray.k8s.ray.raygcs import ACCEPTED
from kai_ray.k8s.ray.victims import RayOwner, Victim
from kai_ray.scheduler.decisions import Reason
from tests.autoscaler.conftest import OBJECT_STORE
from tests.autoscaler.helpers import podgroup, queue, ray_pod, raycluster, rayjob, worker_group
from tests.k8s.helpers import wait_until

pytestmark = [pytest.mark.controlplane, pytest.mark.ray, pytest.mark.slow]


def _node_states(gcs_address: str) -> dict[str, str]:
    """pod name -> ``alive``, ``draining``, ``preempted`` (exited after a PREEMPTION drain) or another death reason."""
    import ray
    from ray.core.generated import common_pb2

    client = ray._raylet.GcsClient(address=gcs_address)
    draining = set(ray._private.state.state.get_draining_nodes())
    out: dict[str, str] = {}
    for nid, info in client.get_all_node_info(timeout=10).items():
        if not info.instance_id:
            continue
        if info.state == 0:
            out[info.instance_id] = "draining" if nid.hex() in draining else "alive"
        else:
            reason = info.death_info.reason
            preempted = reason == common_pb2.NodeDeathInfo.Reason.Value("AUTOSCALER_DRAIN_PREEMPTED")
            out[info.instance_id] = "preempted" if preempted else common_pb2.NodeDeathInfo.Reason.Name(reason)
    return out


def test_every_eviction_path_drains_the_ray_node_first(ray_cluster: Any, kube: Kube, namespace: str) -> None:
    import ray

    ns = namespace
    cluster = ray_cluster()
    pods = {
        "shrink-w": ("rc-shrink", "cpu"),
        "head-h": ("rc-head", "headgroup"),
        "move-w": ("rc-move", "cpu"),
        "gang-w": ("rc-gang", "cpu"),
        "job-w": ("job-cluster", "cpu"),
        "min-w": ("rc-min", "cpu"),
    }
    for pod in pods:
        cluster.add_node(num_cpus=0, object_store_memory=OBJECT_STORE, env_vars={"RAY_CLOUD_INSTANCE_ID": pod})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)

    kube.create(queues_path(), queue(f"{ns}-q"))
    for rc in ("rc-shrink", "rc-head", "rc-move", "rc-gang", "rc-min"):
        kube.create(podgroups_path(ns), podgroup(f"pg-{rc}", queue=f"{ns}-q"))
        replicas = 1 if rc == "rc-min" else 3  # rc-min is at its minReplicas: no shrink, an eviction
        kube.create(ray_path("RayCluster", ns), raycluster(rc, worker_group("cpu", replicas, 1, 5)))
    job = kube.create(ray_path("RayJob", ns), rayjob("job", worker_group("cpu", 1, 1, 1)))
    pg_job = podgroup("pg-job", queue=f"{ns}-q")
    pg_job["metadata"]["ownerReferences"] = [
        {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "job", "uid": job["metadata"]["uid"]}
    ]
    kube.create(podgroups_path(ns), pg_job)
    # shrink-w has two siblings so that the shrink stays above minReplicas
    for pod, (rc, group) in {**pods, "shrink-w2": ("rc-shrink", "cpu"), "shrink-w3": ("rc-shrink", "cpu")}.items():
        kube.create(pods_path(ns), ray_pod(pod, rc, group, podgroup="pg-job" if rc == "job-cluster" else f"pg-{rc}"))

    evicted: dict[str, str] = {}

    def evict(v: Victim) -> None:
        evicted[v.pod] = _node_states(cluster.gcs_address).get(v.pod, "no Ray node")
        try:
            kube.create(
                f"{pods_path(v.namespace, v.pod)}/eviction",
                {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": v.pod, "namespace": ns}},
            )
        except ApiError as exc:
            if not exc.not_found:
                raise

    reclaimer = RayReclaim(
        kube, shrink=True, suspend_kinds=("RayJob",), gcs_address=lambda _ns, _rc: cluster.gcs_address
    )

    def victim(pod: str, reason: Reason, **kw: Any) -> Victim:
        rc, group = pods[pod]
        pg = "pg-job" if rc == "job-cluster" else f"pg-{rc}"
        owner = RayOwner("RayJob", "job") if rc == "job-cluster" else None
        node_type = "head" if group == "headgroup" else "worker"
        return Victim(
            ns, pod, f"uid-{pod}", f"{ns}/{pg}", pg, f"{ns}-q", reason.value, f"{ns}/burst", rc, node_type, owner,
            drain_deadline_s=20.0, **kw,
        )  # fmt: skip

    try:
        left, outcomes = reclaimer.take(
            [
                victim("shrink-w", Reason.RECLAIMED, elastic=True),  # a shrink
                victim("head-h", Reason.RECLAIMED, elastic=True),  # a head: no shrink, evicted
                victim("min-w", Reason.RECLAIMED, elastic=True),  # a shrink refused: evicted
                victim("move-w", Reason.CONSOLIDATED),  # a move
                victim("gang-w", Reason.READY_TIMEOUT, whole_gang=True),  # a RayCluster: no suspend, evicted
                victim("job-w", Reason.PREEMPTED, whole_gang=True),  # a RayJob suspended
            ]
        )
        assert left == [], "every Ray pod is the reclaimer's to drain"
        for fut in outcomes:  # as dispatch applies them
            for v in fut.result(timeout=120.0).evict:
                evict(v)
    finally:
        reclaimer.close()

    by_kind = {}
    for rec in reclaimer.records:
        by_kind.setdefault(rec.kind, []).append(rec)
    print("\nrecords:", [(r.kind, r.target, r.code, [(d.pod, d.status) for d in r.drains]) for r in reclaimer.records])
    print("node state when each pod was evicted:", evicted)

    shrink = next(r for r in by_kind["shrink"] if r.target == f"{ns}/rc-shrink")
    assert shrink.ok and [(d.pod, d.status) for d in shrink.drains] == [("shrink-w", ACCEPTED)]
    suspend = by_kind["suspend"][0]
    assert suspend.ok, suspend.message
    assert [(d.pod, d.status) for d in suspend.drains] == [("job-w", ACCEPTED)], "the suspend drained first"
    assert kube.get(ray_path("RayJob", ns, "job"))["spec"]["suspend"] is True
    assert set(evicted) == {"head-h", "move-w", "gang-w", "min-w"}
    for pod, state in evicted.items():
        assert state in ("draining", "preempted"), f"{pod} was evicted while its Ray node was {state}"
    drained = {d.pod: d.status for r in reclaimer.records for d in r.drains}
    assert drained == {p: ACCEPTED for p in pods}, drained


def test_the_drain_deadline_comes_from_the_object_then_the_queue_then_the_flag() -> None:
    def obj(kind: str, value: str | None) -> dict[str, Any]:
        ann = {} if value is None else {c.DRAIN_DEADLINE: value}
        return {"kind": kind, "metadata": {"name": kind.lower(), "annotations": ann}}

    d = drainfirst.drain_deadline
    assert d(obj("PodGroup", "45s"), obj("Queue", "2m"), 30.0) == drainfirst.DrainDeadline(45.0, "object")
    assert d(obj("PodGroup", None), obj("Queue", "2m"), 30.0) == drainfirst.DrainDeadline(120.0, "queue")
    assert d(None, None, 30.0) == drainfirst.DrainDeadline(30.0, "default")
    assert d(obj("PodGroup", "0"), obj("Queue", "2m"), 30.0).seconds == 0.0  # this gang opts out of draining
    bad = d(obj("PodGroup", "soon"), obj("Queue", "1m"), 30.0)
    assert bad.seconds == 60.0 and bad.source == "queue"
    assert "PodGroup podgroup annotations[kai-ray.io/drain-deadline]: 'soon' is not a duration" in bad.problem


def test_a_suspend_drains_the_head_last_so_ray_can_still_place_an_actor(
    ray_cluster: Any, kube: Kube, namespace: str
) -> None:
    """Ray Train v2 places its preemption watcher (an actor with no CPU) each time it starts a worker group; a suspend
    that comes then must leave it a node until the workers' drain has run its course, or the notice never comes."""
    import ray

    ns = namespace
    cluster = ray_cluster(env_vars={"RAY_CLOUD_INSTANCE_ID": "job-head"}, resources={"head": 1})
    cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE, env_vars={"RAY_CLOUD_INSTANCE_ID": "job-w"})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)

    @ray.remote(num_cpus=1)
    class Busy:  # a training worker: its node is not idle, so the drain lasts to its deadline
        def ping(self) -> str:
            return "busy"

    @ray.remote(num_cpus=0, resources={"head": 1})
    class Driver:  # the RayJob's driver and Ray Train's controller keep the head busy
        def ping(self) -> str:
            return "driving"

    @ray.remote(num_cpus=0)
    class Watcher:  # what Ray Train creates when its worker group starts
        def ping(self) -> str:
            return "watching"

    busy, driver = Busy.remote(), Driver.remote()
    assert ray.get([busy.ping.remote(), driver.ping.remote()], timeout=120) == ["busy", "driving"]

    kube.create(queues_path(), queue(f"{ns}-q"))
    job = kube.create(ray_path("RayJob", ns), rayjob("job", worker_group("cpu", 1, 1, 1)))
    pg_job = podgroup("pg-job", queue=f"{ns}-q")
    pg_job["metadata"]["ownerReferences"] = [
        {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "job", "uid": job["metadata"]["uid"]}
    ]
    kube.create(podgroups_path(ns), pg_job)
    for pod, group in (("job-head", "headgroup"), ("job-w", "cpu")):
        kube.create(pods_path(ns), ray_pod(pod, "job-cluster", group, podgroup="pg-job"))

    reclaimer = RayReclaim(kube, suspend_kinds=("RayJob",), gcs_address=lambda _ns, _rc: cluster.gcs_address)

    def victim(pod: str, node_type: str) -> Victim:
        return Victim(
            ns, pod, f"uid-{pod}", f"{ns}/pg-job", "pg-job", f"{ns}-q", Reason.PREEMPTED.value, f"{ns}/burst",
            "job-cluster", node_type, RayOwner("RayJob", "job"), whole_gang=True, drain_deadline_s=30.0,
        )  # fmt: skip

    try:
        left, outcomes = reclaimer.take([victim("job-head", "head"), victim("job-w", "worker")])
        assert left == [] and len(outcomes) == 1
        wait_until("the worker's Ray node draining", lambda: _node_states(cluster.gcs_address)["job-w"] == "draining")
        assert not outcomes[0].done(), "the suspend waits for the workers' drain"
        watcher = Watcher.remote()
        assert ray.get(watcher.ping.remote(), timeout=25) == "watching", "an actor still finds a node"
        outcome = outcomes[0].result(timeout=120.0)
    finally:
        reclaimer.close()

    suspend = outcome.records[0]
    assert suspend.ok, suspend.message
    assert [(d.pod, d.status) for d in suspend.drains] == [("job-w", ACCEPTED), ("job-head", ACCEPTED)], "head last"
    assert kube.get(ray_path("RayJob", ns, "job"))["spec"]["suspend"] is True

"""The victim path: dispatch's victim record in, the Ray path's typed outcome out, and what dispatch makes of it.

What is real: kube-apiserver + etcd with KubeRay's CRDs (the RayCluster a shrink patches, the RayJob a suspend
patches) and our PodGroup CRD; the victim records are built from cache entries read from real pod and PodGroup
objects. Ray draining is off here (``gcs_address=None``); tests/k8s/ray/test_drain_first.py drains real Ray nodes.
"""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray.k8s.base.metrics import SchedulerMetrics
from kai_ray.k8s.base.rest import Kube, podgroups_path, pods_path, ray_path
from kai_ray.k8s.ray.ray_reclaim import RayReclaim
from kai_ray.k8s.ray.victims import PendingStop, RayOwner, Result, StopOutcome, Victim, by_cluster
from kai_ray.k8s.scheduling.entries import pg_entry, pod_entry, pod_fingerprint
from kai_ray.k8s.scheduling.maxpending import max_pending_report
from kai_ray.k8s.scheduling.rayvictims import count_outcome, victim_of
from kai_ray.scheduler.decisions import Action, Evict, Reason, StopPending
from tests.autoscaler.helpers import podgroup, ray_pod, raycluster, rayjob, worker_group

WAIT = 60.0


def _victim(ns: str, pod: str, cluster: str | None, **kw: Any) -> Victim:
    fields: dict[str, Any] = {"podgroup": f"pg-{cluster}", "queue": "team-a", "reason": "Reclaimed"}
    fields.update(kw)
    node_type = fields.pop("node_type", "worker" if cluster else None)
    return Victim(ns, pod, f"uid-{pod}", f"{ns}/{fields['podgroup']}", cluster=cluster, node_type=node_type, **fields)


def test_the_victim_record_carries_what_the_cache_knows() -> None:
    """Queue from the decision, Ray labels from the pod, the owner from the PodGroup, the deadline from its
    annotation: nothing is read back later."""
    pod = ray_pod("w0", "rc", "cpu", podgroup="pg-rc")
    pod["metadata"].update(namespace="ns", uid="u-w0")
    pg = podgroup("pg-rc", queue="team-a", annotations={"kai-ray.io/drain-deadline": "7s"})
    pg["metadata"].update(namespace="ns", uid="u-pg")
    pg["metadata"]["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "job", "uid": "u-j"}]
    entry = pod_entry("ns/w0", pod, "kai-scheduler", set())
    entry.raw = pod_fingerprint(pod)  # as the cache keeps it
    e = Evict("u-w0", "ns/pg-rc", Action.RECLAIM, Reason.RECLAIMED, "ns/serve", elastic=True, queue="team-a")

    v = victim_of(entry, e, pg_entry("ns/pg-rc", pg, (), 1000), None, 30.0)

    assert (v.namespace, v.pod, v.uid, v.job, v.podgroup, v.queue) == (
        "ns",
        "w0",
        "u-w0",
        "ns/pg-rc",
        "pg-rc",
        "team-a",
    )
    assert (v.cluster, v.node_type, v.owner) == ("rc", "worker", RayOwner("RayJob", "job"))
    assert v.elastic and not v.whole_gang and v.reason == "Reclaimed"
    assert v.drain_deadline_s == 7.0
    assert v.message == "kai-ray reclaimed for ns/serve"


def test_victims_are_grouped_by_raycluster_once() -> None:
    vs = [_victim("a", "w0", "rc"), _victim("a", "w1", "rc"), _victim("a", "x", None), _victim("b", "w0", "rc")]
    grouped, others = by_cluster(vs)
    assert {k: [v.pod for v in g] for k, g in grouped.items()} == {
        ("a", "rc", ""): ["w0", "w1"],
        ("b", "rc", ""): ["w0"],
    }
    assert [v.pod for v in others] == ["x"]
    per_pg, _ = by_cluster(vs, per_podgroup=True)
    assert set(per_pg) == {("a", "rc", "pg-rc"), ("b", "rc", "pg-rc")}


@pytest.mark.controlplane
def test_what_is_no_ray_node_is_evicted_at_once(kube: Kube) -> None:
    reclaim = RayReclaim(kube, gcs_address=None)
    try:
        plain, outcomes = reclaim.take(
            [_victim("ns", "p", None), _victim("ns", "h", "rc", node_type="head", elastic=True)]
        )
    finally:
        reclaim.close()
    assert [v.pod for v in plain] == ["p", "h"] and outcomes == []


def _cluster(kube: Kube, ns: str, name: str, replicas: int, min_replicas: int, pods: list[str]) -> None:
    kube.create(podgroups_path(ns), podgroup(f"pg-{name}"))
    kube.create(ray_path("RayCluster", ns), raycluster(name, worker_group("cpu", replicas, min_replicas, 5)))
    kube.create(pods_path(ns), ray_pod(f"{name}-head", name, "headgroup", podgroup=f"pg-{name}"))
    for pod in pods:
        kube.create(pods_path(ns), ray_pod(pod, name, "cpu", podgroup=f"pg-{name}"))


@pytest.mark.controlplane
def test_a_shrink_comes_back_shrunk_and_a_refused_one_falls_back_to_eviction(kube: Kube, namespace: str) -> None:
    ns = namespace
    _cluster(kube, ns, "rc", 3, 1, ["w0", "w1", "w2"])
    _cluster(kube, ns, "rc-min", 1, 1, ["m0"])
    reclaim = RayReclaim(kube, gcs_address=None)
    try:
        plain, futures = reclaim.take(
            [_victim(ns, "w1", "rc", elastic=True), _victim(ns, "m0", "rc-min", elastic=True, queue="team-b")]
        )
        outcomes = {out.victims[0].pod: out for out in (f.result(timeout=WAIT) for f in futures)}
    finally:
        reclaim.close()

    assert plain == []
    shrunk, refused = outcomes["w1"], outcomes["m0"]
    assert shrunk.result is Result.SHRUNK and shrunk.evict == () and shrunk.release == ()
    assert kube.get(ray_path("RayCluster", ns, "rc"))["spec"]["workerGroupSpecs"][0]["replicas"] == 2
    assert refused.result is Result.FELL_BACK and [v.pod for v in refused.evict] == ["m0"]
    assert [(r.kind, r.ok) for r in refused.records] == [("shrink", False)]

    metrics = SchedulerMetrics()
    try:
        count_outcome(metrics, shrunk)
        count_outcome(metrics, refused)
        name = "kai_ray_elastic_shrinks_total"
        assert metrics.value(name, {"queue_name": "team-a", "result": "ok"}) == 1
        assert metrics.value(name, {"queue_name": "team-b", "result": "fallback"}) == 1
    finally:
        metrics.close()


@pytest.mark.controlplane
def test_a_rayjob_is_suspended_or_else_released_never_evicted(kube: Kube, namespace: str) -> None:
    ns = namespace
    kube.create(ray_path("RayJob", ns), rayjob("job", worker_group("cpu", 1, 1, 1)))
    job = RayOwner("RayJob", "job")
    gone = RayOwner("RayJob", "gone")  # cannot be suspended now (here: it does not exist)
    reclaim = RayReclaim(kube, gcs_address=None)
    try:
        plain, futures = reclaim.take(
            [
                _victim(ns, "j0", "job-rc", podgroup="pg-job", whole_gang=True, owner=job),
                _victim(ns, "g0", "gone-rc", podgroup="pg-gone", whole_gang=True, owner=gone),
            ]
        )
        outcomes = {out.victims[0].pod: out for out in (f.result(timeout=WAIT) for f in futures)}
    finally:
        reclaim.close()

    assert plain == []
    assert outcomes["j0"].result is Result.SUSPENDED and outcomes["j0"].evict == ()
    assert kube.get(ray_path("RayJob", ns, "job"))["spec"]["suspend"] is True
    deferred = outcomes["g0"]
    assert deferred.result is Result.DEFERRED and deferred.evict == ()
    assert [v.pod for v in deferred.release] == ["g0"] and deferred.records[0].deferred


@pytest.mark.controlplane
def test_a_max_pending_stop_suspends_the_owner_and_says_so(kube: Kube, namespace: str) -> None:
    ns = namespace
    kube.create(ray_path("RayJob", ns), rayjob("late", worker_group("cpu", 1, 1, 1)))
    decision = StopPending("ns/pg-late", "suspend", 100.0, 700.0, 600.0)
    reclaim = RayReclaim(kube, gcs_address=None)
    try:
        done = reclaim.stop_pending(PendingStop(decision, ns, "pg-late", RayOwner("RayJob", "late"))).result(WAIT)
        orphan = reclaim.stop_pending(PendingStop(decision, ns, "pg-x", None)).result(WAIT)
    finally:
        reclaim.close()

    assert done.applied and not done.retry
    assert kube.get(ray_path("RayJob", ns, "late"))["spec"]["suspend"] is True
    report = max_pending_report(done)
    assert report.condition["type"] == "Suspended" and report.condition["status"] == "True"
    assert report.text.startswith("pending 11m40s, beyond its max-pending-time 10m")
    assert report.annotations["kai-ray.io/suspended"] is None
    assert not orphan.applied
    refused = max_pending_report(StopOutcome(orphan.stop, False, orphan.why))
    assert refused.condition["reason"] == "MaxPendingActionRefused" and "no RayCluster" in refused.text

"""Elastic shrink and suspend patches on the real kube-apiserver, against objects validated by KubeRay's own CRDs.

What is real: kube-apiserver + etcd, KubeRay's RayCluster/RayJob/RayService CRDs (schema validation and pruning),
our PodGroup CRD, JSON-patch ``test`` semantics. Pods are created by the test with KubeRay's labels (no operator
here; the KubeRay-in-the-loop test lives in test_reclaim_kuberay_loop.py). Ray draining is skipped (``gcs_address=None``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kai_ray.k8s.base.rest import ApiError, Kube, podgroups_path, pods_path, ray_path
from kai_ray.k8s.ray import elastic, rayplan
from tests.autoscaler.helpers import podgroup, ray_pod, raycluster, rayjob, rayservice, worker_group

pytestmark = pytest.mark.controlplane


def _cluster(kube: Kube, ns: str, name: str, *groups: dict[str, Any], pods: dict[str, list[str]]) -> dict[str, Any]:
    """A RayCluster plus its head and the given worker pods (group -> pod names), all under PodGroup ``pg-<name>``."""
    kube.create(podgroups_path(ns), podgroup(f"pg-{name}"))
    rc = kube.create(ray_path("RayCluster", ns), raycluster(name, *groups))
    kube.create(pods_path(ns), ray_pod(f"{name}-head", name, "headgroup", podgroup=f"pg-{name}"))
    for group, names in pods.items():
        for pod in names:
            kube.create(pods_path(ns), ray_pod(pod, name, group, podgroup=f"pg-{name}"))
    return dict(rc)


def _group(kube: Kube, ns: str, name: str, i: int = 0) -> dict[str, Any]:
    return dict(kube.get(ray_path("RayCluster", ns, name))["spec"]["workerGroupSpecs"][i])


def test_shrink_lowers_replicas_and_lists_exactly_the_victims(kube: Kube, namespace: str) -> None:
    ns = namespace
    _cluster(kube, ns, "rc", worker_group("cpu", 3, 1, 5), pods={"cpu": ["w0", "w1", "w2"]})

    out = elastic.apply_shrink(kube, ns, "rc", ["w1"], reason="Reclaimed", message="for team-b", gcs_address=None)

    assert out.applied, out.message
    wg = _group(kube, ns, "rc")
    assert wg["replicas"] == 2
    assert wg["scaleStrategy"]["workersToDelete"] == ["w1"]
    pg = kube.get(podgroups_path(ns, "pg-rc"))
    record = json.loads(pg["metadata"]["annotations"][elastic.SHRINK_ANNOTATION])
    assert record["reason"] == "Reclaimed" and record["message"] == "for team-b"
    assert record["groups"] == {"cpu": {"from": 3, "to": 2, "deleted": ["w1"]}}

    # A second shrink while w1 still exists is refused (safe_to_scale) and changes nothing.
    again = elastic.apply_shrink(kube, ns, "rc", ["w2"], reason="Reclaimed", gcs_address=None)
    assert not again.applied and again.plan.code == rayplan.PENDING_DELETES
    assert "w1" in again.message
    assert _group(kube, ns, "rc")["replicas"] == 2

    # The same victim again is already in effect (idempotent), not an error.
    same = elastic.apply_shrink(kube, ns, "rc", ["w1"], reason="Reclaimed", gcs_address=None)
    assert not same.applied and same.in_effect

    # Once KubeRay has deleted w1, the next shrink replaces the list.
    kube.delete(pods_path(ns, "w1"), {"gracePeriodSeconds": 0})
    third = elastic.apply_shrink(kube, ns, "rc", ["w2"], reason="Reclaimed", gcs_address=None)
    assert third.applied, third.message
    wg = _group(kube, ns, "rc")
    assert wg["replicas"] == 1 and wg["scaleStrategy"]["workersToDelete"] == ["w2"]


def test_shrink_below_min_replicas_is_refused(kube: Kube, namespace: str) -> None:
    ns = namespace
    _cluster(kube, ns, "rc", worker_group("cpu", 2, 2, 4), pods={"cpu": ["w0", "w1"]})
    before = kube.get(ray_path("RayCluster", ns, "rc"))

    out = elastic.apply_shrink(kube, ns, "rc", ["w0"], reason="Reclaimed", gcs_address=None)

    assert not out.applied and out.plan.code == rayplan.BELOW_MIN_REPLICAS
    assert "minReplicas=2" in out.message and "suspend" in out.message
    after = kube.get(ray_path("RayCluster", ns, "rc"))
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_head_and_foreign_pods_are_refused(kube: Kube, namespace: str) -> None:
    ns = namespace
    _cluster(kube, ns, "rc", worker_group("cpu", 3, 1, 5), pods={"cpu": ["w0", "w1", "w2"]})
    out = elastic.apply_shrink(kube, ns, "rc", ["rc-head"], reason="Reclaimed", gcs_address=None)
    assert not out.applied and out.plan.code == rayplan.NOT_A_WORKER and "rc-head" in out.message
    assert _group(kube, ns, "rc")["replicas"] == 3


def test_multi_host_replica_goes_whole(kube: Kube, namespace: str) -> None:
    ns = namespace
    kube.create(podgroups_path(ns), podgroup("pg-tpu"))
    kube.create(ray_path("RayCluster", ns), raycluster("tpu", worker_group("slice", 3, 1, 4, hosts=2)))
    for r in range(3):
        for h in range(2):
            kube.create(pods_path(ns), ray_pod(f"s{r}-h{h}", "tpu", "slice", podgroup="pg-tpu", replica=f"slice-{r}"))

    out = elastic.apply_shrink(kube, ns, "tpu", ["s1-h0"], reason="Reclaimed", gcs_address=None)

    assert out.applied, out.message
    wg = _group(kube, ns, "tpu")
    assert wg["replicas"] == 2
    assert wg["scaleStrategy"]["workersToDelete"] == ["s1-h0", "s1-h1"]


def test_resource_version_test_op_rejects_a_stale_plan_and_apply_retries(kube: Kube, namespace: str) -> None:
    ns = namespace
    rc = _cluster(kube, ns, "rc", worker_group("cpu", 3, 1, 5), pods={"cpu": ["w0", "w1", "w2"]})
    pods = kube.get(pods_path(ns), labelSelector="ray.io/cluster=rc")["items"]
    victim = [p for p in pods if p["metadata"]["name"] == "w0"]
    stale = rayplan.plan_shrink(rc, victim, pods)
    assert stale.ok
    # Another writer (the autoscaler) changes the cluster after we read it.
    kube.json_patch(
        ray_path("RayCluster", ns, "rc"), [{"op": "add", "path": "/spec/workerGroupSpecs/0/replicas", "value": 4}]
    )
    with pytest.raises(ApiError) as err:
        kube.json_patch(ray_path("RayCluster", ns, "rc"), stale.patch or [])
    assert err.value.status in (409, 422)
    assert _group(kube, ns, "rc")["replicas"] == 4  # nothing half-applied

    class RacingKube:
        """The real client, but another writer bumps the RayCluster just before our first patch lands."""

        def __init__(self, inner: Kube) -> None:
            self.inner = inner
            self.raced = False

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def json_patch(self, path: str, ops: list[dict[str, Any]]) -> Any:
            if not self.raced and path.endswith("/rayclusters/rc"):
                self.raced = True
                self.inner.merge_patch(path, {"metadata": {"labels": {"touched": "yes"}}})
            return self.inner.json_patch(path, ops)

    racing = RacingKube(kube)
    out = elastic.apply_shrink(racing, ns, "rc", ["w0"], reason="Reclaimed", gcs_address=None)  # type: ignore[arg-type]
    assert out.applied and out.attempts == 2
    wg = _group(kube, ns, "rc")
    assert wg["replicas"] == 3 and wg["scaleStrategy"]["workersToDelete"] == ["w0"]


def test_suspend_and_resume_a_rayjob(kube: Kube, namespace: str) -> None:
    ns = namespace
    kube.create(podgroups_path(ns), podgroup("pg-job"))
    kube.create(ray_path("RayJob", ns), rayjob("job", worker_group("gpu", 2, 2, 2)))

    out = elastic.apply_suspend(kube, "RayJob", ns, "job", reason="Preempted", message="by serve", podgroup="pg-job")

    assert out.applied, out.message
    assert kube.get(ray_path("RayJob", ns, "job"))["spec"]["suspend"] is True
    ann = kube.get(podgroups_path(ns, "pg-job"))["metadata"]["annotations"]
    assert json.loads(ann[elastic.SUSPEND_ANNOTATION])["owner"] == "RayJob/job"

    back = elastic.apply_resume(kube, "RayJob", ns, "job", podgroup="pg-job")
    assert back.applied, back.message
    assert kube.get(ray_path("RayJob", ns, "job"))["spec"]["suspend"] is False
    assert elastic.SUSPEND_ANNOTATION not in (
        kube.get(podgroups_path(ns, "pg-job"))["metadata"].get("annotations") or {}
    )


def test_a_rayjob_without_shutdown_after_job_finishes_is_suspended_and_gets_its_value_back(
    kube: Kube, namespace: str
) -> None:
    ns = namespace
    kube.create(podgroups_path(ns), podgroup("pg-keep"))
    kube.create(ray_path("RayJob", ns), rayjob("keep", worker_group("gpu", 1, 1, 1), shutdown=False))
    out = elastic.apply_suspend(kube, "RayJob", ns, "keep", reason="Preempted", podgroup="pg-keep")
    assert out.applied, out.message
    job = kube.get(ray_path("RayJob", ns, "keep"))
    assert job["spec"]["suspend"] is True and job["spec"]["shutdownAfterJobFinishes"] is True
    assert job["metadata"]["annotations"][rayplan.SHUTDOWN_RESTORE] == "false"
    record = json.loads(kube.get(podgroups_path(ns, "pg-keep"))["metadata"]["annotations"][elastic.SUSPEND_ANNOTATION])
    assert "was false" in record["shutdownAfterJobFinishes"]
    back = elastic.apply_resume(kube, "RayJob", ns, "keep", podgroup="pg-keep")
    assert back.applied, back.message
    job = kube.get(ray_path("RayJob", ns, "keep"))
    assert job["spec"]["suspend"] is False and job["spec"]["shutdownAfterJobFinishes"] is False
    assert rayplan.SHUTDOWN_RESTORE not in (job["metadata"].get("annotations") or {})


def test_suspend_refusals_change_nothing(kube: Kube, namespace: str) -> None:
    ns = namespace
    body = rayjob("keep", worker_group("gpu", 1, 1, 1), shutdown=False)
    body["spec"]["deletionStrategy"] = {
        "deletionRules": [{"policy": "DeleteCluster", "condition": {"jobStatus": "SUCCEEDED"}}]
    }
    kube.create(ray_path("RayJob", ns), body)
    before = kube.get(ray_path("RayJob", ns, "keep"))
    out = elastic.apply_suspend(kube, "RayJob", ns, "keep", reason="Preempted")
    assert not out.applied and out.code == rayplan.NOT_SUSPENDABLE and "spec.deletionStrategy" in out.message
    after = kube.get(ray_path("RayJob", ns, "keep"))
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]

    # KubeRay v1.6's RayService CRD has no spec.suspend: the API server prunes it and we say so.
    kube.create(ray_path("RayService", ns), rayservice("serve", worker_group("gpu", 1, 1, 1)))
    svc = elastic.apply_suspend(kube, "RayService", ns, "serve", reason="Preempted")
    assert not svc.applied and svc.code == rayplan.NOT_SUSPENDABLE
    assert "suspend" not in kube.get(ray_path("RayService", ns, "serve"))["spec"]


def test_suspend_a_raycluster(kube: Kube, namespace: str) -> None:
    ns = namespace
    kube.create(ray_path("RayCluster", ns), raycluster("rc", worker_group("cpu", 1, 1, 2)))
    out = elastic.apply_suspend(kube, "RayCluster", ns, "rc", reason="Preempted")
    assert out.applied, out.message
    assert kube.get(ray_path("RayCluster", ns, "rc"))["spec"]["suspend"] is True
    # suspended clusters are not shrunk
    kube.create(pods_path(ns), ray_pod("w0", "rc", "cpu"))
    shrink = elastic.apply_shrink(kube, ns, "rc", ["w0"], reason="Reclaimed", gcs_address=None)
    assert not shrink.applied and shrink.plan.code == rayplan.SUSPENDED

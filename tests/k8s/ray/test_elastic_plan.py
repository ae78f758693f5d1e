"""The pure parts of elastic reclaim: shrink/suspend planning and pod -> Ray node matching (no server needed)."""

from __future__ import annotations

from typing import Any

from kai_ray.k8s.ray import raygcs, rayplan
from tests.autoscaler.helpers import ray_pod, raycluster, rayjob, worker_group


def _rc(*groups: dict[str, Any], rv: str = "7") -> dict[str, Any]:
    rc = raycluster("rc", *groups)
    rc["metadata"]["resourceVersion"] = rv
    return rc


def test_plan_covers_several_groups_and_clears_finished_lists() -> None:
    rc = _rc(worker_group("cpu", 3, 1, 5), worker_group("gpu", 2, 0, 4), worker_group("old", 1, 0, 2))
    rc["spec"]["workerGroupSpecs"][2]["scaleStrategy"] = {"workersToDelete": ["gone-pod"]}
    pods = [ray_pod(n, "rc", "cpu") for n in ("c0", "c1", "c2")] + [ray_pod(n, "rc", "gpu") for n in ("g0", "g1")]
    plan = rayplan.plan_shrink(rc, [pods[0], pods[2], pods[4]], pods)
    assert plan.ok
    assert plan.patch is not None
    assert plan.patch[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}
    ops = {(op["path"], str(op["value"])) for op in plan.patch[1:]}
    assert ops == {
        ("/spec/workerGroupSpecs/0/replicas", "1"),
        ("/spec/workerGroupSpecs/0/scaleStrategy", str({"workersToDelete": ["c0", "c2"]})),
        ("/spec/workerGroupSpecs/1/replicas", "1"),
        ("/spec/workerGroupSpecs/1/scaleStrategy", str({"workersToDelete": ["g1"]})),
        ("/spec/workerGroupSpecs/2/scaleStrategy", str({"workersToDelete": []})),
    }
    assert [(g.group, g.replicas_before, g.replicas_after) for g in plan.groups] == [("cpu", 3, 1), ("gpu", 2, 1)]


def test_replicas_are_clamped_like_kuberay_before_shrinking() -> None:
    # replicas 9 above maxReplicas 4: KubeRay runs 4, so one victim leaves 3.
    rc = _rc(worker_group("cpu", 9, 1, 4))
    pods = [ray_pod(f"c{i}", "rc", "cpu") for i in range(4)]
    plan = rayplan.plan_shrink(rc, [pods[0]], pods)
    assert plan.groups[0].replicas_before == 4 and plan.groups[0].replicas_after == 3


def test_refusals_name_the_field() -> None:
    rc = _rc(worker_group("cpu", 3, 1, 5), worker_group("slice", 2, 0, 2, hosts=2))
    other = ray_pod("x", "another", "cpu")
    unknown = ray_pod("u", "rc", "nope")
    slice_pod = ray_pod("s0", "rc", "slice")  # no replica label
    assert rayplan.plan_shrink(rc, [other]).code == rayplan.NOT_A_WORKER
    bad = rayplan.plan_shrink(rc, [unknown])
    assert bad.code == rayplan.UNKNOWN_GROUP and "'nope'" in bad.reason
    no_label = rayplan.plan_shrink(rc, [slice_pod])
    assert no_label.code == rayplan.NO_REPLICA_LABEL and "numOfHosts=2" in no_label.reason
    no_rv = raycluster("rc", worker_group("cpu", 3, 1, 5))
    assert rayplan.plan_shrink(no_rv, [ray_pod("c0", "rc", "cpu")]).code == rayplan.NO_RESOURCE_VERSION
    assert rayplan.plan_shrink(rc, []).code == rayplan.NOTHING_TO_DO


def test_terminating_pods_do_not_block_a_new_shrink() -> None:
    rc = _rc(worker_group("cpu", 2, 0, 5))
    rc["spec"]["workerGroupSpecs"][0]["scaleStrategy"] = {"workersToDelete": ["c0"]}
    c0, c1 = ray_pod("c0", "rc", "cpu"), ray_pod("c1", "rc", "cpu")
    assert rayplan.plan_shrink(rc, [c1], [c0, c1]).code == rayplan.PENDING_DELETES
    c0["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    plan = rayplan.plan_shrink(rc, [c1], [c0, c1])
    assert plan.ok and plan.groups[0].workers_to_delete == ("c1",)


def test_suspend_plans() -> None:
    job = rayjob("j", worker_group("g", 1, 1, 1))
    job["metadata"]["resourceVersion"] = "3"
    plan = rayplan.plan_suspend("RayJob", job)
    assert plan.patch == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "3"},
        {"op": "add", "path": "/spec/suspend", "value": True},
    ]
    assert rayplan.plan_resume("RayJob", job).code == rayplan.NOTHING_TO_DO
    job["spec"]["clusterSelector"] = {"ray.io/cluster": "shared"}
    assert rayplan.plan_suspend("RayJob", job).code == rayplan.NOT_SUSPENDABLE
    assert rayplan.plan_suspend("Deployment", {"metadata": {"name": "d"}}).code == rayplan.NOT_SUSPENDABLE


def _apply(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """A JSON patch applied as the API server would (the ops our plans use: test, add, remove)."""
    import copy

    out = copy.deepcopy(obj)
    for op in ops:
        *parents, leaf = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node = out
        for part in parents:
            node = node[part]
        if op["op"] == "test":
            assert node[leaf] == op["value"]
        elif op["op"] == "add":
            node[leaf] = op["value"]
        else:
            del node[leaf]
    return out


def test_a_rayjob_without_shutdown_after_job_finishes_is_suspended_with_it_and_gets_its_own_back() -> None:
    """KubeRay suspends a RayJob only with shutdownAfterJobFinishes true (ValidationFailed otherwise, for good): the
    suspend sets it in the same patch and keeps the user's value on the RayJob; the resume puts it back."""
    for original in (False, None):
        job = rayjob("j", worker_group("g", 1, 1, 1))
        job["metadata"]["resourceVersion"] = "3"
        if original is None:
            del job["spec"]["shutdownAfterJobFinishes"]
        else:
            job["spec"]["shutdownAfterJobFinishes"] = original
        plan = rayplan.plan_suspend("RayJob", job)
        assert plan.ok and plan.restored == ("false" if original is False else "unset")
        suspended = _apply(job, plan.patch or [])
        assert suspended["spec"]["suspend"] is True and suspended["spec"]["shutdownAfterJobFinishes"] is True
        assert suspended["metadata"]["annotations"][rayplan.SHUTDOWN_RESTORE] == plan.restored
        suspended["metadata"]["resourceVersion"] = "4"
        back = _apply(suspended, rayplan.plan_resume("RayJob", suspended).patch or [])
        assert back["spec"]["suspend"] is False
        assert back["spec"].get("shutdownAfterJobFinishes") == original
        assert rayplan.SHUTDOWN_RESTORE not in back["metadata"]["annotations"]
        # Lifted by someone else: only the user's value goes back.
        suspended["spec"]["suspend"] = False
        fixed = _apply(suspended, rayplan.plan_resume("RayJob", suspended).patch or [])
        assert fixed["spec"].get("shutdownAfterJobFinishes") == original and fixed["spec"]["suspend"] is False


def test_a_rayjob_with_a_deletion_strategy_cannot_be_suspended_and_is_never_preemptible() -> None:
    from kai_ray.api.ray import RayJob
    from kai_ray.podgrouper import group

    job = rayjob("j", worker_group("g", 1, 1, 1), shutdown=False)
    job["spec"]["deletionStrategy"] = {"deletionRules": [{"policy": "DeleteCluster", "condition": {}}]}
    plan = rayplan.plan_suspend("RayJob", job)
    assert plan.code == rayplan.NOT_SUSPENDABLE and "spec.deletionStrategy" in plan.reason
    pg = group(RayJob.model_validate({**job, "metadata": {"name": "j", "uid": "u", "labels": {}}}))
    assert pg.spec.preemptibility == "non-preemptible"
    job["spec"].pop("deletionStrategy")
    pg = group(RayJob.model_validate({**job, "metadata": {"name": "j", "uid": "u", "labels": {}}}))
    assert pg.spec.preemptibility == "preemptible"


def test_pods_match_ray_nodes_by_instance_id_then_unique_ip() -> None:
    nodes = [
        {"node_id": "aa", "instance_id": "w0", "ip": "10.0.0.1", "alive": True},
        {"node_id": "bb", "instance_id": "", "ip": "10.0.0.2", "alive": True},
        {"node_id": "cc", "instance_id": "", "ip": "10.0.0.3", "alive": True},
        {"node_id": "dd", "instance_id": "", "ip": "10.0.0.3", "alive": True},
        {"node_id": "ee", "instance_id": "w9", "ip": "10.0.0.9", "alive": False},
    ]
    refs: list[raygcs.PodRef] = ["w0", {"metadata": {"name": "w1"}, "status": {"podIP": "10.0.0.2"}}, "10.0.0.3", "w9"]
    got = raygcs.match_ray_nodes(nodes, refs)
    assert got == {
        "w0": ("aa", "matched"),
        "w1": ("bb", "matched"),
        "10.0.0.3": (None, raygcs.AMBIGUOUS),
        "w9": (None, raygcs.NOT_FOUND),
    }

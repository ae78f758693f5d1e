"""The scheduler's cache on its own (no API server): watch events in, core snapshots out."""

from __future__ import annotations

from typing import Any

from kai_ray.api.meta import Pod as ApiPod
from kai_ray.bridge import effective_requests
from kai_ray.k8s.base.informer import DELETE, UPSERT
from kai_ray.k8s.base.slim import slim_pod
from kai_ray.k8s.config import OperatorConfig
from kai_ray.k8s.scheduling.cache import SchedulerCache
from kai_ray.scheduler import snapshot as s
from tests.k8s.scheduling.objects import node as _node
from tests.k8s.scheduling.objects import pod as _pod
from tests.k8s.scheduling.objects import podgroup as _pg


def _queue(name: str, parent: str | None = None, gpu_quota: float = -1, gpu_limit: float = -1) -> dict[str, Any]:
    unlimited = {"quota": -1, "limit": -1}
    spec: dict[str, Any] = {
        "resources": {"gpu": {"quota": gpu_quota, "limit": gpu_limit}, "cpu": unlimited, "memory": unlimited}
    }
    if parent:
        spec["parentQueue"] = parent
    return {"metadata": {"name": name, "uid": f"q-{name}", "generation": 1}, "spec": spec}


def _cache() -> SchedulerCache:
    cache = SchedulerCache(OperatorConfig(leader_elect=False))
    cache.on_node(UPSERT, "n1", _node("n1"))
    cache.on_queue(UPSERT, "dept", _queue("dept"))
    cache.on_queue(UPSERT, "team", _queue("team", parent="dept"))
    cache.on_priority_class(UPSERT, "train", {"metadata": {"name": "train"}, "value": 50})
    cache.on_podgroup(UPSERT, "ns/g", _pg("g", 2))
    return cache


def _job(view: Any, key: str = "ns/g") -> s.Job:
    return next(j for j in view.snapshot.jobs if j.key == key)


def test_snapshot_from_events() -> None:
    cache = _cache()
    cache.on_pod(UPSERT, "ns/a", _pod("a"))
    cache.on_pod(UPSERT, "ns/b", _pod("b"))
    view = cache.build(s.SchedulerConfig())
    job = _job(view)
    assert job.min_member == 2 and job.queue == "team" and job.priority == 50
    assert sorted(p.name for p in job.pods) == ["a", "b"]
    assert all(p.phase is s.PodPhase.PENDING and p.request.gpu == 1 for p in job.pods)
    assert view.pending == 2
    assert [q.name for q in view.snapshot.queues] == ["dept", "team"]
    assert "managedFields" not in str(cache.pods["ns/a"].raw)


def test_a_binding_seen_on_the_watch_matches_a_fresh_parse() -> None:
    cache = _cache()
    cache.on_pod(UPSERT, "ns/a", _pod("a"))
    bound = _pod("a", node="n1")
    bound["metadata"]["resourceVersion"] = "2"
    cache.on_pod(UPSERT, "ns/a", bound)
    fresh = _cache()
    fresh.on_pod(UPSERT, "ns/a", bound)
    assert cache.pods["ns/a"].spod == fresh.pods["ns/a"].spod
    assert cache.pods["ns/a"].sig == fresh.pods["ns/a"].sig
    assert cache.pods["ns/a"].spod is not None and cache.pods["ns/a"].spod.phase is s.PodPhase.RUNNING


def test_assumed_bindings_and_evictions_overlay_the_snapshot_and_never_repeat() -> None:
    cache = _cache()
    cache.on_pod(UPSERT, "ns/a", _pod("a"))
    cache.on_pod(UPSERT, "ns/b", _pod("b", node="n1"))
    assert cache.assume("ns/a", "u-a", "n1")
    assert not cache.assume("ns/a", "u-a", "n1"), "a pod in flight is never bound twice"
    assert not cache.assume("ns/b", "u-b", "n1"), "a bound pod is never bound again"
    assert not cache.assume("ns/a", "other-uid", "n1"), "a recreated pod is not the one decided on"
    assert cache.mark_evicting("ns/b", "u-b")
    job = _job(cache.build(s.SchedulerConfig()))
    phases = {p.name: (p.phase, p.node) for p in job.pods}
    assert phases == {"a": (s.PodPhase.RUNNING, "n1"), "b": (s.PodPhase.RELEASING, "n1")}
    cache.forget("ns/a", "u-a")
    job = _job(cache.build(s.SchedulerConfig()))
    assert {p.name: p.phase for p in job.pods}["a"] is s.PodPhase.PENDING
    # the watch confirming the binding replaces the assumption
    assert cache.assume("ns/a", "u-a", "n1")
    cache.on_pod(UPSERT, "ns/a", _pod("a", node="n1"))
    assert "ns/a" not in cache.assumed


def test_other_pods_on_a_node_reduce_what_it_offers() -> None:
    cache = _cache()
    cache.on_pod(UPSERT, "ns/x", _pod("x", group=None, node="n1", gpus=3, scheduler="default-scheduler"))
    cache.on_pod(UPSERT, "ns/y", _pod("y", group="missing", node="n1", gpus=2))  # ours, PodGroup not there
    node = cache.build(s.SchedulerConfig()).snapshot.nodes[0]
    assert node.allocatable.gpu == 3 and node.max_pods == 108
    cache.on_pod(DELETE, "ns/x", _pod("x", group=None, node="n1", gpus=3, scheduler="default-scheduler"))
    assert cache.build(s.SchedulerConfig()).snapshot.nodes[0].allocatable.gpu == 6


def test_bad_podgroups_and_queues_are_kept_out_and_named() -> None:
    cache = _cache()
    cache.on_podgroup(UPSERT, "ns/bad", _pg("bad", 1, minSubGroup=1))
    cache.on_queue(UPSERT, "broken", _queue("broken", parent="dept", gpu_quota=10, gpu_limit=5))
    view = cache.build(s.SchedulerConfig())
    assert "ns/bad" not in {j.key for j in view.snapshot.jobs}
    assert any("spec.minSubGroup" in e for e in view.invalid_jobs["ns/bad"])
    assert any("spec.resources.gpu.quota" in e for e in view.invalid_queues["broken"])
    assert "broken" not in {q.name for q in view.snapshot.queues}


def test_unchanged_jobs_are_shared_between_snapshots() -> None:
    cache = _cache()
    cache.on_podgroup(UPSERT, "ns/h", _pg("h", 1))
    cache.on_pod(UPSERT, "ns/a", _pod("a"))
    cache.on_pod(UPSERT, "ns/c", _pod("c", group="h"))
    first = cache.build(s.SchedulerConfig())
    cache.on_pod(UPSERT, "ns/b", _pod("b"))
    second = cache.build(s.SchedulerConfig())
    assert _job(second, "ns/h") is _job(first, "ns/h")
    assert _job(second) is not _job(first) and len(_job(second).pods) == 2
    cache.on_priority_class(UPSERT, "train", {"metadata": {"name": "train"}, "value": 60})
    assert _job(cache.build(s.SchedulerConfig()), "ns/h").priority == 60


def test_a_pod_that_is_its_own_top_owner_joins_its_podgroup_before_the_stamp() -> None:
    """The scheduler admits a bare pod as soon as ``pg-<name>-<uid>`` exists, never before, and the later stamp
    changes nothing it schedules on; a pod under a Ray owner still waits for its stamp."""
    cache = _cache()
    cache.on_pod(UPSERT, "ns/solo", _pod("solo", group=None))
    ray = _pod("worker", group=None)
    ray["metadata"]["ownerReferences"] = [
        {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "rc", "uid": "rc-1", "controller": True}
    ]
    cache.on_pod(UPSERT, "ns/worker", ray)
    view = cache.build(s.SchedulerConfig())
    assert "u-solo" not in {p.uid for j in view.snapshot.jobs for p in j.pods}, "no PodGroup yet: not schedulable"
    cache.on_podgroup(UPSERT, "ns/pg-solo-u-solo", _pg("pg-solo-u-solo"))
    cache.on_podgroup(UPSERT, "ns/pg-worker-u-worker", _pg("pg-worker-u-worker"))
    view = cache.build(s.SchedulerConfig())
    assert [p.name for p in _job(view, "ns/pg-solo-u-solo").pods] == ["solo"]
    assert _job(view, "ns/pg-worker-u-worker").pods == []
    changes = cache.changes
    stamped = _pod("solo", group="pg-solo-u-solo")
    stamped["metadata"]["resourceVersion"] = "2"
    cache.on_pod(UPSERT, "ns/solo", stamped)
    assert cache.changes == changes, "the stamp of the group it is already in is not a change"
    fresh = _cache()
    fresh.on_pod(UPSERT, "ns/solo", stamped)
    assert cache.pods["ns/solo"].spod == fresh.pods["ns/solo"].spod
    assert cache.pods["ns/solo"].sig == fresh.pods["ns/solo"].sig
    other = _pod("solo", group="elsewhere")
    cache.on_pod(UPSERT, "ns/solo", other)
    assert cache.pods["ns/solo"].job_key == "ns/elsewhere", "an explicit pod-group-name wins"


def test_the_slim_pod_keeps_every_field_the_request_rule_reads() -> None:
    full = {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "containers": [{"name": "main", "image": "x", "resources": {"requests": {"cpu": "1", "amd.com/gpu": "2"}}}],
            "initContainers": [
                {"name": "side", "image": "x", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}
            ],
            "overhead": {"cpu": "500m"},
            "resources": {"requests": {"memory": "2Gi"}},
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "PodResizeInProgress", "status": "True"}],
            "containerStatuses": [{"name": "main", "allocatedResources": {"cpu": "4"}, "image": "x", "ready": True}],
        },
    }
    want = effective_requests(ApiPod.model_validate(full))
    assert want == {"cpu": 5.5, "amd.com/gpu": 2.0, "memory": 2.0 * 2**30}
    assert effective_requests(ApiPod.model_validate(slim_pod(full))) == want


def test_changes_that_cannot_alter_a_decision_do_not_wake_the_loop() -> None:
    """On the way of a preemption two pod events used to cost a whole cycle each (seconds at thousands of nodes):
    the new pod before its PodGroup exists, and each victim saying it is being deleted after kai-ray evicted it.
    Neither can change a decision, so neither wakes the loop; what they change is still in the next snapshot."""
    woke: list[int] = []
    cache = _cache()
    cache.on_change = lambda: woke.append(1)
    cache.on_pod(UPSERT, "ns/new", _pod("new", group="later"))
    assert woke == [], "a pending pod whose PodGroup does not exist yet cannot be scheduled: no cycle for it"
    cache.on_podgroup(UPSERT, "ns/later", _pg("later", 1))
    assert woke == [1], "its PodGroup arriving wakes the loop"
    assert [p.name for p in _job(cache.build(s.SchedulerConfig()), "ns/later").pods] == ["new"]
    cache.on_pod(UPSERT, "ns/held", _pod("held", group="missing", node="n1"))
    assert woke == [1, 1], "a pod that holds a node takes room from it, PodGroup or not"

    cache.on_pod(UPSERT, "ns/v", _pod("v", node="n1"))
    cache.on_pod(UPSERT, "ns/w", _pod("w", node="n1"))
    woke.clear()
    assert cache.mark_evicting("ns/v", "u-v")
    deleting = _pod("v", node="n1")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    cache.on_pod(UPSERT, "ns/v", deleting)
    assert woke == [], "our own victim being deleted: the eviction overlay already showed it releasing"
    phases = {p.name: p.phase for p in _job(cache.build(s.SchedulerConfig())).pods}
    assert phases["v"] is s.PodPhase.RELEASING and phases["w"] is s.PodPhase.RUNNING
    other = _pod("w", node="n1")
    other["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    cache.on_pod(UPSERT, "ns/w", other)
    assert woke == [1], "a pod deleted by someone else frees room the scheduler did not plan for"
    cache.on_pod(DELETE, "ns/v", deleting)
    assert woke == [1, 1], "a victim gone wakes the loop (its preemptor can now be bound)"


def test_a_pod_becoming_ready_does_not_wake_the_loop_and_one_losing_it_does() -> None:
    """After a fill at thousands of nodes the kubelets' Ready updates kept the loop cycling for minutes; becoming
    Ready only lifts a ready-timeout (whose clock keeps the periodic cycle going), so it waits for the next cycle."""
    woke: list[int] = []
    cache = _cache()
    cache.on_pod(UPSERT, "ns/a", _pod("a", node="n1"))
    cache.on_change = lambda: woke.append(1)

    def with_ready(status: str) -> dict[str, Any]:
        pod = _pod("a", node="n1")
        pod["status"]["conditions"] = [{"type": "Ready", "status": status}]
        return pod

    cache.on_pod(UPSERT, "ns/a", with_ready("True"))
    assert woke == [], "Ready: nothing to decide sooner"
    assert [p.ready for p in _job(cache.build(s.SchedulerConfig())).pods] == [True], "still read by the next cycle"
    cache.on_pod(UPSERT, "ns/a", with_ready("False"))
    assert woke == [1], "not Ready any more: a ready-timeout may now apply"

"""Upstream gangs in the scheduler's cache (no API server): an upstream PodGroup, its Workload and the pods that name
it become one core Job, with each field where :mod:`kai_ray.k8s.scheduling.upstream_gangs` says it comes from."""

from __future__ import annotations

from typing import Any

from kai_ray.k8s.base.informer import DELETE, UPSERT
from kai_ray.k8s.base.slim import slim_pod
from kai_ray.k8s.config import OperatorConfig
from kai_ray.k8s.scheduling.cache import SchedulerCache
from kai_ray.scheduler import snapshot as s


def _pg(name: str = "g", labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ns", "uid": f"g-{name}", "generation": 1, "labels": labels or {}},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, **spec},
    }


def _pod(name: str, group: str = "g", labels: dict[str, str] | None = None, priority: int | None = None) -> Any:
    spec: dict[str, Any] = {
        "schedulerName": "kai-scheduler",
        "schedulingGroup": {"podGroupName": group},
        "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
    }
    if priority is not None:
        spec["priority"] = priority
    return slim_pod(
        {
            "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "labels": labels or {}},
            "spec": spec,
            "status": {"phase": "Pending"},
        }
    )


def _cache() -> SchedulerCache:
    cache = SchedulerCache(OperatorConfig(leader_elect=False))
    cache.on_priority_class(UPSERT, "train", {"metadata": {"name": "train"}, "value": 50})
    return cache


def _jobs(cache: SchedulerCache) -> tuple[dict[str, s.Job], dict[str, list[str]]]:
    view = cache.build(s.SchedulerConfig())
    return {j.key: j for j in view.snapshot.jobs}, view.invalid_jobs


def test_pods_naming_an_upstream_podgroup_form_its_gang() -> None:
    cache = _cache()
    cache.on_upstream_podgroup(UPSERT, "ns/g", _pg(labels={"kai.scheduler/queue": "team"}, priority=75))
    cache.on_pod(UPSERT, "ns/a", _pod("a", priority=1000))
    cache.on_pod(UPSERT, "ns/b", _pod("b", priority=1000))
    job = _jobs(cache)[0]["ns/g"]
    assert (job.min_member, job.queue, job.priority) == (2, "team", 75)  # the PodGroup's priority, not the pods'
    assert sorted(p.name for p in job.pods) == ["a", "b"]
    assert job.disruption is s.Disruption.SINGLE and job.staleness_grace is not None and job.staleness_grace < 0


def test_the_queue_comes_from_the_workload_then_the_pods() -> None:
    cache = _cache()
    ref = {"workloadName": "w", "templateName": "t"}
    cache.on_upstream_podgroup(UPSERT, "ns/g", _pg(workloadRef=ref, disruptionMode={"all": {}}))
    cache.on_pod(UPSERT, "ns/a", _pod("a", labels={"kai.scheduler/queue": "from-pod"}))
    job = _jobs(cache)[0]["ns/g"]
    assert job.queue == "from-pod" and job.disruption is s.Disruption.ALL and job.staleness_grace is None
    cache.on_workload(UPSERT, "ns/w", {"metadata": {"name": "w", "labels": {"kai.scheduler/queue": "from-wl"}}})
    assert _jobs(cache)[0]["ns/g"].queue == "from-wl"
    cache.on_workload(DELETE, "ns/w", {})
    assert _jobs(cache)[0]["ns/g"].queue == "from-pod"


def test_priority_from_the_class_then_the_pods() -> None:
    cache = _cache()
    cache.on_upstream_podgroup(UPSERT, "ns/g", _pg(priorityClassName="train"))
    cache.on_upstream_podgroup(UPSERT, "ns/h", _pg("h"))
    cache.on_pod(UPSERT, "ns/a", _pod("a", priority=30))
    cache.on_pod(UPSERT, "ns/b", _pod("b", "h", priority=30))
    cache.on_pod(UPSERT, "ns/c", _pod("c", "h", priority=40))
    jobs = _jobs(cache)[0]
    assert jobs["ns/g"].priority == 50 and jobs["ns/h"].priority == 40


def test_a_podgroup_kai_ray_cannot_schedule_is_reported_and_its_pods_wait() -> None:
    cache = _cache()
    cache.on_upstream_podgroup(UPSERT, "ns/g", _pg(schedulingPolicy={"gang": {"minCount": 0}}))
    cache.on_pod(UPSERT, "ns/a", _pod("a"))
    jobs, invalid = _jobs(cache)
    assert "ns/g" not in jobs and "minCount" in invalid["ns/g"][0]
    cache.on_upstream_podgroup(UPSERT, "ns/g", {**_pg(), "metadata": {**_pg()["metadata"], "generation": 2}})
    jobs, invalid = _jobs(cache)
    assert [p.name for p in jobs["ns/g"].pods] == ["a"] and not invalid
    cache.on_upstream_podgroup(DELETE, "ns/g", {})
    assert "ns/g" not in _jobs(cache)[0]


def test_a_basic_podgroup_is_a_gang_of_one() -> None:
    """``schedulingPolicy.basic`` (a Job's default under ``WorkloadWithJob``): each pod is placed as it fits."""
    cache = _cache()
    cache.on_upstream_podgroup(UPSERT, "ns/g", _pg(schedulingPolicy={"basic": {}}))
    cache.on_pod(UPSERT, "ns/a", _pod("a"))
    cache.on_pod(UPSERT, "ns/b", _pod("b"))
    job = _jobs(cache)[0]["ns/g"]
    assert job.min_member == 1 and len(job.pods) == 2

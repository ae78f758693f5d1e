"""Suspended gangs in the scheduler's picture, on their own (no API server): when the pods KubeRay would create join
the snapshot as virtual pending pods, and when the core's verdict lifts the suspend. The end-to-end path with the real
KubeRay operator is ``tests/e2e/test_kuberay_e2e.py``."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any, cast

import yaml

from kai_ray.api.podgroup import PodGroup
from kai_ray.api.ray import RayJob
from kai_ray.k8s.base.informer import UPSERT
from kai_ray.k8s.config import OperatorConfig
from kai_ray.k8s.ray.elastic import SUSPEND_ANNOTATION
from kai_ray.k8s.scheduling.cache import SchedulerCache
from kai_ray.k8s.scheduling.resume import RESUME_HOLDOFF, SuspendedGangs, is_virtual, owner_pods, suspend_settled
from kai_ray.podgrouper import PodgrouperConfig, group
from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.snapshot import SchedulerConfig
from tests.k8s.scheduling.test_cache import _node, _queue

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "rayjob-training.yaml"
NS = "ns"


def _rayjob(suspended: bool = True, status: str = "Suspended") -> dict[str, Any]:
    job = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    job["metadata"].update(namespace=NS, uid="job-uid", resourceVersion="7")
    job["metadata"]["labels"]["kai.scheduler/queue"] = "team"
    job["spec"]["suspend"] = suspended
    job["status"] = {"jobDeploymentStatus": status}
    return job


def _podgroup(job: dict[str, Any], suspended_at: float | None) -> dict[str, Any]:
    pg = group(RayJob.model_validate(job), config=PodgrouperConfig()).to_dict()
    pg["metadata"].update(uid="pg-uid", generation=1, resourceVersion="3")
    if suspended_at is not None:
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(suspended_at))
        record = {
            "at": at,
            "reason": "Reclaimed",
            "message": "kai-ray reclaimed for ns/serve",
            "owner": "RayJob/llm-finetune",
        }
        pg["metadata"]["annotations"][SUSPEND_ANNOTATION] = json.dumps(record)
    return pg


class Setup:
    def __init__(self, gpus_per_node: int = 8, nodes: int = 4, suspended_at: float | None = None) -> None:
        self.cache = SchedulerCache(OperatorConfig(leader_elect=False))
        for i in range(nodes):
            self.cache.on_node(UPSERT, f"n{i}", _node(f"n{i}", gpus_per_node))
        self.cache.on_queue(UPSERT, "dept", _queue("dept"))
        self.cache.on_queue(UPSERT, "team", _queue("team", parent="dept"))
        self.cache.on_priority_class(UPSERT, "train", {"metadata": {"name": "train"}, "value": 50})
        self.job = _rayjob()
        self.pg = _podgroup(self.job, time.time() - 60 if suspended_at is None else suspended_at)
        self.key = f"{NS}/{self.pg['metadata']['name']}"
        self.cache.on_podgroup(UPSERT, self.key, self.pg)
        self.submitted: list[str] = []
        self.gangs = SuspendedGangs(
            cast(Any, None),  # never called: the resume work handed to ``submit`` is not run here
            self.cache,
            kinds=("RayJob",),
            namespaces=(NS,),
            grouper_config=PodgrouperConfig(),
            submit=lambda key, work: self.submitted.append(key),
            wake=lambda: None,
        )
        self.set_owner(self.job)

    def set_owner(self, job: dict[str, Any]) -> None:
        self.gangs.owners["RayJob"][0].store[f"{NS}/{job['metadata']['name']}"] = job

    def cycle(self) -> tuple[dict[str, Any], Any]:
        virtual = self.gangs.virtual_pods()
        view = self.cache.build(SchedulerConfig(), extra=virtual)
        result = run_cycle(view.snapshot)
        self.gangs.after_cycle(result, virtual)
        return virtual, result


def test_owner_pods_are_what_kuberay_creates() -> None:
    job = _rayjob()
    pg = _podgroup(job, None)
    pods = owner_pods("RayJob", job, PodGroup.model_validate(pg), "ns/pg", PodgrouperConfig())
    assert len(pods) == 5 and all(is_virtual(p.uid) for p in pods)
    head = [p for p in pods if p.is_ray_head]
    assert len(head) == 1 and head[0].subgroup == "headgroup"
    assert head[0].request.cpu == 4500  # millicores; SidecarMode: KubeRay's submitter container rides in the head
    assert sorted(p.request.gpu for p in pods) == [0, 8, 8, 8, 8]
    assert {p.subgroup for p in pods if not p.is_ray_head} == {"gpu-workers"}


def test_suspend_settled_follows_kuberay_status() -> None:
    assert suspend_settled("RayJob", _rayjob())
    assert not suspend_settled("RayJob", _rayjob(status="Suspending"))
    assert not suspend_settled("RayJob", _rayjob(suspended=False, status="Running"))
    rc = {"spec": {"suspend": True}, "status": {"conditions": [{"type": "RayClusterSuspended", "status": "True"}]}}
    assert suspend_settled("RayCluster", rc)
    rc["status"]["conditions"][0]["status"] = "False"
    assert not suspend_settled("RayCluster", rc)


def test_admitted_gang_is_resumed_once() -> None:
    st = Setup()
    virtual, result = st.cycle()
    assert len(virtual[st.key]) == 5
    assert result.jobs[st.key].scheduled
    assert st.submitted == [f"resume/{st.key}"]
    # Until KubeRay's pods exist, their room stays reserved, and no second resume is sent.
    virtual, result = st.cycle()
    assert len(virtual[st.key]) == 5 and st.submitted == [f"resume/{st.key}"]


def test_gang_that_does_not_fit_stays_suspended() -> None:
    st = Setup(gpus_per_node=4)  # 4 x 4 GPUs: the 4 x 8-GPU workers never fit
    virtual, result = st.cycle()
    assert st.key in virtual
    assert not result.jobs[st.key].scheduled
    assert st.submitted == []
    assert not any(b.job == st.key for b in result.binds if not b.pipelined and not is_virtual(b.pod))


def test_not_considered_while_just_suspended_or_still_suspending() -> None:
    st = Setup(suspended_at=time.time() - RESUME_HOLDOFF / 2)
    virtual, _ = st.cycle()
    assert virtual == {} and st.submitted == []
    st = Setup()
    st.set_owner(_rayjob(status="Suspending"))
    virtual, _ = st.cycle()
    assert virtual == {} and st.submitted == []


def test_lifted_by_someone_else_is_left_alone_and_its_record_dropped() -> None:
    st = Setup()
    st.set_owner(_rayjob(suspended=False, status="Running"))
    virtual, _ = st.cycle()
    assert virtual == {} and st.submitted == [f"unsuspended/{st.key}"]  # not resumed; the stale record goes
    # A fresh record beside an owner that still looks unsuspended is the owner's watch lagging: kept.
    st = Setup(suspended_at=time.time() - 2)
    st.set_owner(_rayjob(suspended=False, status="Running"))
    virtual, _ = st.cycle()
    assert virtual == {} and st.submitted == []


def test_a_suspended_gang_grown_to_a_billion_replicas_costs_one_template_per_group() -> None:
    """The scheduler used to build one pod object per replica for such an owner, and never came back."""
    st = Setup()
    job = _rayjob()
    job["metadata"]["resourceVersion"] = "8"
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].update(replicas=10**9, minReplicas=0, maxReplicas=10**9)
    st.set_owner(job)
    t0 = time.perf_counter()
    virtual, _result = st.cycle()
    assert time.perf_counter() - t0 < 10.0  # seconds at most under load; 10^9 pods would take hours
    assert st.key not in virtual and st.submitted == []
    assert "at most 10000 pods per gang" in st.gangs._gangs[st.key].error
    probes = st.gangs.probe_templates([st.key])[st.key]
    assert set(probes) == {"gpu-workers"} and probes["gpu-workers"].request.gpu == 8

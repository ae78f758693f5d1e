"""KAI's DRA allocate cases, run against kai-ray.

Ported from KAI-Scheduler ``pkg/scheduler/actions/integration_tests/allocate/allocate_dra_test.go``
(``TestDRAAllocation``): the setup and expected outcome of each case, re-expressed with the real ``resource.k8s.io``
objects through ``kai_ray.bridge_dra`` (no Go code copied). KAI's fake DRA objects name a device class per slice; here
each class selects the devices of the driver of the same name. Expected results are KAI's: the job's pods Running
(bound, on the node given) or Pending.
"""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray.api.dra_objects import DeviceClass, ResourceClaim, ResourceSlice
from kai_ray.api.meta import Pod as ApiPod
from kai_ray.bridge import pod_from_api
from kai_ray.bridge_dra import DraCatalog, attach
from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.snapshot import Job, Node, Preemptibility, Queue, Resources, Snapshot

pytestmark = pytest.mark.dra

GPU = "nvidia.com/gpu"  # KAI's fake device class: the name contains "gpu", so its devices are GPUs
NS = "test"


def _class(name: str) -> DeviceClass:
    return DeviceClass.model_validate(
        {"metadata": {"name": name}, "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{name}'"}}]}}
    )


def _slice(node: str, count: int, cls: str = GPU) -> ResourceSlice:
    return ResourceSlice.model_validate(
        {
            "metadata": {"name": f"{node}-gpu"},
            "spec": {
                "driver": cls,
                "nodeName": node,
                "pool": {"name": node},
                "devices": [{"name": f"dev-{i}"} for i in range(count)],
            },
        }
    )


def _claim(name: str, count: int, cls: str = GPU, queue: str | None = "queue1", reserved: int = 0) -> ResourceClaim:
    return ResourceClaim.model_validate(
        {
            "metadata": {"name": name, "namespace": NS, "labels": {"kai.scheduler/queue": queue} if queue else {}},
            "spec": {"devices": {"requests": [{"name": "req", "deviceClassName": cls, "count": count}]}},
            "status": {
                "reservedFor": [{"resource": "pods", "name": f"other-{i}", "uid": f"u-{i}"} for i in range(reserved)]
            },
        }
    )


def _run(
    jobs: dict[str, list[str | None]],
    nodes: dict[str, float],
    slices: list[ResourceSlice],
    claims: list[ResourceClaim],
    classes: tuple[str, ...] = (GPU,),
    cpu_per_task: float = 0.0,
    queue: Queue | None = None,
    preemptibility: Preemptibility | None = None,
) -> dict[str, tuple[str, list[str]]]:
    """jobs: name -> the claim of each task (None: none). Returns job -> ("Running" | "Pending", nodes)."""
    api: dict[str, ApiPod] = {}
    core_jobs = []
    for name, tasks in jobs.items():
        job = Job(namespace=NS, name=name, queue="queue1", min_member=len(tasks), preemptibility=preemptibility)
        for i, cl in enumerate(tasks):
            body: dict[str, Any] = {
                "metadata": {"name": f"{name}-{i}", "namespace": NS, "uid": f"{NS}/{name}-{i}"},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": f"{cpu_per_task}m"}}}]},
            }
            if cl:
                body["spec"]["resourceClaims"] = [{"name": "c0", "resourceClaimName": cl}]
            pod = ApiPod.model_validate(body)
            api[f"{NS}/{name}-{i}"] = pod
            job.pods.append(pod_from_api(pod, job.key))
        core_jobs.append(job)
    snap = Snapshot(
        nodes=[Node(n, Resources(0, cpu, 100e9)) for n, cpu in nodes.items()],
        queues=[queue or Queue("queue1", quota=Resources(1, -1, -1))],
        jobs=core_jobs,
    )
    attach(snap, api, DraCatalog([_class(c) for c in classes], slices, claims, []))
    res = run_cycle(snap)
    out = {}
    for name in jobs:
        placed = sorted(b.node for b in res.binds if b.job == f"{NS}/{name}")
        out[name] = ("Running" if placed and len(placed) == len(jobs[name]) else "Pending", placed)
    return out


def test_simple_pod_with_no_resource_claim() -> None:
    assert _run({"pending_job0": [None]}, {"node0": 8000}, [], [])["pending_job0"][0] == "Running"


def test_simple_pod_with_resource_claim_with_correct_queue_label() -> None:
    got = _run({"pending_job0": ["claim-0"]}, {"node0": 8000}, [_slice("node0", 1)], [_claim("claim-0", 1)])
    assert got["pending_job0"] == ("Running", ["node0"])


def test_requesting_too_many_devices() -> None:
    got = _run({"pending_job0": ["claim-0"]}, {"node0": 8000}, [_slice("node0", 1)], [_claim("claim-0", 2)])
    assert got["pending_job0"][0] == "Pending"


def test_two_pods_requesting_node_bound_device_cannot_share_a_node() -> None:
    got = _run(
        {"pending_job0": ["claim-0", "claim-0"]},
        {"node0": 1000, "node1": 1000},
        [_slice("node0", 1), _slice("node1", 1)],
        [_claim("claim-0", 1)],
        cpu_per_task=1000,
        queue=Queue("queue1", quota=Resources(1, -1, -1)),
    )
    assert got["pending_job0"][0] == "Pending"


def test_two_pods_with_claims_allocate_on_separate_nodes() -> None:
    got = _run(
        {"pending_job0": ["claim-0"], "pending_job1": ["claim-1"]},
        {"node0": 8000, "node1": 8000},
        [_slice("node0", 1), _slice("node1", 1)],
        [_claim("claim-0", 1), _claim("claim-1", 1)],
    )
    assert got["pending_job0"][0] == got["pending_job1"][0] == "Running"
    assert sorted(got["pending_job0"][1] + got["pending_job1"][1]) == ["node0", "node1"]


@pytest.mark.parametrize(
    ("reserved", "tasks", "expected"), [(255, 1, "Running"), (254, 3, "Pending"), (256, 1, "Pending")]
)
def test_claim_max_consumers(reserved: int, tasks: int, expected: str) -> None:
    """KAI's "exactly at", "partially over" and "already reached" the claim's max consumers (256)."""
    got = _run(
        {"pending_job0": ["claim-0"] * tasks},
        {"node0": 8000},
        [_slice("node0", 1)],
        [_claim("claim-0", 1, reserved=reserved)],
    )
    assert got["pending_job0"][0] == expected


@pytest.mark.parametrize("label", [None, "different-queue"])
def test_shared_claim_without_or_with_wrong_queue_label_is_blocked(label: str | None) -> None:
    got = _run({"pending_job0": ["c"]}, {"node0": 8000}, [_slice("node0", 1)], [_claim("c", 1, queue=label)])
    assert got["pending_job0"][0] == "Pending"


def test_requests_over_quota_as_non_preemptible() -> None:
    got = _run(
        {"pending_job0": ["claim-0"]},
        {"node0": 8000},
        [_slice("node0", 2)],
        [_claim("claim-0", 2)],
        preemptibility=Preemptibility.NON_PREEMPTIBLE,
    )
    assert got["pending_job0"][0] == "Pending"


def test_requests_over_limit() -> None:
    got = _run(
        {"pending_job0": ["claim-0"]},
        {"node0": 8000},
        [_slice("node0", 2)],
        [_claim("claim-0", 2)],
        queue=Queue("queue1", quota=Resources(1, -1, -1), limit=Resources(1, -1, -1)),
        preemptibility=Preemptibility.PREEMPTIBLE,
    )
    assert got["pending_job0"][0] == "Pending"


def test_non_gpu_claims_do_not_count_for_the_gpu_limit() -> None:
    got = _run(
        {"pending_job0": ["claim-0"]},
        {"node0": 8000},
        [_slice("node0", 2, "other-device-class")],
        [_claim("claim-0", 2, "other-device-class", queue=None)],
        classes=("other-device-class",),
        queue=Queue("queue1", quota=Resources(1, -1, -1), limit=Resources(1, -1, -1)),
        preemptibility=Preemptibility.PREEMPTIBLE,
    )
    assert got["pending_job0"][0] == "Running"

"""DRA in the core and the bridge: devices chosen on the node, gangs all-or-nothing, GPUs charged to queues.

The snapshots are built through ``kai_ray.bridge_dra`` from real ``resource.k8s.io`` objects, so the CEL selectors
are evaluated by cel-python exactly as the operators evaluate them.
"""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray.api.dra_objects import DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice
from kai_ray.api.meta import Pod as ApiPod
from kai_ray.bridge import pod_from_api
from kai_ray.bridge_dra import DraCatalog, attach
from kai_ray.headroom.compute import compute_headroom
from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.decisions import Reason
from kai_ray.scheduler.snapshot import Job, Node, PodPhase, Queue, Resources, Snapshot, SubGroup

pytestmark = pytest.mark.dra

GPU_CLASS = DeviceClass.model_validate(
    {
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
    }
)
H100_SELECTOR = "device.attributes['gpu.nvidia.com'].productName == 'H100'"
NIC_CLASS = DeviceClass.model_validate(
    {
        "metadata": {"name": "nic.example.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'nic'"}}]},
    }
)


def gpu_slice(node: str, n: int, product: str = "H100", memory: str = "80Gi") -> ResourceSlice:
    return ResourceSlice.model_validate(
        {
            "metadata": {"name": f"{node}-gpus"},
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": node,
                "pool": {"name": node, "resourceSliceCount": 1},
                "devices": [
                    {
                        "name": f"gpu-{i}",
                        "basic": {
                            "attributes": {"productName": {"string": product}, "index": {"int": i}},
                            "capacity": {"memory": {"value": memory}},
                        },
                    }
                    for i in range(n)
                ],
            },
        }
    )


def template(name: str, count: int = 1, selector: str | None = None, mode: str | None = None) -> ResourceClaimTemplate:
    req: dict[str, Any] = {"name": "gpu", "deviceClassName": "gpu.nvidia.com", "count": count}
    if selector:
        req["selectors"] = [{"cel": {"expression": selector}}]
    if mode:
        req["allocationMode"] = mode
        req.pop("count")
    return ResourceClaimTemplate.model_validate(
        {"metadata": {"name": name, "namespace": "ns"}, "spec": {"spec": {"devices": {"requests": [req]}}}}
    )


def api_pod(
    name: str, template_name: str | None = None, claim_name: str | None = None, status: dict[str, Any] | None = None
) -> ApiPod:
    claims: list[dict[str, str]] = []
    if template_name:
        claims.append({"name": "gpu", "resourceClaimTemplateName": template_name})
    if claim_name:
        claims.append({"name": "shared", "resourceClaimName": claim_name})
    return ApiPod.model_validate(
        {
            "metadata": {"name": name, "namespace": "ns", "uid": f"ns/{name}"},
            "spec": {
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}}],
                "resourceClaims": claims,
                **({"nodeName": "n1"} if status else {}),
            },
            **({"status": status} if status else {}),
        }
    )


def snapshot(
    jobs: dict[str, tuple[str, list[ApiPod], int]],
    slices: list[ResourceSlice],
    templates: list[ResourceClaimTemplate],
    claims: list[ResourceClaim] | None = None,
    queues: list[Queue] | None = None,
) -> Snapshot:
    nodes = sorted({sl.spec.node_name or "" for sl in slices})
    api: dict[str, ApiPod] = {}
    core_jobs = []
    for name, (queue, pods, min_member) in jobs.items():
        job = Job(namespace="ns", name=name, queue=queue, min_member=min_member)
        for p in pods:
            api[p.metadata.uid or ""] = p
            job.pods.append(pod_from_api(p, job.key))
        core_jobs.append(job)
    snap = Snapshot(
        nodes=[Node(n, Resources(0, 64000, 512e9)) for n in nodes],
        queues=queues or [Queue("q", quota=Resources(-1, -1, -1))],
        jobs=core_jobs,
    )
    attach(snap, api, DraCatalog([GPU_CLASS, NIC_CLASS], slices, claims or [], templates))
    return snap


def test_single_pod_gets_matching_devices_and_its_gpus_are_charged() -> None:
    snap = snapshot(
        {"a": ("q", [api_pod("a-0", "two-h100")], 1)},
        [gpu_slice("n1", 4, "A100"), gpu_slice("n2", 4, "H100")],
        [template("two-h100", 2, "device.attributes['gpu.nvidia.com'].productName == 'H100'")],
    )
    assert snap.nodes[0].allocatable.gpu == 4  # DRA GPUs are node capacity
    res = run_cycle(snap)
    (bind,) = res.binds
    assert bind.node == "n2"
    (alloc,) = bind.claims
    assert alloc.claim == "ns/a-0-gpu" and alloc.node == "n2"
    assert [dev for _, dev in alloc.devices] == ["gpu.nvidia.com/n2/gpu-0", "gpu.nvidia.com/n2/gpu-1"]
    assert res.queues["q"].allocated["gpu"] == 2


def test_capacity_selector_with_quantity() -> None:
    snap = snapshot(
        {"a": ("q", [api_pod("a-0", "big")], 1)},
        [gpu_slice("n1", 2, memory="40Gi"), gpu_slice("n2", 2, memory="80Gi")],
        [template("big", 1, "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('48Gi')) >= 0")],
    )
    (bind,) = run_cycle(snap).binds
    assert bind.node == "n2"


def test_gang_across_nodes_is_all_or_nothing() -> None:
    pods = [api_pod(f"g-{i}", "four") for i in range(3)]
    ok = snapshot({"g": ("q", pods, 3)}, [gpu_slice(f"n{i}", 4) for i in range(3)], [template("four", 4)])
    res = run_cycle(ok)
    assert sorted(b.node for b in res.binds) == ["n0", "n1", "n2"]
    used = [dev for b in res.binds for a in b.claims for _, dev in a.devices]
    assert len(used) == len(set(used)) == 12
    short = snapshot({"g": ("q", pods, 3)}, [gpu_slice(f"n{i}", 4) for i in range(2)], [template("four", 4)])
    res = run_cycle(short)
    assert res.binds == []
    assert not res.jobs["ns/g"].scheduled


def test_claim_no_node_satisfies_names_request_and_selector() -> None:
    sel = "device.attributes['gpu.nvidia.com'].productName == 'B200'"
    snap = snapshot({"a": ("q", [api_pod("a-0", "b200")], 1)}, [gpu_slice("n1", 8)], [template("b200", 1, sel)])
    st = run_cycle(snap).jobs["ns/a"]
    assert st.reason is Reason.NEVER_FITS
    assert "request gpu" in st.message and sel in st.message


def test_all_mode_takes_every_matching_device() -> None:
    snap = snapshot({"a": ("q", [api_pod("a-0", "whole")], 1)}, [gpu_slice("n1", 4)], [template("whole", mode="All")])
    (bind,) = run_cycle(snap).binds
    assert len(bind.claims[0].devices) == 4


def test_shared_claim_is_charged_once_and_pins_its_users_to_one_node() -> None:
    shared = ResourceClaim.model_validate(
        {
            "metadata": {"name": "shared-gpu", "namespace": "ns", "labels": {"kai.scheduler/queue": "q"}},
            "spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu.nvidia.com", "count": 2}]}},
        }
    )
    pods = [api_pod(f"s-{i}", claim_name="shared-gpu") for i in range(2)]
    snap = snapshot({"s": ("q", pods, 2)}, [gpu_slice("n1", 2), gpu_slice("n2", 2)], [], [shared])
    res = run_cycle(snap)
    assert len(res.binds) == 2 and len({b.node for b in res.binds}) == 1
    assert res.queues["q"].allocated["gpu"] == 2
    assert {b.claims[0].devices for b in res.binds} == {res.binds[0].claims[0].devices}


def test_bound_claims_hold_devices_and_preemption_frees_them() -> None:
    running = ResourceClaim.model_validate(
        {
            "metadata": {"name": "low-0-gpu", "namespace": "ns"},
            "spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu.nvidia.com", "count": 4}]}},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": f"gpu-{i}"}
                            for i in range(4)
                        ]
                    }
                },
                "reservedFor": [{"resource": "pods", "name": "low-0", "uid": "ns/low-0"}],
            },
        }
    )
    low = api_pod(
        "low-0",
        "four",
        status={"phase": "Running", "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "low-0-gpu"}]},
    )
    high = api_pod("high-0", "four")
    snap = snapshot(
        {"low": ("q", [low], 1), "high": ("q", [high], 1)}, [gpu_slice("n1", 4)], [template("four", 4)], [running]
    )
    low_job = next(j for j in snap.jobs if j.name == "low")
    assert low_job.pods[0].phase is PodPhase.RUNNING and low_job.pods[0].request.gpu == 4
    next(j for j in snap.jobs if j.name == "high").priority = 125
    res = run_cycle(snap)
    assert [e.pod for e in res.evictions] == ["ns/low-0"]
    (bind,) = res.binds
    assert bind.pipelined and bind.node == "n1"
    assert sorted(dev for _, dev in bind.claims[0].devices) == [f"gpu.nvidia.com/n1/gpu-{i}" for i in range(4)]


def test_queue_quota_counts_dra_gpus() -> None:
    queues = [Queue("q", quota=Resources(2, -1, -1), limit=Resources(2, -1, -1))]
    snap = snapshot(
        {"a": ("q", [api_pod("a-0", "four")], 1)}, [gpu_slice("n1", 8)], [template("four", 4)], queues=queues
    )
    res = run_cycle(snap)
    assert res.binds == []
    assert res.jobs["ns/a"].reason is Reason.OVER_LIMIT


def test_headroom_probes_get_their_own_claims() -> None:
    """A running DRA worker's probe copies get fresh per-pod claims: the headroom is the matching devices left, not
    the GPU count (7 free-or-held GPUs would admit 2 more workers)."""
    running = ResourceClaim.model_validate(
        {
            "metadata": {"name": "w-0-gpu", "namespace": "ns"},
            "spec": template("two", 2, H100_SELECTOR).spec.spec.model_dump(by_alias=True, exclude_none=True),
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": f"gpu-{i}"}
                            for i in range(2)
                        ]
                    }
                }
            },
        }
    )
    worker = api_pod(
        "w-0",
        "two",
        status={"phase": "Running", "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "w-0-gpu"}]},
    )
    a100 = gpu_slice("n1", 3, "A100")
    a100.spec.pool.name = "n1-a100"
    snap = snapshot(
        {"w": ("q", [worker], 1)}, [gpu_slice("n1", 4), a100], [template("two", 2, H100_SELECTOR)], [running]
    )
    job = snap.jobs[0]
    job.subgroups = [SubGroup("workers", min_member=1, max_member=8)]
    job.pods[0].subgroup = "workers"
    room = compute_headroom(snap, ["ns/w"])["ns/w"]["workers"]
    assert (room.pods, room.headroom) == (1, 1)  # 4 H100s: 2 held, 2 for one more worker; the 3 A100s do not match


def test_a_claim_not_created_yet_keeps_its_pod_waiting() -> None:
    """Against a cluster, a template's claim is made by kube-controller-manager: until then the pod waits."""
    api = api_pod("a-0", "two")
    job = Job(namespace="ns", name="a", queue="q")
    job.pods.append(pod_from_api(api, job.key))
    snap = Snapshot(
        nodes=[Node("n1", Resources(0, 64000, 512e9))], queues=[Queue("q", quota=Resources(-1, -1, -1))], jobs=[job]
    )
    attach(
        snap,
        {"ns/a-0": api},
        DraCatalog([GPU_CLASS], [gpu_slice("n1", 4)], [], [template("two", 2)]),
        make_template_claims=False,
    )
    res = run_cycle(snap)
    assert res.binds == []
    assert "claim ns/a-0-gpu does not exist (yet)" in res.jobs["ns/a"].message


def v1_template(name: str, request: dict[str, Any]) -> ResourceClaimTemplate:
    """A template in the ``resource.k8s.io/v1`` shape: an exact request nests under ``exactly``."""
    return ResourceClaimTemplate.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", **request}]}}},
        }
    )


def v1_slice(node: str, n: int, taints: list[dict[str, str]] | None = None) -> ResourceSlice:
    """GPUs in the v1 shape (attributes on the device, no ``basic``); ``taints`` on the first device."""
    devices: list[dict[str, Any]] = [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}}} for i in range(n)]
    if taints:
        devices[0]["taints"] = taints
    return ResourceSlice.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "metadata": {"name": f"{node}-gpus"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node, "pool": {"name": node}, "devices": devices},
        }
    )


EXACT_TWO = {"exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}


def test_the_v1_shape_is_scheduled_like_v1beta1() -> None:
    snap = snapshot({"a": ("q", [api_pod("a-0", "two")], 1)}, [v1_slice("n1", 4)], [v1_template("two", EXACT_TWO)])
    (bind,) = run_cycle(snap).binds
    assert [dev for _, dev in bind.claims[0].devices] == ["gpu.nvidia.com/n1/gpu-0", "gpu.nvidia.com/n1/gpu-1"]
    assert bind.pod.endswith("a-0")


@pytest.mark.parametrize(
    ("request_", "words"),
    [
        (
            {"firstAvailable": [{"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 2}]},
            "lists firstAvailable alternatives",
        ),
        (
            {"exactly": {**EXACT_TWO["exactly"], "tolerations": [{"key": "bad", "operator": "Exists"}]}},
            "tolerates device taints",
        ),
        (
            {"exactly": {**EXACT_TWO["exactly"], "capacity": {"requests": {"memory": "10Gi"}}}},
            "asks for consumable capacity",
        ),
        ({"exactly": {**EXACT_TWO["exactly"], "adminAccess": True}}, "asks for admin access"),
    ],
)
def test_a_v1_request_kai_ray_does_not_allocate_is_refused_by_name(request_: dict[str, Any], words: str) -> None:
    snap = snapshot({"a": ("q", [api_pod("a-0", "t")], 1)}, [v1_slice("n1", 4)], [v1_template("t", request_)])
    res = run_cycle(snap)
    assert res.binds == []
    msg = res.jobs["ns/a"].message
    assert f"claim ns/a-0-gpu request gpu {words}: kai-ray does not allocate that" in msg


def test_a_device_tainted_noschedule_takes_no_claim() -> None:
    taint = [{"key": "health", "value": "bad", "effect": "NoSchedule"}]
    snap = snapshot(
        {"a": ("q", [api_pod("a-0", "two")], 1)}, [v1_slice("n1", 3, taint)], [v1_template("two", EXACT_TWO)]
    )
    (bind,) = run_cycle(snap).binds
    assert [dev for _, dev in bind.claims[0].devices] == ["gpu.nvidia.com/n1/gpu-1", "gpu.nvidia.com/n1/gpu-2"]
    short = snapshot(
        {"a": ("q", [api_pod("a-0", "two")], 1)}, [v1_slice("n1", 2, taint)], [v1_template("two", EXACT_TWO)]
    )
    assert run_cycle(short).binds == []

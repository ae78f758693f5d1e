"""GPUs through Dynamic Resource Allocation, on the real kube-apiserver (``resource.k8s.io/v1``) with KWOK nodes.

Real: the API server serving the DRA API (GA, on by default), claims, their ``status`` subresource, pods' ``resourceClaims``,
bindings, evictions and watches. Stand-ins: the ResourceSlices are published by the test, as NVIDIA's DRA driver
would publish a node's GPUs (no driver runs; KWOK nodes advertise no ``nvidia.com/gpu`` here), and the claims are
created by the test under the names kube-controller-manager's resourceclaim controller would give them, so pods
name them directly (``resourceClaimName``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kai_ray.k8s.base.rest import ApiError, Kube, podgroups_path, pods_path, queues_path
from tests.k8s.helpers import bound, condition, events, pod_body, podgroup, podgroup_body, wait_until

pytestmark = [pytest.mark.controlplane, pytest.mark.dra]

NodePool = Callable[..., tuple[list[str], dict[str, str]]]
API = "/apis/resource.k8s.io/v1"
H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def slices(kube: Kube) -> Iterator[Callable[[str, int, str], None]]:
    """``slices(node, n, product)`` publishes ``n`` GPUs of node ``node`` as the DRA driver would."""
    made: list[str] = []

    def publish(node: str, n: int, product: str = H100) -> None:
        name = f"{node}-gpu.nvidia.com"
        kube.create(
            f"{API}/resourceslices",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": name},
                "spec": {
                    "driver": "gpu.nvidia.com",
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {"name": f"gpu-{i}", "attributes": {"productName": {"string": product}}} for i in range(n)
                    ],
                },
            },
        )
        made.append(name)

    with contextlib.suppress(ApiError):
        kube.create(
            f"{API}/deviceclasses",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": "gpu.nvidia.com"},
                "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
            },
        )
    yield publish
    for name in made:
        with contextlib.suppress(ApiError):
            kube.delete(f"{API}/resourceslices/{name}")


def make_claim(kube: Kube, ns: str, name: str, count: int, queue: str, selector: str | None = None) -> None:
    """A named claim, so (as KAI requires of a shared GPU claim) labelled with the queue of the pods using it."""
    exactly: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com", "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    request = {"name": "gpu", "exactly": exactly}
    kube.create(
        f"{API}/namespaces/{ns}/resourceclaims",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "labels": {"kai.scheduler/queue": queue}},
            "spec": {"devices": {"requests": [request]}},
        },
    )


def claim(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return kube.get(f"{API}/namespaces/{ns}/resourceclaims/{name}")  # type: ignore[no-any-return]


def claiming_pod(kube: Kube, ns: str, name: str, group: str, claim_name: str, priority: str | None = None) -> None:
    body = pod_body(name, 0, group=group)
    body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}
    if priority:
        body["spec"]["priorityClassName"] = priority
    kube.create(pods_path(ns), body)


def gang(kube: Kube, ns: str, name: str, claims: list[str], queue: str, priority: str = "train") -> list[str]:
    kube.create(podgroups_path(ns), podgroup_body(name, len(claims), queue, priority))
    names = [f"{name}-{i}" for i in range(len(claims))]
    for pod, cl in zip(names, claims, strict=True):
        claiming_pod(kube, ns, pod, name, cl, priority)
    return names


def devices(c: dict[str, Any]) -> list[tuple[str, str]]:
    alloc = (c.get("status") or {}).get("allocation") or {}
    return sorted((r["pool"], r["device"]) for r in (alloc.get("devices") or {}).get("results") or [])


def reserved(c: dict[str, Any]) -> list[str]:
    return sorted(r["name"] for r in (c.get("status") or {}).get("reservedFor") or [])


def test_single_pod_gets_matching_devices_charged_and_released(
    kube: Kube, namespace: str, queues: Any, node_pool: NodePool, slices: Any, run_scheduler: Any, priority_classes: Any
) -> None:
    nodes, selector = node_pool(2, gpus=0)
    slices(nodes[0], 4, "NVIDIA A100-SXM4-40GB")
    slices(nodes[1], 4, H100)
    team = queues("team", gpu_quota=8)
    run_scheduler(node_selector=selector)
    make_claim(kube, namespace, "a-0-gpu", 2, team, f"device.attributes['gpu.nvidia.com'].productName == '{H100}'")
    gang(kube, namespace, "a", ["a-0-gpu"], team)

    assert wait_until("the pod to be bound", lambda: bound(kube, namespace, ["a-0"]), 30) == {"a-0": nodes[1]}
    c = claim(kube, namespace, "a-0-gpu")
    assert devices(c) == [(nodes[1], "gpu-0"), (nodes[1], "gpu-1")]
    assert reserved(c) == ["a-0"]
    q = wait_until(
        "queue status with the claimed GPUs",
        lambda: (lambda st: st if (st.get("allocated") or {}).get("nvidia.com/gpu") == "2" else None)(
            kube.get(queues_path(team)).get("status") or {}
        ),
        30,
    )
    assert q["allocated"]["nvidia.com/gpu"] == "2"

    kube.delete(f"{pods_path(namespace)}/a-0", {"gracePeriodSeconds": 0})
    released = wait_until(
        "the claim to be released",
        lambda: (lambda cl: cl if not reserved(cl) and not devices(cl) else None)(claim(kube, namespace, "a-0-gpu")),
        30,
    )
    assert "allocation" not in released["status"]


def test_gang_across_nodes_and_a_shared_claim(
    kube: Kube, namespace: str, queues: Any, node_pool: NodePool, slices: Any, run_scheduler: Any, priority_classes: Any
) -> None:
    nodes, selector = node_pool(2, gpus=0)
    for n in nodes:
        slices(n, 4)
    team = queues("team", gpu_quota=16)
    run_scheduler(node_selector=selector)
    make_claim(kube, namespace, "g-0-gpu", 4, team)
    make_claim(kube, namespace, "g-1-gpu", 4, team)
    names = gang(kube, namespace, "g", ["g-0-gpu", "g-1-gpu"], team)
    placed = wait_until(
        "the gang to be bound", lambda: (lambda b: b if len(b) == 2 else None)(bound(kube, namespace, names))
    )
    assert sorted(placed.values()) == sorted(nodes)
    for pod, node in placed.items():
        assert {pool for pool, _ in devices(claim(kube, namespace, f"{pod}-gpu"))} == {node}

    # Nothing is left: a gang sharing one claim of 1 GPU waits ...
    make_claim(kube, namespace, "shared", 1, team)
    shared = gang(kube, namespace, "s", ["shared", "shared"], team)
    wait_until(
        "the shared-claim gang to be unschedulable",
        lambda: (condition(podgroup(kube, namespace, "s"), "Scheduled") or {}).get("status") == "False",
    )
    assert bound(kube, namespace, shared) == {}
    # ... until the first gang goes: then both its pods land on the one node holding the shared claim's device.
    for pod in names:
        kube.delete(f"{pods_path(namespace)}/{pod}", {"gracePeriodSeconds": 0})
    placed = wait_until(
        "the shared gang to be bound", lambda: (lambda b: b if len(b) == 2 else None)(bound(kube, namespace, shared))
    )
    assert len(set(placed.values())) == 1
    c = claim(kube, namespace, "shared")
    assert reserved(c) == ["s-0", "s-1"] and len(devices(c)) == 1


def test_a_claim_no_node_satisfies_names_request_and_selector(
    kube: Kube, namespace: str, queues: Any, node_pool: NodePool, slices: Any, run_scheduler: Any, priority_classes: Any
) -> None:
    nodes, selector = node_pool(1, gpus=0)
    slices(nodes[0], 8)
    team = queues("team", gpu_quota=8)
    run_scheduler(node_selector=selector)
    sel = "device.attributes['gpu.nvidia.com'].productName == 'B200'"
    make_claim(kube, namespace, "b-0-gpu", 1, team, sel)
    gang(kube, namespace, "b", ["b-0-gpu"], team)
    cond = wait_until(
        "Scheduled=False naming the request",
        lambda: (lambda cd: cd if cd and cd.get("status") == "False" else None)(
            condition(podgroup(kube, namespace, "b"), "Scheduled")
        ),
    )
    assert cond["reason"] == "NeverFits"
    assert "request gpu" in cond["message"] and sel in cond["message"]
    assert devices(claim(kube, namespace, "b-0-gpu")) == []


def test_preemption_frees_devices(
    kube: Kube, namespace: str, queues: Any, node_pool: NodePool, slices: Any, run_scheduler: Any, priority_classes: Any
) -> None:
    nodes, selector = node_pool(1, gpus=0)
    slices(nodes[0], 4)
    team = queues("team", gpu_quota=4)
    run_scheduler(node_selector=selector)
    make_claim(kube, namespace, "low-0-gpu", 4, team)
    gang(kube, namespace, "low", ["low-0-gpu"], team, "train")
    wait_until("the low-priority pod to be bound", lambda: bound(kube, namespace, ["low-0"]))
    make_claim(kube, namespace, "high-0-gpu", 4, team)
    gang(kube, namespace, "high", ["high-0-gpu"], team, "inference")
    wait_until("the high-priority pod to be bound", lambda: bound(kube, namespace, ["high-0"]), 60)
    assert bound(kube, namespace, ["low-0"]) == {}
    assert len(devices(claim(kube, namespace, "high-0-gpu"))) == 4
    wait_until("the victim's claim to be released", lambda: not devices(claim(kube, namespace, "low-0-gpu")), 30)


def test_a_template_claim_is_scheduled_once_its_claim_exists(
    kube: Kube, namespace: str, queues: Any, node_pool: NodePool, slices: Any, run_scheduler: Any, priority_classes: Any
) -> None:
    """The pod names a ResourceClaimTemplate; the test then does what kube-controller-manager's resourceclaim
    controller does (not run by the harness): creates the pod's claim from the template and names it in the pod's
    ``status.resourceClaimStatuses``. Until then the pod waits, saying which claim it waits for."""
    nodes, selector = node_pool(1, gpus=0)
    slices(nodes[0], 4)
    team = queues("team", gpu_quota=4)
    run_scheduler(node_selector=selector)
    spec = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}]}}
    kube.create(
        f"{API}/namespaces/{namespace}/resourceclaimtemplates",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "two"},
            "spec": {"spec": spec},
        },
    )
    kube.create(podgroups_path(namespace), podgroup_body("t", 1, team))
    body = pod_body("t-0", 0, group="t")
    body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "two"}]
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}
    pod = kube.create(pods_path(namespace), body)
    cond = wait_until(
        "the pod to wait for its claim",
        lambda: (lambda cd: cd if cd and cd.get("status") == "False" else None)(
            condition(podgroup(kube, namespace, "t"), "Scheduled")
        ),
    )
    assert "does not exist (yet)" in cond["message"]
    kube.create(
        f"{API}/namespaces/{namespace}/resourceclaims",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "name": "t-0-gpu-x7k2p",
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": "t-0",
                        "uid": pod["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": spec,
        },
    )
    kube.merge_patch(
        f"{pods_path(namespace)}/t-0/status",
        {"status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "t-0-gpu-x7k2p"}]}},
    )
    wait_until("the pod to be bound", lambda: bound(kube, namespace, ["t-0"]), 30)
    c = claim(kube, namespace, "t-0-gpu-x7k2p")
    assert len(devices(c)) == 2 and reserved(c) == ["t-0"]


def test_a_first_available_claim_is_refused_with_an_event_and_stays_unallocated(
    kube: Kube, namespace: str, queues: Any, node_pool: NodePool, slices: Any, run_scheduler: Any, priority_classes: Any
) -> None:
    """kai-ray does not allocate a v1 prioritized list (``firstAvailable``): the pod waits and says so, rather than
    being scheduled as if the request asked for nothing."""
    nodes, selector = node_pool(1, gpus=0)
    slices(nodes[0], 4)
    team = queues("team", gpu_quota=4)
    run_scheduler(node_selector=selector)
    alternatives = [{"name": "two", "deviceClassName": "gpu.nvidia.com", "count": 2}]
    kube.create(
        f"{API}/namespaces/{namespace}/resourceclaims",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "f-0-gpu", "labels": {"kai.scheduler/queue": team}},
            "spec": {"devices": {"requests": [{"name": "gpu", "firstAvailable": alternatives}]}},
        },
    )
    gang(kube, namespace, "f", ["f-0-gpu"], team)
    want = "claim {}/f-0-gpu request gpu lists firstAvailable alternatives: kai-ray does not allocate that"
    ev = wait_until(
        "an Unschedulable event naming firstAvailable",
        lambda: [e for e in events(kube, namespace, reason="Unschedulable") if want.format(namespace) in e["message"]],
        60,
    )
    assert ev
    assert bound(kube, namespace, ["f-0"]) == {}
    assert devices(claim(kube, namespace, "f-0-gpu")) == []

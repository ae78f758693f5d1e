"""An autoscaling RayCluster grouped in Kubernetes' own workload API, gang-scheduled by kube-scheduler and by kai-ray.

Real: kube-apiserver 1.37 with ``GenericWorkload`` on and ``scheduling.k8s.io/v1beta1`` served; kube-scheduler 1.37
with the gate on (its default profile: the gang plugin places a PodGroup's pods in one pass); KubeRay's operator,
which makes the RayCluster's pods (the head with its autoscaler sidecar: in-tree autoscaling on); kai-ray's podgrouper
with ``--upstream-gangs``, writing the Workload and PodGroup and serving its admission webhook over TLS, which the
API server calls for each new Ray pod; kai-ray's scheduler; KWOK nodes. KubeRay's own integration for this API
(``kubernetes-was``) skips autoscaling clusters; here the podgrouper groups one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from kai_ray.k8s.base.rest import ApiError, Kube, pods_path, queues_path, ray_path
from kai_ray.k8s.podgrouping import admission
from kai_ray.k8s.podgrouping.operator import PodgrouperOperator
from kai_ray.k8s.podgrouping.upstream_writer import upstream_path
from kai_ray.k8s.scheduling.operator import build_scheduler
from kai_ray.podgrouper.workload_api import min_count
from kai_ray.testing import kai_upstream
from kai_ray.testing.controlplane import build
from kai_ray.testing.controlplane.harness import (
    NODE_BATCH_LABEL,
    ControlPlane,
    free_port,
    kuberay_crd_files,
    our_crd_dir,
)
from kai_ray.testing.inprocess import operator_config
from kai_ray.testing.testbed import queue_body
from tests.k8s.helpers import kube_with_priority_classes, wait_until

pytestmark = [pytest.mark.controlplane, pytest.mark.kuberay, pytest.mark.slow]

GATE = "GenericWorkload"
WAIT = 120.0  # generous: CI's two cores may be busy


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    args = [f"--feature-gates={GATE}=true", "--runtime-config=scheduling.k8s.io/v1beta1=true"]
    with ControlPlane(crds=[our_crd_dir(), *kuberay_crd_files()], apiserver_extra_args=args) as cp:
        yield cp


@pytest.fixture(scope="module")
def kube(plane: ControlPlane) -> Iterator[Kube]:
    k = kube_with_priority_classes(plane)
    yield k
    k.close()


def _raycluster(name: str, scheduler: str | None, queue: str = "default-queue") -> dict[str, Any]:
    def template(gpus: int) -> dict[str, Any]:
        limits = {"cpu": "1", "memory": "1Gi", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
        spec: dict[str, Any] = {
            "containers": [
                {"name": "ray", "image": "rayproject/ray:2.60.0", "resources": {"requests": limits, "limits": limits}}
            ]
        }
        if scheduler:
            spec["schedulerName"] = scheduler
        return {"spec": spec}

    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "labels": {"kai.scheduler/queue": queue}},
        "spec": {
            "rayVersion": "2.60.0",
            "enableInTreeAutoscaling": True,
            "headGroupSpec": {"rayStartParams": {}, "template": template(0)},
            "workerGroupSpecs": [
                {
                    "groupName": "gpu",
                    "replicas": 2,
                    "minReplicas": 2,
                    "maxReplicas": 4,
                    "rayStartParams": {},
                    "template": template(1),
                }
            ],
        },
    }


def _pods(kube: Kube, ns: str, cluster: str) -> list[dict[str, Any]]:
    items = kube.get(pods_path(ns), labelSelector=f"ray.io/cluster={cluster}")["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _podgrouper(plane: ControlPlane, ns: str, scheduler: str) -> PodgrouperOperator:
    port = free_port()
    op = PodgrouperOperator(
        operator_config(
            plane,
            ns,
            scheduler_name=scheduler,
            upstream_gangs=True,
            webhook_port=port,
            webhook_url=f"https://127.0.0.1:{port}{admission.PATH}",
        )
    ).start()
    wait_until("the podgrouper to lead and sync", lambda: op.is_leader() and op.synced(), 60)
    return op


def _upstream_gang(kube: Kube, ns: str, cluster: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Workload and the PodGroup the podgrouper wrote for RayCluster ``cluster`` (named as its KAI PodGroup)."""

    def both() -> tuple[dict[str, Any], dict[str, Any]] | None:
        for pg in kube.get(upstream_path("podgroups", ns))["items"]:
            if any(r.get("name") == cluster for r in pg["metadata"].get("ownerReferences") or []):
                try:
                    return kube.get(upstream_path("workloads", ns, pg["metadata"]["name"])), pg
                except ApiError as exc:
                    if not exc.not_found:
                        raise
        return None

    found = wait_until("the upstream Workload and PodGroup", both, WAIT)
    assert found is not None
    return found


def test_kube_scheduler_gang_schedules_an_autoscaling_raycluster_grouped_upstream(
    plane: ControlPlane, kube: Kube
) -> None:
    ns = plane.new_namespace(prefix="upstream-kube")
    nodes = plane.create_gpu_nodes(1, gpus=1)  # room for the head and one worker: not for the gang of 3
    scheduler = kai_upstream.spawn(
        "kube-scheduler-upstream",
        [
            str(build.ensure("kube-scheduler")),
            f"--kubeconfig={plane.kubeconfig_path}",
            f"--feature-gates={GATE}=true",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            "--v=2",
        ],
        plane.workdir / "logs" if plane.workdir else plane.kubeconfig_path.parent,
        plane.env(),
    )
    grouper = _podgrouper(plane, ns, "default-scheduler")
    plane.start_kuberay_operator(batch_scheduler=None, watch_namespace=ns)
    try:
        kube.create(ray_path("RayCluster", ns), _raycluster("auto", None))
        workload, pg = _upstream_gang(kube, ns, "auto")
        assert min_count(pg) == 3 and min_count(workload) == 3, "head + minReplicas 2"
        assert pg["metadata"]["annotations"]["kai-ray.io/max-member"] == "5", "head + maxReplicas 4"
        assert workload["spec"]["controllerRef"] == {"apiGroup": "ray.io", "kind": "RayCluster", "name": "auto"}

        pods = wait_until("KubeRay's 3 pods", lambda: p if len(p := _pods(kube, ns, "auto")) >= 3 else None, WAIT)
        assert {p["spec"].get("schedulingGroup", {}).get("podGroupName") for p in pods} == {pg["metadata"]["name"]}, (
            "every Ray pod names the gang (the podgrouper's admission webhook)"
        )
        assert {(p["spec"].get("priorityClassName"), p["spec"].get("priority")) for p in pods} == {("train", 50)}, (
            "the gang's PriorityClass on every pod: kube-scheduler wants the group's priority on all its pods"
        )
        head = next(p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "head")
        assert any(c["name"] == "autoscaler" for c in head["spec"]["containers"]), "in-tree autoscaling is on"

        def unschedulable() -> bool:
            return all(
                any(
                    c.get("type") == "PodScheduled"
                    and c.get("status") == "False"
                    and c.get("reason") == "Unschedulable"
                    for c in (p.get("status") or {}).get("conditions") or []
                )
                for p in _pods(kube, ns, "auto")
            )

        wait_until("kube-scheduler to find the gang does not fit", unschedulable, WAIT)
        assert not [p for p in _pods(kube, ns, "auto") if p["spec"].get("nodeName")], "no pod of the gang bound alone"

        nodes += plane.create_gpu_nodes(1, gpus=1)
        wait_until(
            "kube-scheduler to bind the whole gang",
            lambda: len([p for p in _pods(kube, ns, "auto") if p["spec"].get("nodeName")]) == 3,
            WAIT,
        )
    finally:
        plane.stop_component("kuberay-operator")
        grouper.stop()
        scheduler.stop()
        plane.clear_namespace(ns)
        plane.delete_nodes(nodes)
        with contextlib.suppress(ApiError):
            kube.delete(queues_path(f"{ns}-q"))


def test_kai_ray_schedules_the_same_raycluster_grouped_upstream(plane: ControlPlane, kube: Kube) -> None:
    ns = plane.new_namespace(prefix="upstream-kai")
    nodes = plane.create_gpu_nodes(2, gpus=1)
    batch = kube.get(f"/api/v1/nodes/{nodes[0]}")["metadata"]["labels"][NODE_BATCH_LABEL]
    grouper = _podgrouper(plane, ns, "kai-scheduler")
    sched = build_scheduler(operator_config(plane, ns, node_selector={NODE_BATCH_LABEL: batch})).start()
    plane.start_kuberay_operator(batch_scheduler="kai-scheduler", watch_namespace=ns)
    try:
        wait_until("the scheduler to lead and sync", lambda: sched.is_leader() and sched.synced(), 60)
        kube.create(queues_path(), queue_body(f"{ns}-q"))
        kube.create(ray_path("RayCluster", ns), _raycluster("auto", "kai-scheduler", f"{ns}-q"))
        _, pg = _upstream_gang(kube, ns, "auto")
        assert min_count(pg) == 3
        wait_until(
            "kai-ray to bind the whole gang",
            lambda: len([p for p in _pods(kube, ns, "auto") if p["spec"].get("nodeName")]) == 3,
            WAIT,
        )
        pods = _pods(kube, ns, "auto")
        assert {p["spec"].get("schedulingGroup", {}).get("podGroupName") for p in pods} == {pg["metadata"]["name"]}
        assert {p["spec"]["schedulerName"] for p in pods} == {"kai-scheduler"}
    finally:
        plane.stop_component("kuberay-operator")
        sched.stop()
        grouper.stop()
        plane.clear_namespace(ns)
        plane.delete_nodes(nodes)
        with contextlib.suppress(ApiError):
            kube.delete(queues_path(f"{ns}-q"))

"""Our Queue/PodGroup CRDs and KubeRay's CRDs, as served by the real kube-apiserver."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kai_ray.api.podgroup import PodGroup, PodGroupSpec, SubGroup
from kai_ray.api.queue import Queue, QueueResource, QueueResources, QueueSpec
from kai_ray.testing.controlplane.harness import ControlPlane, kuberay_crd_dir, our_crd_dir

GROUP = "scheduling.run.ai"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"

KINDS = {
    "Queue": (GROUP, "v2", "queues", False),
    "PodGroup": (GROUP, "v2alpha2", "podgroups", True),
    "RayCluster": ("ray.io", "v1", "rayclusters", True),
    "RayJob": ("ray.io", "v1", "rayjobs", True),
    "RayService": ("ray.io", "v1", "rayservices", True),
}


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _create(api: Any, obj: dict[str, Any], namespace: str | None = None, dry_run: str | None = None) -> Any:
    group, version, plural, namespaced = KINDS[obj["kind"]]
    custom: Any = client.CustomObjectsApi(api)
    if namespaced:
        return custom.create_namespaced_custom_object(group, version, namespace, plural, obj, dry_run=dry_run)
    return custom.create_cluster_custom_object(group, version, plural, obj, dry_run=dry_run)


def _table(plane: ControlPlane, path: str) -> dict[str, str]:
    """The server-side printer columns of one object (what ``kubectl get`` prints), as {column: cell}."""
    table = plane.request(path, headers={"Accept": TABLE})
    names = [c["name"] for c in table["columnDefinitions"]]
    (row,) = table["rows"]
    return {n: "" if v is None else str(v) for n, v in zip(names, row["cells"], strict=True)}


def _queue(name: str, gpu_quota: float, parent: str | None = None) -> Queue:
    return Queue(
        metadata={"name": name},
        spec=QueueSpec(
            parent_queue=parent,
            priority=120,
            display_name="Team A",
            reclaim_min_runtime="5m",
            resources=QueueResources(gpu=QueueResource(quota=gpu_quota, limit=-1, over_quota_weight=2)),
        ),
    )


def test_queue_round_trips_with_status_and_columns(control_plane: ControlPlane, kube_api: Any) -> None:
    custom: Any = client.CustomObjectsApi(kube_api)
    parent = _unique("dept")
    leaf = _unique("team")
    _create(kube_api, _queue(parent, -1).to_dict())
    created = _create(kube_api, _queue(leaf, 4, parent=parent).to_dict())
    try:
        got = Queue.model_validate(created)
        assert got.spec.parent_queue == parent
        assert got.spec.resources is not None and got.spec.resources.gpu.quota == 4
        assert got.spec.resources.gpu.over_quota_weight == 2
        assert got.spec.reclaim_min_runtime == "5m"

        status = {
            "status": {
                "allocated": {"nvidia.com/gpu": "3", "cpu": "1500m"},
                "requested": {"nvidia.com/gpu": "5"},
                "fairShare": {"nvidia.com/gpu": "4"},
                "conditions": [{"type": "OverQuota", "status": "False", "reason": "WithinQuota"}],
            }
        }
        custom.patch_cluster_custom_object_status(GROUP, "v2", "queues", leaf, status)
        after = custom.get_cluster_custom_object(GROUP, "v2", "queues", leaf)
        assert after["status"]["allocated"]["nvidia.com/gpu"] == "3"
        assert after["spec"] == created["spec"], "the status subresource must not touch spec"

        row = _table(control_plane, f"/apis/{GROUP}/v2/queues/{leaf}")
        assert row["Parent"] == parent
        assert row["Priority"] == "120"
        assert float(row["GPU-Quota"]) == 4
        assert row["GPU-Allocated"] == "3"
        assert row["GPU-FairShare"] == "4"
    finally:
        for name in (leaf, parent):
            custom.delete_cluster_custom_object(GROUP, "v2", "queues", name)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"resources": {"gpu": {"quota": "lots"}}}, "spec.resources.gpu.quota"),
        ({"priority": "high", "resources": {}}, "spec.priority"),
        ({"parentQueue": "x"}, "spec.resources"),
    ],
)
def test_queue_rejects_structurally_invalid(control_plane: ControlPlane, kube_api: Any, spec: Any, field: str) -> None:
    body = {"apiVersion": f"{GROUP}/v2", "kind": "Queue", "metadata": {"name": _unique("bad")}, "spec": spec}
    with pytest.raises(client.ApiException) as exc:
        _create(kube_api, body)
    assert exc.value.status == 422
    assert field in str(exc.value.body)


def _podgroup(name: str) -> PodGroup:
    return PodGroup(
        metadata={"name": name, "labels": {"kai.scheduler/queue": "team-a"}},
        spec=PodGroupSpec(
            min_member=3,
            queue="team-a",
            priority_class_name="train",
            preemptibility="preemptible",
            mark_unschedulable=True,
            scheduling_backoff=1,
            preemption_delay="30s",
            staleness_grace_period="60s",
            topology_constraint={"topology": "dc", "preferredTopologyLevel": "rack"},
            sub_groups=[
                SubGroup(name="headgroup", min_member=1),
                SubGroup(name="workers", min_member=2, topology_constraint={"requiredTopologyLevel": "rack"}),
            ],
        ),
    )


def test_podgroup_round_trips_with_status_and_columns(
    control_plane: ControlPlane, kube_api: Any, namespace: str
) -> None:
    custom: Any = client.CustomObjectsApi(kube_api)
    sent = _podgroup("pg-train").to_dict()
    created = _create(kube_api, sent, namespace)
    assert created["spec"] == sent["spec"], "nothing may be pruned from a PodGroup kai-ray writes"
    got = PodGroup.model_validate(created)
    assert got.spec.sub_groups is not None and [s.name for s in got.spec.sub_groups] == ["headgroup", "workers"]

    status = {
        "status": {
            "phase": "Pending",
            "pending": 3,
            "schedulingConditions": [
                {
                    "type": "UnschedulableOnNodePool",
                    "nodePool": "default",
                    "status": "True",
                    "transitionID": "1",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                    "reasons": [
                        {
                            "reason": "OverLimit",
                            "message": "queue team-a would exceed its GPU limit",
                            "details": {
                                "queueDetails": {
                                    "name": "team-a",
                                    "queueResourceLimits": {"nvidia.com/gpu": "4"},
                                    "podGroupRequestedResources": {"nvidia.com/gpu": "6"},
                                }
                            },
                        }
                    ],
                }
            ],
            "resourcesStatus": {"requested": {"nvidia.com/gpu": "6"}},
        }
    }
    updated = custom.patch_namespaced_custom_object_status(
        GROUP, "v2alpha2", namespace, "podgroups", "pg-train", status
    )
    assert updated["status"] == status["status"], "nothing may be pruned from the status kai-ray writes"
    PodGroup.model_validate(updated)

    row = _table(control_plane, f"/apis/{GROUP}/v2alpha2/namespaces/{namespace}/podgroups/pg-train")
    assert row["Queue"] == "team-a"
    assert row["MinMember"] == "3"
    assert row["Phase"] == "Pending"
    assert row["Pending-Reason"] == "OverLimit"
    assert "GPU limit" in row["Message"]


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"minMember": "two"}, "spec.minMember"),
        ({"minMember": -1}, "spec.minMember"),
        ({"preemptibility": "sometimes"}, "spec.preemptibility"),
        ({"subGroups": [{"minMember": 1}]}, "spec.subGroups[0].name"),
        ({"subGroups": [{"name": "a", "minMember": 1}, {"name": "a", "minMember": 2}]}, "spec.subGroups[1]"),
        ({"markUnschedulable": "yes"}, "spec.markUnschedulable"),
    ],
)
def test_podgroup_rejects_structurally_invalid(
    control_plane: ControlPlane, kube_api: Any, namespace: str, patch: dict[str, Any], field: str
) -> None:
    body = {
        "apiVersion": f"{GROUP}/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "bad"},
        "spec": {"queue": "q", **patch},
    }
    with pytest.raises(client.ApiException) as exc:
        _create(kube_api, body, namespace)
    assert exc.value.status == 422
    assert field in str(exc.value.body)


def test_unknown_podgroup_field_is_refused_under_strict_validation(
    control_plane: ControlPlane, kube_api: Any, namespace: str
) -> None:
    """KAI has no maxMember; a closed schema makes the server say so instead of storing it."""
    body = {
        "apiVersion": f"{GROUP}/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "typo"},
        "spec": {"queue": "q", "minMember": 1, "maxMember": 4},
    }
    custom: Any = client.CustomObjectsApi(kube_api)
    with pytest.raises(client.ApiException) as exc:
        custom.create_namespaced_custom_object(
            GROUP, "v2alpha2", namespace, "podgroups", body, field_validation="Strict"
        )
    assert exc.value.status == 400
    assert "maxMember" in str(exc.value.body)


def test_kuberay_crds_are_established(control_plane: ControlPlane, kube_api: Any) -> None:
    ext: Any = client.ApiextensionsV1Api(kube_api)
    for plural in ("rayclusters", "rayjobs", "rayservices"):
        crd = ext.read_custom_resource_definition(f"{plural}.ray.io")
        assert any(c.type == "Established" and c.status == "True" for c in crd.status.conditions)
        assert "v1" in [v.name for v in crd.spec.versions if v.served]


def _samples(*names: str) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for name in names:
        path = Path(kuberay_crd_dir()).parents[1] / "samples" / name
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


@pytest.mark.parametrize(
    "sample",
    ["ray-cluster.sample.yaml", "ray-cluster.kai-scheduler.yaml", "ray-job.sample.yaml", "ray-service.sample.yaml"],
)
def test_kuberay_samples_pass_server_side_dry_run(
    control_plane: ControlPlane, kube_api: Any, namespace: str, sample: str
) -> None:
    """KubeRay's own samples (its KAI sample includes our Queue kind) are accepted by the real CRDs, without storing."""
    docs = [d for d in _samples(sample) if d["kind"] in KINDS]
    assert docs, f"{sample} has no kind we serve"
    for doc in docs:
        created = _create(kube_api, doc, namespace, dry_run="All")
        assert created["metadata"]["name"] == doc["metadata"]["name"]
        assert "uid" in created["metadata"]
    custom: Any = client.CustomObjectsApi(kube_api)
    assert custom.list_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters")["items"] == []


def test_kuberay_crd_rejects_structurally_invalid_raycluster(
    control_plane: ControlPlane, kube_api: Any, namespace: str
) -> None:
    (doc,) = _samples("ray-cluster.sample.yaml")
    doc["spec"]["workerGroupSpecs"][0]["replicas"] = "many"
    with pytest.raises(client.ApiException) as exc:
        _create(kube_api, doc, namespace, dry_run="All")
    assert exc.value.status == 422
    assert "replicas" in str(exc.value.body)


def test_reapplying_our_crds_is_idempotent(control_plane: ControlPlane, kube_api: Any) -> None:
    """The session's CRDs came from the etcd seed; applying them again goes through server-side apply (409 path)."""
    ext: Any = client.ApiextensionsV1Api(kube_api)
    before = ext.read_custom_resource_definition("queues.scheduling.run.ai")
    names = control_plane.apply_crds([our_crd_dir()])
    assert sorted(names) == ["podgroups.scheduling.run.ai", "queues.scheduling.run.ai"]
    after = ext.read_custom_resource_definition("queues.scheduling.run.ai")
    assert after.metadata.uid == before.metadata.uid
    assert after.spec.versions[0].additional_printer_columns == before.spec.versions[0].additional_printer_columns

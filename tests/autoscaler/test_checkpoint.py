"""Ray-native scheduling: a Ray program records its checkpoints on the owning Ray object with its pod's service account.

Real kube-apiserver with RBAC and KubeRay's CRDs; the recorder runs as a service account holding exactly the Role of
``examples/ray-native/checkpoint-rbac.yaml``."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray import constants as c
from kai_ray.autoscaler.checkpoint import CheckpointRecorder
from kai_ray.k8s.base.rest import Kube, pods_path, ray_path
from kai_ray.testing.controlplane.harness import ControlPlane
from tests.autoscaler.helpers import ray_pod

pytestmark = [pytest.mark.raynative, pytest.mark.controlplane]

RBAC = Path(__file__).resolve().parents[2] / "examples" / "ray-native" / "checkpoint-rbac.yaml"
HEAD = {"template": {"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.52.0"}]}}}


def _as(control_plane: ControlPlane, kube: Kube, ns: str, sa: str, rbac: bool) -> Kube:
    from kubernetes import client

    kube.create(f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": sa}})
    if rbac:
        base = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}"
        for doc in yaml.safe_load_all(RBAC.read_text()):
            if doc["kind"] == "RoleBinding":
                doc["subjects"] = [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]
            kube.create(f"{base}/{'roles' if doc['kind'] == 'Role' else 'rolebindings'}", doc)
    token = kube.create(f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token", {"spec": {"expirationSeconds": 600}})
    cfg = client.Configuration()
    cfg.host = control_plane.server
    cfg.ssl_ca_cert = str(control_plane.ca_path)
    cfg.api_key = {"authorization": token["status"]["token"]}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    return Kube(client.ApiClient(cfg))


def _rayjob_with_cluster(kube: Kube, ns: str) -> dict[str, Any]:
    job = kube.create(
        ray_path("RayJob", ns),
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayJob",
            "metadata": {"name": "train"},
            "spec": {"entrypoint": "python train.py", "rayClusterSpec": {"headGroupSpec": HEAD}},
        },
    )
    owner = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "name": "train",
        "uid": job["metadata"]["uid"],
        "controller": True,
    }
    kube.create(
        ray_path("RayCluster", ns),
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": "train-abc", "ownerReferences": [owner]},
            "spec": {"headGroupSpec": HEAD},
        },
    )
    kube.create(pods_path(ns), ray_pod("train-abc-head", "train-abc", "headgroup"))
    return job


def test_the_owning_rayjob_gets_the_checkpoint_time(control_plane: ControlPlane, kube: Kube, namespace: str) -> None:
    _rayjob_with_cluster(kube, namespace)
    sa_kube = _as(control_plane, kube, namespace, "ray-train", rbac=True)
    rec = CheckpointRecorder(kube=sa_kube, pod="train-abc-head", namespace=namespace)
    when = datetime(2026, 11, 27, 10, 30, tzinfo=UTC)
    assert rec.record(when) is True
    assert rec.target() == ("RayJob", "train")
    ann = kube.get(ray_path("RayJob", namespace, "train"))["metadata"]["annotations"]
    assert ann[c.LAST_CHECKPOINT] == "2026-11-27T10:30:00Z"
    assert rec.record(datetime(2026, 11, 27, 10, 40, tzinfo=UTC)) is True
    ann = kube.get(ray_path("RayJob", namespace, "train"))["metadata"]["annotations"]
    assert ann[c.LAST_CHECKPOINT] == "2026-11-27T10:40:00Z"


def test_a_standalone_raycluster_is_annotated_itself(control_plane: ControlPlane, kube: Kube, namespace: str) -> None:
    kube.create(
        ray_path("RayCluster", namespace),
        {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "nb"}, "spec": {"headGroupSpec": HEAD}},
    )
    kube.create(pods_path(namespace), ray_pod("nb-head", "nb", "headgroup"))
    sa_kube = _as(control_plane, kube, namespace, "ray-nb", rbac=True)
    assert CheckpointRecorder(kube=sa_kube, pod="nb-head", namespace=namespace).record() is True
    assert c.LAST_CHECKPOINT in kube.get(ray_path("RayCluster", namespace, "nb"))["metadata"]["annotations"]


def test_without_the_role_training_goes_on_and_nothing_is_written(
    control_plane: ControlPlane, kube: Kube, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    _rayjob_with_cluster(kube, namespace)
    sa_kube = _as(control_plane, kube, namespace, "no-rbac", rbac=False)
    assert CheckpointRecorder(kube=sa_kube, pod="train-abc-head", namespace=namespace).record() is False
    assert "could not record the checkpoint" in caplog.text
    meta = kube.get(ray_path("RayJob", namespace, "train"))["metadata"]
    assert c.LAST_CHECKPOINT not in (meta.get("annotations") or {})

"""A K8sJobMode RayJob's submitter, found by its owners, with the real KubeRay operator.

KubeRay (without ``--batch-scheduler``, whose kai-scheduler plugin refuses K8sJobMode) creates the RayCluster and,
once it is ready, the submitter as a batch Job the RayJob controls; the Job's pod carries no ``ray.io/group`` label.
The manifest is ``examples/headline/rayjob-training-cpu.yaml`` as shipped (its submitter template has no hand label),
changed only in namespace and queue.

Real: kube-apiserver + etcd, KWOK nodes (pods turn Running and Ready without running anything), KubeRay's operator,
kai-ray's podgrouper and scheduler. Stand-in: no kube-controller-manager runs, so the test plays the Job controller
and creates the Job's pod from its template, owned by the Job, as that controller does.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray.k8s.base.rest import Kube, podgroups_path, pods_path, ray_path
from kai_ray.testing.controlplane.harness import ControlPlane
from tests.k8s.helpers import wait_until

pytestmark = [pytest.mark.controlplane, pytest.mark.kuberay, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "headline" / "rayjob-training-cpu.yaml"


def _rayjob(namespace: str, queue: str) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d and d["kind"] == "RayJob"]
    doc = copy.deepcopy(doc)
    doc["metadata"]["namespace"] = namespace
    doc["metadata"]["labels"]["kai.scheduler/queue"] = queue
    return doc


def _job_pod(job: dict[str, Any]) -> dict[str, Any]:
    """The pod the Job controller makes of a Job: its template, the controller's labels, owned by the Job."""
    meta, template = job["metadata"], copy.deepcopy(job["spec"]["template"])
    uid = meta["uid"]
    labels = {
        **((template.get("metadata") or {}).get("labels") or {}),
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": meta["name"],
        "controller-uid": uid,
        "job-name": meta["name"],
    }
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": meta["name"],
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{meta['name']}-",
            "labels": labels,
            "annotations": (template.get("metadata") or {}).get("annotations") or {},
            "ownerReferences": [owner],
        },
        "spec": template["spec"],
    }


@pytest.fixture
def kuberay(control_plane: ControlPlane, namespace: str):
    control_plane.start_kuberay_operator(batch_scheduler=None, watch_namespace=namespace)
    yield
    control_plane.stop_component("kuberay-operator")


def test_k8sjobmode_submitter_without_a_label_joins_its_rayjobs_podgroup_and_is_scheduled(
    kube: Kube,
    namespace: str,
    queues: Any,
    node_pool: Any,
    run_podgrouper: Any,
    run_scheduler: Any,
    priority_classes: Any,
    kuberay: None,
) -> None:
    _, selector = node_pool(1, gpus=8)
    queues("ml-platform", gpu_quota=8)
    training_q = queues("training", gpu_quota=4, parent="ml-platform")
    run_podgrouper()
    run_scheduler(node_selector=selector)

    rayjob = _rayjob(namespace, training_q)
    name = rayjob["metadata"]["name"]
    assert "metadata" not in rayjob["spec"]["submitterPodTemplate"], "the example carries no hand label"
    kube.create(ray_path("RayJob", namespace), rayjob)

    job = wait_until(
        "KubeRay to create the submitter Job once the gang runs",
        lambda: next(iter(kube.get(f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]), None),
        180,
        0.5,
    )
    owner = next(r for r in job["metadata"]["ownerReferences"] if r.get("controller"))
    assert (owner["apiVersion"], owner["kind"], owner["name"]) == ("ray.io/v1", "RayJob", name)
    # the label the podgrouper's Job informer selects on (and the one KubeRay 1.6 adds beside it)
    assert job["metadata"]["labels"]["app.kubernetes.io/created-by"] == "kuberay-operator"
    assert job["metadata"]["labels"].get("ray.io/originated-from-crd") == "RayJob"
    assert "ray.io/group" not in ((job["spec"]["template"].get("metadata") or {}).get("labels") or {})

    created = kube.create(pods_path(namespace), _job_pod(job))
    pod_name = created["metadata"]["name"]
    pg = wait_until(
        "the RayJob's PodGroup",
        lambda: next(
            (
                g
                for g in kube.get(podgroups_path(namespace))["items"]
                if any(r["kind"] == "RayJob" and r["name"] == name for r in g["metadata"].get("ownerReferences") or [])
            ),
            None,
        ),
    )
    assert "submitter" in {sg["name"] for sg in pg["spec"].get("subGroups") or []}
    pod = wait_until(
        "the submitter pod to be stamped into the RayJob's submitter subgroup and bound",
        lambda: (
            lambda p: (
                p
                if p["spec"].get("nodeName")
                and (p["metadata"].get("labels") or {}).get("kai.scheduler/subgroup-name") == "submitter"
                else None
            )
        )(kube.get(pods_path(namespace, pod_name))),
        60,
    )
    assert pod["metadata"]["annotations"]["pod-group-name"] == pg["metadata"]["name"]
    assert "ray.io/group" not in pod["metadata"]["labels"]

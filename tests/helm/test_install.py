"""The chart on a real kube-apiserver: `helm install` is accepted (CRDs, RBAC, PriorityClasses, Queues), every example
is accepted by the real CRDs (server-side dry-run against KubeRay's CRDs from its Go module), and the chart's
ServiceAccount token can do what the operators need and nothing the chart does not grant.

This uses a control plane of its own, so the chart's cluster-scoped objects (PriorityClasses, default queues,
ClusterRoles) never collide with other tests' objects.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray.testing.controlplane import build
from kai_ray.testing.controlplane.harness import ControlPlane, kuberay_crd_files

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "kai-ray"
RELEASE, NS = "rel", "kai-system"
SA = "rel-kai-ray"

pytestmark = pytest.mark.controlplane


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    cp = ControlPlane(kwok=False)
    cp.start()
    try:
        cp.apply_crds(kuberay_crd_files())
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="module")
def installed(plane: ControlPlane) -> ControlPlane:
    helm = build.ensure("helm")
    out = subprocess.run(
        [
            str(helm),
            "install",
            RELEASE,
            str(CHART),
            "--namespace",
            NS,
            "--create-namespace",
            "--kubeconfig",
            str(plane.kubeconfig_path),
            "--set",
            "scheduler.queuePriorityReclaim=true",
            "--set",
            "image.repository=registry.example.com/kai-ray",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return plane


def _api(plane: ControlPlane) -> Any:
    return plane.api_client()


def test_install_creates_crds_rbac_priority_classes_and_queues(installed):
    from kubernetes import client

    api = _api(installed)
    crds = {c.metadata.name: c for c in client.ApiextensionsV1Api(api).list_custom_resource_definition().items}
    for name in ("queues.scheduling.run.ai", "podgroups.scheduling.run.ai"):
        conds = {c.type: c.status for c in crds[name].status.conditions}
        assert conds.get("Established") == "True", name
    pcs = {p.metadata.name: p.value for p in client.SchedulingV1Api(api).list_priority_class().items}
    assert {k: pcs[k] for k in ("train", "build-preemptible", "build", "inference")} == {
        "train": 50,
        "build-preemptible": 75,
        "build": 100,
        "inference": 125,
    }
    queues = client.CustomObjectsApi(api).list_cluster_custom_object("scheduling.run.ai", "v2", "queues")["items"]
    assert {q["metadata"]["name"] for q in queues} >= {"default-parent-queue", "default-queue"}
    deploys = client.AppsV1Api(api).list_namespaced_deployment(NS).items
    assert {d.metadata.name for d in deploys} == {"rel-kai-ray-podgrouper", "rel-kai-ray-scheduler"}
    assert client.RbacAuthorizationV1Api(api).read_cluster_role("rel-kai-ray").rules


def _example_docs() -> list[dict[str, Any]]:
    docs = []
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def test_every_example_is_accepted_by_the_real_crds(installed):
    from kubernetes import client

    api = _api(installed)
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    docs = _example_docs()
    assert {d["kind"] for d in docs} >= {"Queue", "RayJob", "RayService", "RayCluster"}
    for ns in {d["metadata"].get("namespace") for d in docs} - {None}:
        core.create_namespace({"metadata": {"name": ns}})
    for doc in docs:
        group, version = doc["apiVersion"].split("/")
        plural = doc["kind"].lower() + "s"
        if doc["kind"] == "Queue":
            custom.create_cluster_custom_object(group, version, plural, doc, dry_run="All")
        else:
            custom.create_namespaced_custom_object(
                group, version, doc["metadata"]["namespace"], plural, doc, dry_run="All"
            )


def test_examples_with_a_bad_field_are_rejected(installed):
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    custom = client.CustomObjectsApi(_api(installed))
    queue = next(d for d in _example_docs() if d["kind"] == "Queue")
    queue["spec"]["resources"]["gpu"]["quota"] = "lots"
    with pytest.raises(ApiException) as err:
        custom.create_cluster_custom_object("scheduling.run.ai", "v2", "queues", queue, dry_run="All")
    assert err.value.status == 422 and "quota" in err.value.body


def _sa_client(plane: ControlPlane) -> Any:
    from kubernetes import client

    api = _api(plane)
    token = (
        client.CoreV1Api(api)
        .create_namespaced_service_account_token(SA, NS, {"spec": {"audiences": [], "expirationSeconds": 3600}})
        .status.token
    )
    cfg = client.Configuration()
    cfg.host = plane.server
    cfg.ssl_ca_cert = str(plane.ca_path)
    cfg.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(cfg)


def _allowed(
    api: Any, verb: str, resource: str, group: str = "", sub: str | None = None, namespace: str = "default"
) -> bool:
    from kubernetes import client

    review = client.AuthorizationV1Api(api).create_self_subject_access_review(
        {
            "spec": {
                "resourceAttributes": {
                    "verb": verb,
                    "resource": resource,
                    "group": group,
                    "subresource": sub,
                    "namespace": namespace,
                }
            }
        }
    )
    return bool(review.status.allowed)


def test_service_account_token_grants_only_what_the_chart_says(installed):
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    sa = _sa_client(installed)
    assert _allowed(sa, "create", "pods", sub="binding")
    assert _allowed(sa, "create", "pods", sub="eviction")
    assert _allowed(sa, "patch", "rayclusters", group="ray.io")
    assert _allowed(sa, "patch", "podgroups", group="scheduling.run.ai", sub="status")
    assert not _allowed(sa, "update", "podgroups", group="scheduling.run.ai", sub="status")
    assert _allowed(sa, "update", "leases", group="coordination.k8s.io", namespace=NS)
    assert not _allowed(sa, "update", "leases", group="coordination.k8s.io", namespace="default")
    assert not _allowed(sa, "get", "secrets")
    assert not _allowed(sa, "delete", "rayclusters", group="ray.io")
    assert not _allowed(sa, "patch", "nodes")
    client.CoreV1Api(sa).list_pod_for_all_namespaces(limit=1)  # allowed: no exception
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(sa).list_namespaced_secret(NS)
    assert err.value.status == 403

"""Ray's KubeRay provider classes (v1 and v2) with kai-ray's cap, driven directly against the real API server, as
the autoscaler's service account with exactly the RBAC of KubeRay's autoscaler Role plus the example's Role.

What is real: kube-apiserver with RBAC, KubeRay's CRDs validating the example RayCluster, Ray's provider code (the
patches it writes, its launch-error bookkeeping). No Ray processes: the providers are called as the autoscaler calls
them (``launch`` for v2; ``non_terminated_nodes``/``create_node``/``post_process`` for v1).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray import constants as c
from kai_ray.headroom import contract as hr
from kai_ray.k8s.base.rest import Kube, events_path, podgroups_path, pods_path, ray_path
from kai_ray.testing.controlplane.harness import ControlPlane
from tests.autoscaler.helpers import podgroup, ray_pod

pytestmark = [pytest.mark.ray, pytest.mark.controlplane]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "raycluster-kai-autoscaler.yaml"
# KubeRay's Role for the autoscaler (ray-operator/controllers/ray/common/rbac.go, v1.6).
KUBERAY_AUTOSCALER_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["pods/resize"], "verbs": ["patch"]},
    {"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["get", "patch"]},
]


def _as_service_account(control_plane: ControlPlane, kube: Kube, ns: str, docs: list[dict[str, Any]]) -> Kube:
    from kubernetes import client

    sa = "elastic-kai"
    kube.create(f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": sa}})
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}"
    kube.create(f"{rbac}/roles", {"metadata": {"name": "kuberay-autoscaler"}, "rules": KUBERAY_AUTOSCALER_RULES})
    kube.create(
        f"{rbac}/rolebindings",
        {
            "metadata": {"name": "kuberay-autoscaler"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kuberay-autoscaler"},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}],
        },
    )
    for doc in docs:
        if doc["kind"] in ("Role", "RoleBinding"):
            plural = "roles" if doc["kind"] == "Role" else "rolebindings"
            for subject in doc.get("subjects", []):
                subject["namespace"] = ns
            kube.create(f"{rbac}/{plural}", doc)
    token = kube.create(f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token", {"spec": {"expirationSeconds": 3600}})[
        "status"
    ]["token"]
    cfg = client.Configuration()
    cfg.host = control_plane.server
    cfg.ssl_ca_cert = str(control_plane.ca_path)
    cfg.api_key = {"authorization": token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    return Kube(client.ApiClient(cfg))


@pytest.fixture
def example(control_plane: ControlPlane, kube: Kube, namespace: str) -> dict[str, Any]:
    """The example RayCluster (KubeRay's CRD validates it) with a head and one worker pod, its PodGroup with headroom
    for 2 more workers, and a Kube client acting as the autoscaler's service account."""
    pytest.importorskip("ray")
    ns = namespace
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    for d in docs:
        d["metadata"]["namespace"] = ns
    (rc_doc,) = [d for d in docs if d["kind"] == "RayCluster"]
    rc = kube.create(ray_path("RayCluster", ns), rc_doc)
    name = rc["metadata"]["name"]
    pg = f"pg-{name}-{rc['metadata']['uid']}"
    ann = {c.SUBGROUP_MAX: json.dumps({"headgroup": 1, "gpu-workers": 6})}
    ann.update(hr.headroom_annotations({"gpu-workers": hr.SubgroupHeadroom(1, 2)}))
    kube.create(podgroups_path(ns), podgroup(pg, annotations=ann))
    kube.create(pods_path(ns), ray_pod(f"{name}-head", name, "headgroup", podgroup=pg))
    kube.create(pods_path(ns), ray_pod(f"{name}-w0", name, "gpu-workers", podgroup=pg))
    sa_kube = _as_service_account(control_plane, kube, ns, docs)
    return {"ns": ns, "name": name, "pg": pg, "sa_kube": sa_kube}


def _replicas(kube: Kube, ns: str, name: str) -> int:
    return int(kube.get(ray_path("RayCluster", ns, name))["spec"]["workerGroupSpecs"][0]["replicas"])


def _capped_events(kube: Kube, ns: str, name: str) -> list[dict[str, Any]]:
    items = kube.get(events_path(ns), fieldSelector=f"involvedObject.name={name}")["items"]
    return [e for e in items if e["reason"] == hr.SCALE_UP_CAPPED]


def test_v2_provider_launch_is_capped_and_reported(kube: Kube, example: dict[str, Any]) -> None:
    from kai_ray.autoscaler.providers import KaiKubeRayProvider, RayKubeClient

    ns, name = example["ns"], example["name"]
    client = RayKubeClient(example["sa_kube"], ns)
    provider = KaiKubeRayProvider(name, {"namespace": ns, "head_node_type": "headgroup"}, None, k8s_api_client=client)
    assert set(provider.get_non_terminated()) == {f"{name}-head", f"{name}-w0"}

    provider.launch({"gpu-workers": 4}, "req-1")  # 1 + 4 wanted; the headroom allows 1 + 2

    assert _replicas(kube, ns, name) == 3
    errors = provider.poll_errors()
    assert [(e.node_type, e.count) for e in errors] == [("gpu-workers", 2)]
    assert "kai-ray: worker group gpu-workers: scale-up to 5 pods capped at 3" in str(errors[0])
    (event,) = _capped_events(kube, ns, name)
    assert event["involvedObject"]["kind"] == "RayCluster" and "capped at 3" in event["message"]

    provider.launch({"gpu-workers": 4}, "req-1")  # a replayed request id changes nothing
    assert _replicas(kube, ns, name) == 3 and provider.poll_errors() == []


def test_v1_provider_scale_request_is_capped(kube: Kube, example: dict[str, Any]) -> None:
    from ray.autoscaler.tags import NODE_KIND_WORKER, TAG_RAY_NODE_KIND, TAG_RAY_USER_NODE_TYPE

    from kai_ray.autoscaler.providers import KaiKubeRayNodeProvider, RayKubeClient

    ns, name = example["ns"], example["name"]
    config = {
        "namespace": ns,
        "disable_node_updaters": True,
        "disable_launch_config_check": True,
        "foreground_node_launch": True,
        "worker_liveness_check": False,
    }
    provider = KaiKubeRayNodeProvider(config, name, k8s_api_client=RayKubeClient(example["sa_kube"], ns))
    assert len(provider.non_terminated_nodes({})) == 2
    tags = {TAG_RAY_USER_NODE_TYPE: "gpu-workers", TAG_RAY_NODE_KIND: NODE_KIND_WORKER}
    provider.create_node({}, tags, 5)
    provider.post_process()
    assert _replicas(kube, ns, name) == 3
    assert _capped_events(kube, ns, name)

    # no headroom published at all: the default policy refuses any scale-up
    kube.merge_patch(podgroups_path(ns, example["pg"]), {"metadata": {"annotations": {hr.HEADROOM_ANNOTATION: None}}})
    provider.kai_gate.limits(force=True)
    provider.non_terminated_nodes({})
    provider.create_node({}, tags, 3)  # one worker pod + 3 = 4, above the 3 replicas already asked for
    provider.post_process()
    assert _replicas(kube, ns, name) == 3
    assert provider.kai_gate.decisions[-1].code == hr.HEADROOM_UNKNOWN

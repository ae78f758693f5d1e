"""The headline's manifests (``examples/headline/*.yaml``) say what the real-node scenario relies on.

Nothing runs here: the manifests are read as YAML and through ``kai-ray podgroup`` as a user runs it. What is checked
is what would otherwise only fail minutes into a real-node run: every pod template (the submitter's too) names
kai-scheduler and the locally built image with ``imagePullPolicy: Never``; the RayJob's entrypoint is a command line
its script (``train_v2.py`` or ``train.py``) accepts, writing under the hostPath mount; the Serve app's import path
resolves; the training is elastic (kai-ray may shrink it) and the service is ``inference`` in the same queue, with a gang that fits beside the training.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from kai_ray.api.strict import invalid_quantities, unknown_fields

HEADLINE = Path(__file__).resolve().parents[2] / "examples" / "headline"
FILES = sorted(HEADLINE.glob("*.yaml"))
IMAGE = "kai-ray-ray"


def _docs() -> dict[str, dict[str, Any]]:
    out = {}
    for path in FILES:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["apiVersion"].startswith("ray.io/"):
                out[f"{path.name}:{doc['kind']}/{doc['metadata']['name']}"] = doc
    return out


DOCS = _docs()


def _cluster(doc: dict[str, Any]) -> dict[str, Any]:
    spec = doc["spec"]
    cluster: dict[str, Any] = spec.get("rayClusterSpec") or spec["rayClusterConfig"]
    return cluster


def _templates(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    cluster = _cluster(doc)
    yield "head", cluster["headGroupSpec"]["template"]
    for group in cluster["workerGroupSpecs"]:
        yield group["groupName"], group["template"]
    if "submitterPodTemplate" in doc["spec"]:
        yield "submitter", doc["spec"]["submitterPodTemplate"]


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"headline_{name}", HEADLINE / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_three_workloads_are_there() -> None:
    kinds = sorted((d["kind"], d["spec"].get("submissionMode", "K8sJobMode")) for d in DOCS.values())
    assert kinds == [("RayJob", "K8sJobMode"), ("RayJob", "SidecarMode"), ("RayService", "K8sJobMode")]
    for path in FILES:
        assert path.read_text().startswith("---\n"), f"{path.name}: starts a document explicitly (cat-able)"


@pytest.mark.parametrize("name", list(DOCS))
def test_pods_use_kai_scheduler_and_the_local_image(name: str) -> None:
    doc = DOCS[name]
    assert unknown_fields(doc) == [] and invalid_quantities(doc) == []
    assert doc["metadata"]["labels"]["kai.scheduler/queue"] == "training"
    for where, template in _templates(doc):
        spec = template["spec"]
        assert spec.get("schedulerName") == "kai-scheduler", f"{name} {where}"
        for ctr in spec["containers"]:
            assert (ctr["image"], ctr["imagePullPolicy"]) == (IMAGE, "Never"), f"{name} {where}"
            assert "cpu" not in ctr["resources"].get("limits", {}), f"{name} {where}: CPU limits throttle Ray start"


@pytest.mark.parametrize("name", [n for n, d in DOCS.items() if d["kind"] == "RayJob"])
def test_training_is_elastic_and_its_entrypoint_is_accepted(name: str) -> None:
    doc = DOCS[name]
    assert doc["metadata"]["labels"]["priorityClassName"] == "train" and doc["spec"]["shutdownAfterJobFinishes"]
    (group,) = _cluster(doc)["workerGroupSpecs"]
    assert group["minReplicas"] < group["maxReplicas"] == group["replicas"]
    limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "1"

    # Grow-back is Ray's autoscaler's, capped by kai-ray's hook, which sitecustomize.py installs in its container.
    cluster = _cluster(doc)
    assert cluster["enableInTreeAutoscaling"] is True
    auto = cluster["autoscalerOptions"]
    assert (auto["image"], auto["imagePullPolicy"]) == (IMAGE, "Never")
    env = {e["name"]: e["value"] for e in auto["env"]}
    assert env == {"KAI_RAY_AUTOSCALER": "1", "PYTHONPATH": "/apps"}
    assert {m["name"]: m["mountPath"] for m in auto["volumeMounts"]} == {"apps": "/apps"}
    assert int(auto["idleTimeoutSeconds"]) >= 300, "workers waiting for the job to start must not count as idle"

    if "submitterPodTemplate" in doc["spec"]:  # kai-ray finds the submitter by its owners, not by a hand label
        assert "ray.io/group" not in ((doc["spec"]["submitterPodTemplate"].get("metadata") or {}).get("labels") or {})

    argv = shlex.split(doc["spec"]["entrypoint"])
    assert argv[0] == "python" and argv[1] in ("/apps/train.py", "/apps/train_v2.py")
    script = Path(argv[1]).stem
    if script == "train_v2":
        pytest.importorskip("ray.train")
    args = _module(script).parse_args(argv[2:])
    assert args.max_workers == group["maxReplicas"] and args.min_workers == group["minReplicas"]
    head = _cluster(doc)["headGroupSpec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in head["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in head["volumes"]}
    assert volumes["apps"]["configMap"]["name"] == "headline-train" and mounts["apps"] == "/apps"
    assert volumes["checkpoints"]["hostPath"]["path"] == "/var/lib/kai-ray-headline"
    where = Path(args.storage) if script == "train_v2" else args.checkpoint_dir
    assert where == Path(mounts["checkpoints"]) / doc["metadata"]["name"]
    if script == "train_v2":  # Ray Train's workers write the checkpoints: the head's directory on every worker
        worker = group["template"]["spec"]
        worker_mounts = {m["name"]: m["mountPath"] for m in worker["containers"][0]["volumeMounts"]}
        assert worker_mounts["checkpoints"] == mounts["checkpoints"]
        (checkpoints,) = [v for v in worker["volumes"] if v["name"] == "checkpoints"]
        assert checkpoints["hostPath"] == volumes["checkpoints"]["hostPath"]


def test_the_service_is_inference_in_the_same_queue_and_its_app_resolves() -> None:
    (svc,) = [d for d in DOCS.values() if d["kind"] == "RayService"]
    assert svc["metadata"]["labels"]["priorityClassName"] == "inference"
    (app,) = yaml.safe_load(svc["spec"]["serveConfigV2"])["applications"]
    module, attr = app["import_path"].split(":")
    pytest.importorskip("ray.serve")
    assert hasattr(_module(module), attr)
    for _, template in _templates(svc):
        spec = template["spec"]
        env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
        mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
        assert env["PYTHONPATH"] == mounts["apps"] == "/apps"
        assert {v["name"]: v["configMap"]["name"] for v in spec["volumes"]} == {"apps": "headline-serve"}


def test_serves_replica_range_is_the_gpu_groups_and_ray_grows_it_through_kai_rays_hook() -> None:
    """One replica per GPU worker: Serve's min/max replicas are the worker group's, and the second worker comes from
    Ray's in-tree autoscaler with kai-ray's hook (sitecustomize.py in the same ConfigMap), as the training's does."""
    pytest.importorskip("ray.serve")
    from ray.serve.config import AutoscalingConfig

    (svc,) = [d for d in DOCS.values() if d["kind"] == "RayService"]
    (app,) = yaml.safe_load(svc["spec"]["serveConfigV2"])["applications"]
    (deployment,) = app["deployments"]
    assert "num_replicas" not in deployment
    scaling = AutoscalingConfig(**deployment["autoscaling_config"])
    assert deployment["ray_actor_options"]["num_gpus"] == 1
    cluster = _cluster(svc)
    (group,) = cluster["workerGroupSpecs"]
    assert (group["minReplicas"], group["maxReplicas"]) == (scaling.min_replicas, scaling.max_replicas) == (1, 2)
    assert group["replicas"] == scaling.min_replicas
    assert cluster["enableInTreeAutoscaling"] is True
    env = {e["name"]: e["value"] for e in cluster["autoscalerOptions"]["env"]}
    assert env == {"KAI_RAY_AUTOSCALER": "1", "PYTHONPATH": "/apps"}
    assert {m["name"]: m["mountPath"] for m in cluster["autoscalerOptions"]["volumeMounts"]} == {"apps": "/apps"}


def test_podgroup_cli_groups_them_all() -> None:
    stream = "".join(p.read_text() for p in FILES)
    out = subprocess.run(
        [sys.executable, "-m", "kai_ray", "podgroup", "-f", "-", "-o", "json"],
        input=stream,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    got = {
        pg["metadata"]["name"]: (
            pg["spec"]["queue"],
            pg["spec"]["priorityClassName"],
            pg["spec"]["minMember"],
            pg["metadata"]["annotations"]["kai-ray.io/max-member"],
        )
        for pg in json.loads(out.stdout)
    }
    assert got == {
        "pg-headline-train": ("training", "train", 2, "4"),
        "pg-headline-train-sidecar": ("training", "train", 2, "4"),
        "pg-headline-serve": ("training", "inference", 2, "3"),
    }
    for path in FILES:
        one = subprocess.run(
            [sys.executable, "-m", "kai_ray", "podgroup", "-f", str(path)], capture_output=True, text=True, timeout=60
        )
        assert one.returncode == 0 and "warning" not in one.stderr, (path.name, one.stderr)


def test_the_rbac_binds_the_hooks_extra_rights_for_every_service_account_of_the_namespace() -> None:
    docs = [d for d in yaml.safe_load_all((HEADLINE / "rayjob-training-cpu.yaml").read_text()) if d]
    role = next(d for d in docs if d["kind"] == "Role")
    binding = next(d for d in docs if d["kind"] == "RoleBinding")
    assert {(r["resources"][0], r["verbs"][0]) for r in role["rules"]} == {("podgroups", "get"), ("events", "create")}
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "Group", "name": "system:serviceaccounts:headline", "apiGroup": "rbac.authorization.k8s.io"}
    ]


def test_sitecustomize_installs_kai_rays_providers_only_where_asked() -> None:
    pytest.importorskip("ray")
    probe = (
        "import ray.autoscaler._private.providers as v1, ray.autoscaler.v2.autoscaler as v2;"
        "print(v1._NODE_PROVIDERS['kuberay']({}).__name__, v2.KubeRayProvider.__name__)"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(HEADLINE), "RAY_USAGE_STATS_ENABLED": "0"}
    hooked = subprocess.run(
        [sys.executable, "-c", probe],
        env={**env, "KAI_RAY_AUTOSCALER": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert hooked.returncode == 0, hooked.stderr
    assert hooked.stdout.split() == ["KaiKubeRayNodeProvider", "KaiKubeRayProvider"]
    plain = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr
    assert "Kai" not in plain.stdout


@pytest.mark.controlplane
def test_the_real_crds_and_rbac_accept_them(control_plane: Any, namespace: str) -> None:
    """Dry-run creates on the real apiserver with KubeRay's CRDs: enums (``upgradeStrategy: None``,
    ``submissionMode``), ``autoscalerOptions`` fields and the RBAC documents are what KubeRay and Kubernetes accept."""
    from kai_ray.k8s.base.rest import Kube, ray_path

    kube = Kube(control_plane.api_client(pool_size=2))
    try:
        created = []
        for path in FILES:
            for doc in yaml.safe_load_all(path.read_text()):
                if not doc:
                    continue
                doc["metadata"]["namespace"] = namespace
                kind = doc["kind"]
                if kind.startswith("Ray"):
                    url = ray_path(kind, namespace)
                else:
                    url = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/{kind.lower()}s"
                out = kube.request("POST", url, query={"dryRun": "All"}, body=doc)
                created.append(f"{out['kind']}/{out['metadata']['name']}")
        assert sorted(created) == [
            "RayJob/headline-train",
            "RayJob/headline-train-sidecar",
            "RayService/headline-serve",
            "Role/kai-ray-autoscaler-hook",
            "RoleBinding/kai-ray-autoscaler-hook",
        ]
    finally:
        kube.close()


def test_a_head_that_lists_ports_keeps_the_ones_kuberay_needs() -> None:
    """Listing any port on the head container replaces KubeRay's defaults; without a ``dashboard`` port KubeRay
    cannot deploy a RayService's apps ("dashboard port is not found", seen on the real node) nor follow a RayJob."""
    root = HEADLINE.parents[1]
    checked = 0
    for path in sorted(root.glob("examples/**/*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not (isinstance(doc, dict) and str(doc.get("apiVersion", "")).startswith("ray.io/")):
                continue
            head = _cluster(doc) if doc["kind"] != "RayCluster" else doc["spec"]
            ports = head["headGroupSpec"]["template"]["spec"]["containers"][0].get("ports")
            if ports:
                checked += 1
                names = {p.get("name") for p in ports}
                assert {"dashboard", "gcs-server"} <= names, f"{path.name} {doc['metadata']['name']}: {names}"
    assert checked >= 2

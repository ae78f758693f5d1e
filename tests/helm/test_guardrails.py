"""The chart's guardrails and life cycle with the real `helm` on a real kube-apiserver (no KWOK: nothing runs).

- NOTES: what was installed and the next three steps (create a queue, label a RayJob, see why it pends).
- `helm upgrade` with changed values changes the Deployments and drops what was turned off; `helm uninstall` removes
  every object of the release (CRDs stay: Helm never deletes a chart's crds/).
- kai-coexistence mode creates no PriorityClasses or default queues unless asked, and even when asked leaves alone
  the ones another installer (KAI) created instead of failing on them.
- standalone mode refuses to install next to another scheduler serving the same schedulerName, found through KAI's
  own `Config` CRD (from KAI's Go module) or a workload running with `--scheduler-name`; the documented override
  installs anyway.

One control plane for the module; each test removes what it created, so cluster-scoped objects never leak between
tests (the CRDs the first install brings stay, as they would on a real cluster).
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kai_ray.k8s.base.rest import ApiError, Kube
from kai_ray.testing.controlplane import build
from kai_ray.testing.controlplane.harness import ControlPlane, kai_config_crd_file, kai_crd_files

CHART = Path(__file__).resolve().parents[2] / "helm" / "kai-ray"
PCS = "/apis/scheduling.k8s.io/v1/priorityclasses"
QUEUES = "/apis/scheduling.run.ai/v2/queues"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
KAI_CLASSES = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    with ControlPlane(kwok=False) as cp:
        yield cp


@pytest.fixture(scope="module")
def kube(plane: ControlPlane) -> Iterator[Kube]:
    k = Kube(plane.api_client(pool_size=4))
    yield k
    k.close()


def helm(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    image = ("--set", "image.repository=registry.example.com/kai-ray") if args[0] in ("install", "upgrade") else ()
    return subprocess.run(
        [str(build.ensure("helm")), *args, *image, "--kubeconfig", str(plane.kubeconfig_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def install(plane: ControlPlane, release: str, ns: str, *values: str, verb: str = "install") -> str:
    extra = ["--create-namespace"] if verb == "install" else []
    out = helm(plane, verb, release, str(CHART), "--namespace", ns, *extra, *values)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def names(kube: Kube, path: str) -> set[str]:
    return {o["metadata"]["name"] for o in kube.get(path)["items"]}


def deployments(kube: Kube, ns: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in kube.get(f"/apis/apps/v1/namespaces/{ns}/deployments")["items"]}


def args_of(deploy: dict[str, Any]) -> list[str]:
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    return [*container["command"], *container["args"]]


@contextlib.contextmanager
def created(kube: Kube, *objects: tuple[str, dict[str, Any]]) -> Iterator[None]:
    """Create (path, body) objects for the duration of a test; delete them afterwards."""
    made = []
    try:
        for path, body in objects:
            kube.create(path, body)
            made.append(f"{path}/{body['metadata']['name']}")
        yield
    finally:
        for path in reversed(made):
            with contextlib.suppress(ApiError):
                kube.delete(path)


def kai_owned(name: str) -> dict[str, Any]:
    """Metadata as KAI's own Helm release leaves on what it installs."""
    return {
        "name": name,
        "labels": {"app.kubernetes.io/managed-by": "Helm"},
        "annotations": {
            "meta.helm.sh/release-name": "kai-scheduler",
            "meta.helm.sh/release-namespace": "kai-scheduler",
        },
    }


def test_notes_upgrade_and_uninstall(plane: ControlPlane, kube: Kube) -> None:
    ns = "kai-ray-life"
    notes = install(plane, "life", ns)
    text = " ".join(notes.split())
    assert "kai-ray 0.1.0 is installed in namespace kai-ray-life (mode: standalone)" in text
    assert "scheduler/binder" in text and "PriorityClasses train (50)" in text
    assert "CRDs: kai-ray's Queue and PodGroup CRDs" in text
    assert "kind: Queue" in text and "kai.scheduler/queue: team-a" in text
    assert "schedulerName: kai-scheduler" in text and "batchScheduler.name=kai-scheduler" in text
    assert "kai-ray explain <pod-or-podgroup> -n <namespace>" in text
    assert set(deployments(kube, ns)) == {"life-kai-ray-podgrouper", "life-kai-ray-scheduler"}
    assert set(KAI_CLASSES) <= names(kube, PCS)
    assert {"default-parent-queue", "default-queue"} <= names(kube, QUEUES)

    install(
        plane,
        "life",
        ns,
        "--set", "scheduler.placementStrategy=spread",
        "--set", "podgrouper.replicas=2",
        "--set", "defaultQueues.create=false",
        verb="upgrade",
    )  # fmt: skip
    deploys = deployments(kube, ns)
    assert "--placement-strategy=spread" in args_of(deploys["life-kai-ray-scheduler"])
    assert deploys["life-kai-ray-podgrouper"]["spec"]["replicas"] == 2
    assert not {"default-parent-queue", "default-queue"} & names(kube, QUEUES), "turned off: removed"
    assert set(KAI_CLASSES) <= names(kube, PCS), "the release's own classes are kept on upgrade"

    out = helm(plane, "uninstall", "life", "--namespace", ns)
    assert out.returncode == 0, out.stdout + out.stderr
    assert deployments(kube, ns) == {}
    assert not set(KAI_CLASSES) & names(kube, PCS)
    assert "life-kai-ray" not in names(kube, "/apis/rbac.authorization.k8s.io/v1/clusterroles")
    crds = names(kube, CRDS)
    assert {"queues.scheduling.run.ai", "podgroups.scheduling.run.ai"} <= crds, "Helm keeps crds/ on uninstall"


def test_kai_coexistence_leaves_kais_classes_and_queues_alone(plane: ControlPlane, kube: Kube) -> None:
    ns = "kai-ray-coexist"
    kai_classes = [
        (PCS, {"metadata": kai_owned(name), "value": value, "preemptionPolicy": "PreemptLowerPriority"})
        for name, value in KAI_CLASSES.items()
    ]
    kai_queue = {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": kai_owned("default-queue"),
        "spec": {"resources": {"gpu": {"quota": 0, "limit": -1, "overQuotaWeight": 1}}},
    }
    kai_scheduler = ("/api/v1/namespaces", {"metadata": {"name": "kai-scheduler"}})
    if "queues.scheduling.run.ai" not in names(kube, CRDS):  # KAI's, as KAI installs them (the chart skips its own)
        plane.apply_crds(kai_crd_files())
    kai_deploy = deployment_body("kai-scheduler-default", ["--scheduler-name=kai-scheduler"])
    with created(kube, *kai_classes, (QUEUES, kai_queue), kai_scheduler):
        kube.create("/apis/apps/v1/namespaces/kai-scheduler/deployments", kai_deploy)
        try:
            notes = install(plane, "coex", ns, "--skip-crds", "--set", "mode=kai-coexistence")
            assert "no PriorityClasses" in notes and "no default queues" in notes
            assert "WARNING: no KAI Scheduler" not in notes, "KAI's scheduler was found serving kai-scheduler"
            alone = helm(
                plane, "install", "probe", str(CHART), "--namespace", ns, "--dry-run=server", "--skip-crds",
                "--set", "mode=kai-coexistence", "--set", "schedulerName=nobody",
            )  # fmt: skip
            assert 'WARNING: no KAI Scheduler serving "nobody" was found' in alone.stdout, alone.stderr
            assert set(deployments(kube, ns)) == {"coex-kai-ray-podgrouper"}
            asked = install(
                plane, "coex", ns, "--skip-crds", "--set", "mode=kai-coexistence", "--set", "priorityClasses.create=true",
                "--set", "defaultQueues.create=true", verb="upgrade",
            )  # fmt: skip
            assert "left alone, another installer owns them: train, build-preemptible, build, inference" in asked
            for name in KAI_CLASSES:
                ann = kube.get(f"{PCS}/{name}")["metadata"]["annotations"]
                assert ann["meta.helm.sh/release-name"] == "kai-scheduler", "KAI's class is untouched"
            ann = kube.get(f"{QUEUES}/default-queue")["metadata"]["annotations"]
            assert ann["meta.helm.sh/release-name"] == "kai-scheduler"
            parent = kube.get(f"{QUEUES}/default-parent-queue")["metadata"]["annotations"]
            assert parent["meta.helm.sh/release-name"] == "coex", "what KAI did not create, kai-ray may"
        finally:
            helm(plane, "uninstall", "coex", "--namespace", ns)
            with contextlib.suppress(ApiError):
                kube.delete(f"/apis/apps/v1/namespaces/kai-scheduler/deployments/{kai_deploy['metadata']['name']}")
    assert KAI_CLASSES.keys().isdisjoint(names(kube, PCS)), "cleaned up"


def deployment_body(name: str, args: list[str]) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "scheduler", "image": "registry.invalid/kai:0", "args": args}]},
            },
        },
    }


def test_standalone_refuses_a_second_scheduler_for_the_same_name(plane: ControlPlane, kube: Kube) -> None:
    ns = "kai-ray-refused"
    kai_ns = ("/api/v1/namespaces", {"metadata": {"name": "kai-system-2"}})
    deploy = deployment_body("kai-binder", ["--scheduler-name", "kai-scheduler", "--resource-reservation=true"])
    with created(kube, kai_ns, ("/apis/apps/v1/namespaces/kai-system-2/deployments", deploy)):
        out = helm(plane, "install", "refused", str(CHART), "--namespace", ns, "--create-namespace")
        assert out.returncode != 0
        message = " ".join(out.stderr.split())
        assert 'second scheduler for schedulerName "kai-scheduler"' in message
        assert "Deployment kai-system-2/kai-binder (container scheduler runs with --scheduler-name kai-scheduler)" in (
            message
        )
        assert "mode=kai-coexistence" in message and "allowSharedSchedulerName=true" in message
        assert helm(plane, "status", "refused", "--namespace", ns).returncode != 0, "nothing was installed"
        assert deployments(kube, ns) == {}
        other = install(plane, "other", ns, "--set", "schedulerName=kai-ray", "--set", "priorityClasses.create=false")
        assert 'schedulerName "kai-ray"' in other
        helm(plane, "uninstall", "other", "--namespace", ns)

    # KAI's operator records the scheduler name in its Config (kai.scheduler/v1, default kai-scheduler).
    plane.apply_crds([kai_config_crd_file()])
    config = {"apiVersion": "kai.scheduler/v1", "kind": "Config", "metadata": {"name": "kai-config"}, "spec": {}}
    with created(kube, ("/apis/kai.scheduler/v1/configs", config)):
        out = helm(plane, "install", "refused", str(CHART), "--namespace", ns)
        assert out.returncode != 0
        assert "KAI Scheduler Config kai-config (spec.global.schedulerName kai-scheduler)" in " ".join(
            out.stderr.split()
        )
        forced = install(
            plane, "forced", ns, "--set", "allowSharedSchedulerName=true", "--set", "priorityClasses.create=false",
            "--set", "defaultQueues.create=false",
        )  # fmt: skip
        assert "mode: standalone" in forced
    # KAI is gone: the release's own Deployments (which run with --scheduler-name too) never count as another.
    install(plane, "forced", ns, "--reuse-values", "--set", "allowSharedSchedulerName=false", verb="upgrade")
    helm(plane, "uninstall", "forced", "--namespace", ns)

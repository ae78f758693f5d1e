"""The Helm chart on the real node, with the operator image built from ``operators/Dockerfile``: the podgrouper and the
scheduler run as pods from the image with the chart's RBAC, probes, leader election and metrics port; ``/metrics``
answers through the chart's Service; a deleted scheduler pod comes back and scheduling resumes; ``helm upgrade`` and
``helm uninstall`` leave nothing of the release behind.

The first proof that the image and the chart work: every other chart test renders it or installs it on an apiserver
with no node that runs containers.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kai_ray.k8s.base.rest import Kube, podgroups_path, pods_path, queues_path
from kai_ray.testing.controlplane import build
from kai_ray.testing.controlplane.realnode import NODE_NAME, RealNode
from tests.k8s.helpers import bound, podgroup_body, wait_until
from tests.realnode.helpers import logs, phase, running_containers

pytestmark = [pytest.mark.realnode, pytest.mark.slow]

CHART = Path(__file__).resolve().parents[2] / "helm" / "kai-ray"
RELEASE, NS = "rel", "kai-system"
INSTANCE = f"app.kubernetes.io/instance={RELEASE}"
MakePod = Callable[..., dict[str, Any]]


def _helm(real_node: RealNode, *args: str, check: bool = True) -> str:
    argv = [str(build.ensure("helm")), *args, "--namespace", NS, "--kubeconfig", str(real_node.plane.kubeconfig_path)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 or not check, f"helm {' '.join(args)}: {out.stdout}{out.stderr}"
    return out.stdout


def _deployments_ready(kube: Kube) -> bool:
    items = kube.get(f"/apis/apps/v1/namespaces/{NS}/deployments", labelSelector=INSTANCE)["items"]
    return bool(items) and all(
        (d.get("status") or {}).get("updatedReplicas") == d["spec"]["replicas"]
        and (d.get("status") or {}).get("readyReplicas") == d["spec"]["replicas"]
        and (d.get("status") or {}).get("replicas") == d["spec"]["replicas"]
        for d in items
    )


def _release_pods(kube: Kube, component: str = "") -> list[dict[str, Any]]:
    selector = INSTANCE + (f",app.kubernetes.io/component={component}" if component else "")
    items: list[dict[str, Any]] = kube.get(pods_path(NS), labelSelector=selector)["items"]
    return items


@pytest.fixture(scope="module")
def operator_image(real_node: RealNode) -> str:
    return real_node.load_image("operator")


@pytest.fixture(scope="module")
def release(real_node: RealNode, kube: Kube, operator_image: str) -> Iterator[str]:
    repository, tag = operator_image.rsplit(":", 1)
    _helm(
        real_node,
        "install",
        RELEASE,
        str(CHART),
        "--create-namespace",
        "--set",
        f"image.repository={repository}",
        "--set",
        f"image.tag={tag}",
        "--set",
        "image.pullPolicy=Never",
    )
    try:
        wait_until("the chart's Deployments to be ready", lambda: _deployments_ready(kube), 300, 1.0)
        yield operator_image
    finally:
        _helm(real_node, "uninstall", RELEASE, "--ignore-not-found", check=False)


def test_the_operators_run_from_the_image_with_the_charts_probes_and_leader_election(
    real_node: RealNode, kube: Kube, release: str
) -> None:
    pods = _release_pods(kube)
    components = sorted(p["metadata"]["labels"]["app.kubernetes.io/component"] for p in pods)
    assert components == ["podgrouper", "scheduler", "scheduler"]
    for p in pods:
        assert p["spec"]["nodeName"] == NODE_NAME
        (container,) = p["spec"]["containers"]
        assert container["image"] == release
        assert container["readinessProbe"] and container["livenessProbe"]
        assert running_containers(kube, NS, p["metadata"]["name"])
        (status,) = p["status"]["containerStatuses"]
        assert status["ready"] is True and status["restartCount"] == 0
    rss = {p["metadata"]["name"]: round(real_node.pod_rss_bytes(p["metadata"]["uid"]) / 2**20) for p in pods}
    print(f"chart operators' RSS (MiB, pause included): {rss}")
    assert all(rss.values())
    lease = wait_until(
        "a scheduler to hold the leader Lease",
        lambda: kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{RELEASE}-kai-ray-scheduler")[
            "spec"
        ].get("holderIdentity"),
        60,
        0.5,
    )
    assert any(lease.startswith(p["metadata"]["name"]) or p["metadata"]["name"] in lease for p in pods), lease


def test_metrics_answer_through_the_charts_service(
    real_node: RealNode, kube: Kube, release: str, namespace: str, make_pod: MakePod
) -> None:
    svc = kube.get(f"/api/v1/namespaces/{NS}/services/{RELEASE}-kai-ray-metrics")
    port = svc["spec"]["ports"][0]["port"]
    host = f"{RELEASE}-kai-ray-metrics.{NS}.svc.cluster.local"
    script = (
        "for i in $(seq 60); do "
        f"printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {host} {port} > /tmp/m; "
        "grep -q '^kai_ray_' /tmp/m && break; sleep 1; done; grep -c '^kai_ray_' /tmp/m"
    )
    kube.create(pods_path(namespace), make_pod("scrape", script, scheduler=None))
    wait_until("the scrape to finish", lambda: phase(kube, namespace, "scrape") in ("Succeeded", "Failed"), 180, 0.5)
    out = logs(kube, namespace, "scrape").strip()
    assert out.isdigit() and int(out) > 0, f"no kai_ray_ series from {host}:{port}/metrics: {out!r}"


def test_a_deleted_scheduler_pod_comes_back_and_scheduling_resumes(
    real_node: RealNode,
    kube: Kube,
    release: str,
    namespace: str,
    queues: Any,
    priority_classes: Any,
    make_pod: MakePod,
) -> None:
    leader = kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{RELEASE}-kai-ray-scheduler")["spec"][
        "holderIdentity"
    ]
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in _release_pods(kube, "scheduler")}
    victim = next((n for n in before if n in leader), next(iter(before)))
    kube.delete(pods_path(NS, victim))

    def replaced() -> bool:
        now = {p["metadata"]["name"]: p["metadata"]["uid"] for p in _release_pods(kube, "scheduler")}
        return victim not in now and len(now) == len(before) and _deployments_ready(kube)

    wait_until("the Deployment to replace the deleted scheduler pod", replaced, 300, 1.0)

    queues("dept", gpu_quota=8)
    team = queues("team", gpu_quota=8, parent="dept")
    kube.create(podgroups_path(namespace), podgroup_body("gang", 2, team))
    names = ["gang-0", "gang-1"]
    created = time.monotonic()
    for name in names:
        kube.create(pods_path(namespace), make_pod(name, "echo ran; sleep 1", gpus=2, group="gang"))
    wait_until("the chart's scheduler to bind the gang", lambda: len(bound(kube, namespace, names)) == 2, 180, 0.5)
    wait_until(
        "the gang to run to completion", lambda: all(phase(kube, namespace, n) == "Succeeded" for n in names), 180
    )
    print(f"gang of 2 through the chart's scheduler after a leader loss: {time.monotonic() - created:.1f}s")


def test_upgrade_then_uninstall_leave_nothing_behind(real_node: RealNode, kube: Kube, release: str) -> None:
    repository, tag = release.rsplit(":", 1)
    _helm(
        real_node,
        "upgrade",
        RELEASE,
        str(CHART),
        "--set",
        f"image.repository={repository}",
        "--set",
        f"image.tag={tag}",
        "--set",
        "image.pullPolicy=Never",
        "--set",
        "scheduler.schedulePeriod=2s",
    )

    def rolled() -> bool:
        pods = [p for p in _release_pods(kube, "scheduler") if not p["metadata"].get("deletionTimestamp")]
        upgraded = all("--schedule-period=2s" in p["spec"]["containers"][0]["args"] for p in pods)
        return bool(pods) and upgraded and _deployments_ready(kube)

    wait_until("the upgraded scheduler pods to be ready", rolled, 300, 1.0)

    _helm(real_node, "uninstall", RELEASE, "--wait")
    wait_until("the release's pods to be gone", lambda: not _release_pods(kube), 180, 1.0)
    left = []
    for path in (
        f"/apis/apps/v1/namespaces/{NS}/deployments",
        f"/api/v1/namespaces/{NS}/services",
        f"/api/v1/namespaces/{NS}/serviceaccounts",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        queues_path(),
    ):
        left += [f"{path}/{o['metadata']['name']}" for o in kube.get(path, labelSelector=INSTANCE)["items"]]
    assert not left, f"helm uninstall left {left}"

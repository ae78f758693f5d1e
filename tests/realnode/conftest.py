"""Fixtures for the real-node lane: one control plane with a real kubelet + containerd node for the whole session.

``control_plane`` is overridden here by the real node's control plane, so the shared ``namespace`` fixture and the
operator fixtures of ``tests/k8s`` (imported below) work unchanged against it. Where the host cannot run containers
the lane is skipped with one line, except on CI (``CI=true``), where that is a failure.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kai_ray.k8s.base.rest import ApiError, Kube
from kai_ray.testing.controlplane.harness import ControlPlane, our_crd_dir
from kai_ray.testing.controlplane.pytest_plugin import _dns_prefix
from kai_ray.testing.controlplane.realnode import NODE_NAME, NodeUnavailable, RealNode
from tests.k8s.conftest import priority_classes, queues, run_scheduler  # noqa: F401  (fixtures, re-used here)
from tests.k8s.helpers import wait_until


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the real-node lane cannot run on CI: {reason}", pytrace=False)
    pytest.skip(f"no real node here: {reason}")


@pytest.fixture(scope="session")
def real_node() -> Iterator[RealNode]:
    try:
        from kai_ray.testing.images import ImageBuildError
    except ImportError as exc:  # pragma: no cover - images.py ships with this lane
        _unavailable(str(exc))
        raise
    node = RealNode(gpus=8, crds=[our_crd_dir()])
    try:
        node.start()
    except (NodeUnavailable, ImageBuildError) as exc:
        _unavailable(str(exc))
        raise
    print(f"[kai-ray] real node up: {node.timings.as_dict()}", file=sys.stderr)
    try:
        yield node
    finally:
        rss = {name: round(node.rss_bytes(name) / 2**20) for name in ("kubelet", "containerd", "kube-apiserver")}
        print(f"[kai-ray] RSS MiB at the end: {rss}, shims {node.shim_rss_bytes() / 2**20:.0f}", file=sys.stderr)
        leftovers = node.stop()
    assert not leftovers, f"the real node did not leave the host as it found it: {leftovers}"


@pytest.fixture(scope="session")
def control_plane(real_node: RealNode) -> ControlPlane:
    return real_node.plane


@pytest.fixture
def namespace(control_plane: ControlPlane, kube: Kube, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace, returned once kube-controller-manager has made its ``default`` ServiceAccount (the
    ServiceAccount admission plugin, on here, refuses pods until then)."""
    name = control_plane.new_namespace(prefix=_dns_prefix(request.node.name))
    wait_until(
        "the namespace's default ServiceAccount",
        lambda: _exists(kube, f"/api/v1/namespaces/{name}/serviceaccounts/default"),
        60,
    )
    yield name
    control_plane.clear_namespace(name)


def _exists(kube: Kube, path: str) -> bool:
    try:
        kube.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    return True


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane) -> Iterator[Kube]:
    k = Kube(control_plane.api_client(pool_size=16))
    yield k
    k.close()


@pytest.fixture(scope="session")
def busybox(real_node: RealNode) -> str:
    """The busybox image's reference, imported into the node's containerd."""
    return real_node.load_image("busybox")


@pytest.fixture
def on_node() -> dict[str, str]:
    """A node selector for the scheduler: the one real node."""
    return {"kubernetes.io/hostname": NODE_NAME}


@pytest.fixture
def make_pod(busybox: str) -> Callable[..., dict[str, Any]]:
    """``make_pod(name, script, gpus=0, ...)``: a busybox pod running ``sh -c script`` (never pulled, never restarted)."""

    def make(
        name: str,
        script: str,
        gpus: int = 0,
        group: str | None = None,
        labels: dict[str, str] | None = None,
        scheduler: str | None = "kai-scheduler",
        grace: int = 5,
        volumes: list[dict[str, Any]] | None = None,
        mounts: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        container: dict[str, Any] = {
            "name": "main",
            "image": busybox,
            "imagePullPolicy": "Never",
            "command": ["sh", "-c", script],
            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {},
            "volumeMounts": mounts or [],
        }
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": grace,
            "enableServiceLinks": False,
            "automountServiceAccountToken": False,
            "containers": [container],
            "volumes": volumes or [],
        }
        if scheduler:
            spec["schedulerName"] = scheduler
        else:
            spec["nodeName"] = NODE_NAME
        annotations = {"pod-group-name": group} if group else {}
        meta = {"name": name, "labels": labels or {}, "annotations": annotations}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}

    return make

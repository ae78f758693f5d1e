"""The test control plane itself: real kube-apiserver + etcd + KWOK built from Go modules.

KWOK fakes the kubelet (no container runtime here): nodes report Ready and bound pods report Running, but no
container runs. What is real: the API server, etcd, admission, the Binding subresource, watches.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kai_ray.testing.controlplane import build
from kai_ray.testing.controlplane.harness import ControlPlane, ControlPlaneError, wait_for


def test_reports_pinned_version(control_plane: ControlPlane) -> None:
    version = control_plane.version()
    assert version["gitVersion"] == build.K8S_VERSION
    major, minor = build.K8S_VERSION.lstrip("v").split(".")[:2]
    assert (version["major"], version["minor"]) == (major, minor)


def test_every_component_listens_on_loopback_only(control_plane: ControlPlane) -> None:
    seen = {}
    for name, comp in control_plane.components.items():
        addrs = comp.listening()
        seen[name] = addrs
        for host, port in addrs:
            assert ipaddress.ip_address(host).is_loopback, f"{name} listens on {host}:{port}"
    assert ("127.0.0.1", control_plane.apiserver_port) in seen["kube-apiserver"]
    assert ("127.0.0.1", control_plane.etcd_port) in seen["etcd"]
    assert ("127.0.0.1", control_plane.kwok_port) in seen["kwok"]


def test_kwok_gpu_nodes_become_ready_untainted(
    control_plane: ControlPlane, kube_api: Any, gpu_nodes: Callable[..., list[str]]
) -> None:
    names = gpu_nodes(2, gpus=8, labels={"pool": "a100"})
    core: Any = client.CoreV1Api(kube_api)
    for name in names:
        node = core.read_node(name)
        assert node.status.allocatable["nvidia.com/gpu"] == "8"
        assert node.status.capacity["nvidia.com/gpu"] == "8"
        assert node.status.allocatable["cpu"] == "64"
        assert node.metadata.labels["pool"] == "a100"
        assert node.metadata.labels["nvidia.com/gpu.count"] == "8"
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert ready and ready[0].status == "True"
        assert not node.spec.taints, f"{name} has taints {node.spec.taints}"
        assert not node.spec.unschedulable


def _pod(name: str, gpus: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/never-pulled:0",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }


def _bind(core: Any, namespace: str, pod: str, node: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    resp = core.create_namespaced_pod_binding(pod, namespace, body, _preload_content=False)
    assert resp.status == 201, resp.data


def test_pod_bound_through_binding_subresource_runs_and_deletes(
    control_plane: ControlPlane, kube_api: Any, namespace: str, gpu_nodes: Callable[..., list[str]]
) -> None:
    (node,) = gpu_nodes(1)
    core: Any = client.CoreV1Api(kube_api)
    core.create_namespaced_pod(namespace, _pod("worker-0"))
    time.sleep(0.5)
    pending = core.read_namespaced_pod("worker-0", namespace)
    assert pending.status.phase == "Pending" and not pending.spec.node_name, "nothing but us may bind pods"

    _bind(core, namespace, "worker-0", node)

    def running() -> Any:
        pod = core.read_namespaced_pod("worker-0", namespace)
        return pod if pod.status.phase == "Running" and pod.status.pod_ip else None

    pod = wait_for("bound pod to run", running, timeout=30)
    assert pod.spec.node_name == node
    assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network("10.244.0.0/16")

    # A second binding of a bound pod is refused by the API server: the guard against double-binding.
    with pytest.raises(client.ApiException) as exc:
        _bind(core, namespace, "worker-0", node)
    assert exc.value.status == 409

    # Graceful delete: KWOK's pod-delete stage finishes it (there is no kubelet to do so).
    core.delete_namespaced_pod("worker-0", namespace)

    def gone() -> bool:
        try:
            core.read_namespaced_pod("worker-0", namespace)
        except client.ApiException as err:
            return err.status == 404
        return False

    wait_for("deleted pod to vanish", gone, timeout=30)


@pytest.mark.controlplane
def test_startup_failure_reports_log_tail_and_leaves_no_process(tmp_path: Any) -> None:
    plane = ControlPlane(kwok=False, workdir=tmp_path / "cp", apiserver_extra_args=["--no-such-flag"])
    with pytest.raises(ControlPlaneError) as exc:
        plane.start()
    message = str(exc.value)
    assert "kube-apiserver" in message
    assert "no-such-flag" in message
    for comp in plane.components.values():
        assert not comp.alive(), f"{comp.name} survived a failed start"
        assert not os.path.exists(f"/proc/{comp.popen.pid}")


@pytest.mark.controlplane
def test_stop_kills_every_process_and_removes_workdir() -> None:
    with ControlPlane(kwok=True) as plane:
        assert plane.version()["gitVersion"] == build.K8S_VERSION
        pids = {name: comp.popen.pid for name, comp in plane.components.items()}
        workdir = plane.workdir
        assert set(pids) == {"etcd", "kube-apiserver", "kwok"}
    for name, pid in pids.items():
        assert not os.path.exists(f"/proc/{pid}"), f"{name} (pid {pid}) outlived the control plane"
    assert workdir is not None and not workdir.exists()


def _children(pid: int) -> list[int]:
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
        except OSError:
            continue
        if fields.get("PPid", "").strip() == str(pid):
            found.append(int(status.parent.name))
    return found


@pytest.mark.controlplane
def test_sigkilled_owner_takes_its_processes_along() -> None:
    """Even a SIGKILLed pytest (no finalizers, no atexit) leaves no etcd/apiserver/kwok behind."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kai_ray.testing.controlplane.harness", "--no-crds"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("export KUBECONFIG=") or time.monotonic() > deadline:
                break
        children = _children(proc.pid)
        assert len(children) == 3, f"expected etcd, kube-apiserver and kwok under {proc.pid}, got {children}"
    finally:
        proc.kill()
        proc.wait(timeout=10)
    wait_for("children of a SIGKILLed owner to die", lambda: not any(Path(f"/proc/{c}").exists() for c in children), 10)

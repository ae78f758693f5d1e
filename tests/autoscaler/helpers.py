"""Builders for real RayCluster/RayJob/RayService objects and KubeRay-labelled pods, and bounded polling."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.k8s.helpers import wait_until

__all__ = ["start_autoscaler", "stop_process", "wait_until"]

IMAGE = "rayproject/ray:2.60.0"


def start_autoscaler(kubeconfig: str, ns: str, gcs_address: str, log_path: Path) -> subprocess.Popen[bytes]:
    """``python -m kai_ray.autoscaler`` as KubeRay's sidecar would run it, for RayCluster ``rc`` (head ``rc-head``)."""
    env = {**os.environ, "KUBECONFIG": kubeconfig, "AUTOSCALER_UPDATE_INTERVAL_S": "1", "RAY_HEAD_POD_NAME": "rc-head"}
    argv = [
        sys.executable,
        "-m",
        "kai_ray.autoscaler",
        "--cluster-name=rc",
        f"--cluster-namespace={ns}",
        f"--gcs-address={gcs_address}",
        "--no-metrics",
        "--wait-s=30",
    ]
    with log_path.open("wb") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)


def stop_process(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def _template(cpu: str = "1", gpus: int = 0) -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": cpu, "memory": "1Gi"}
    if gpus:
        limits["nvidia.com/gpu"] = gpus
    return {
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "ray", "image": IMAGE, "resources": {"limits": limits, "requests": limits}}],
        }
    }


def worker_group(
    name: str, replicas: int, min_replicas: int = 0, max_replicas: int = 10, hosts: int = 1, gpus: int = 0
) -> dict[str, Any]:
    wg: dict[str, Any] = {
        "groupName": name,
        "replicas": replicas,
        "minReplicas": min_replicas,
        "maxReplicas": max_replicas,
        "rayStartParams": {},
        "template": _template(gpus=gpus),
    }
    if hosts > 1:
        wg["numOfHosts"] = hosts
    return wg


def cluster_spec(*groups: dict[str, Any], autoscaling: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "rayVersion": "2.60.0",
        "headGroupSpec": {"rayStartParams": {}, "template": _template()},
        "workerGroupSpecs": list(groups),
    }
    if autoscaling:
        spec["enableInTreeAutoscaling"] = True
    return spec


def raycluster(name: str, *groups: dict[str, Any], labels: dict[str, str] | None = None, **kw: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": cluster_spec(*groups, **kw),
    }


def rayjob(
    name: str, *groups: dict[str, Any], shutdown: bool = True, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {
            "entrypoint": "python -c 'print(1)'",
            "shutdownAfterJobFinishes": shutdown,
            "rayClusterSpec": cluster_spec(*groups, autoscaling=False),
        },
    }


def rayservice(name: str, *groups: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": name},
        "spec": {"serveConfigV2": "applications: []\n", "rayClusterConfig": cluster_spec(*groups, autoscaling=False)},
    }


def ray_pod(
    name: str,
    cluster: str,
    group: str,
    *,
    podgroup: str | None = None,
    replica: str | None = None,
    ip: str | None = None,
) -> dict[str, Any]:
    """A pod labelled as KubeRay labels its head (group ``headgroup``) or workers."""
    head = group == "headgroup"
    labels = {
        "ray.io/is-ray-node": "yes",
        "ray.io/cluster": cluster,
        "ray.io/node-type": "head" if head else "worker",
        "ray.io/group": group,
    }
    if replica:
        labels["ray.io/worker-group-replica-name"] = replica
    ann = {"pod-group-name": podgroup} if podgroup else {}
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "annotations": ann},
        "spec": {
            "schedulerName": "kai-scheduler",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "ray", "image": IMAGE}],
        },
    }
    if ip:
        body["status"] = {"podIP": ip}
    return body


def podgroup(name: str, queue: str = "default-queue", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "annotations": dict(annotations or {})},
        "spec": {"minMember": 1, "queue": queue, "priorityClassName": "train"},
    }


def queue(name: str, gpu_quota: float = -1, parent: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resources": {
            "gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1},
            "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
            "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        }
    }
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}

"""KWOK's side of a test control plane: its stage files, and fake GPU nodes for it to manage.

Why apart from :mod:`~kai_ray.testing.controlplane.harness`: what a fake node looks like (capacity, the GPU Feature
Discovery labels KAI reads, the annotation that hands it to KWOK) is knowledge about the cluster a test wants, not
about running an apiserver.
"""

from __future__ import annotations

import uuid
from functools import lru_cache
from pathlib import Path
from typing import Any

from kai_ray.testing.controlplane import build
from kai_ray.testing.controlplane.processes import ControlPlaneError

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_VALUE = "fake"
NODE_BATCH_LABEL = "kai-ray.test/node-batch"
GPU_RESOURCE = "nvidia.com/gpu"
POD_CIDR = "10.244.0.0/16"

KWOK_STAGES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)


@lru_cache(maxsize=1)
def kwok_stage_files() -> list[Path]:
    """Stage files from the pinned KWOK module: v0.7 has built-in defaults, v0.8+ requires them, so always pass."""
    base = build.module_dir(build.KWOK_MODULE, build.KWOK_VERSION) / "kustomize" / "stage"
    files = [base / rel for rel in KWOK_STAGES]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise ControlPlaneError(f"KWOK {build.KWOK_VERSION} module lacks stage files: {', '.join(missing)}")
    return files


def kwok_argv(binary: Path, kubeconfig: Path, port: int, log_level: str, stages: list[Path]) -> list[str]:
    """KWOK manages only nodes carrying its annotation, so a real node registered alongside is left to its kubelet."""
    argv = [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_VALUE}",
        f"--cidr={POD_CIDR}",
        "--node-ip=10.0.0.1",
        "--node-lease-duration-seconds=40",
        f"--server-address=127.0.0.1:{port}",
        f"--v={log_level}",
    ]
    argv.extend(f"--config={stage}" for stage in stages)
    return argv


def gpu_node_manifests(
    n: int,
    gpus: int,
    cpu: str,
    memory: str,
    pods: int,
    labels: dict[str, str] | None,
    annotations: dict[str, str] | None,
    taints: list[dict[str, str]] | None,
    extra_resources: dict[str, str] | None,
    gpu_product: str,
    gpu_memory_mib: int,
    prefix: str,
) -> list[dict[str, Any]]:
    """``n`` Node bodies named ``<prefix>-<batch>-<i>``, one fresh batch label shared by all of them."""
    batch = uuid.uuid4().hex[:6]
    resources = {"cpu": cpu, "memory": memory, "pods": str(pods), **(extra_resources or {})}
    node_labels_base = {
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        NODE_BATCH_LABEL: batch,
    }
    if gpus:
        resources[GPU_RESOURCE] = str(gpus)
        node_labels_base.update(
            {
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.count": str(gpus),
                "nvidia.com/gpu.product": gpu_product,
                "nvidia.com/gpu.memory": str(gpu_memory_mib),
            }
        )
    bodies: list[dict[str, Any]] = []
    for i in range(n):
        name = f"{prefix}-{batch}-{i}"
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {**node_labels_base, "kubernetes.io/hostname": name, **(labels or {})},
                "annotations": {
                    KWOK_NODE_ANNOTATION: KWOK_NODE_VALUE,
                    "node.alpha.kubernetes.io/ttl": "0",
                    **(annotations or {}),
                },
            },
            "spec": {"taints": taints or []},
            "status": {"capacity": dict(resources), "allocatable": dict(resources)},
        }
        bodies.append(body)
    return bodies


def node_ready(node: dict[str, Any]) -> bool:
    conds = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)

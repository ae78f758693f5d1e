from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
PYTHON = REPO / ".venv" / "bin" / "python"


def kai_ray(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a user does: a real subprocess of the project's interpreter."""
    exe = str(PYTHON) if PYTHON.exists() else sys.executable
    return subprocess.run([exe, "-m", "kai_ray", *args], capture_output=True, text=True, timeout=timeout, cwd=str(REPO))


def run_json(*args: str) -> dict[str, Any]:
    out = kai_ray(*args, "--json")
    assert out.returncode == 0, out.stderr
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


def write_yaml(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def ray_cluster(name: str, queue: str, workers: int, gpus: int, priority: str = "train", **meta: Any) -> dict[str, Any]:
    """A RayCluster with a CPU-only head and ``workers`` workers of ``gpus`` GPUs each."""
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": name,
            "namespace": meta.get("namespace", "team"),
            "labels": {"kai.scheduler/queue": queue, "priorityClassName": priority},
        },
        "spec": {
            "headGroupSpec": {
                "template": {
                    "spec": {"containers": [{"name": "head", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}]}
                }
            },
            "workerGroupSpecs": [
                {
                    "groupName": "gpu",
                    "replicas": workers,
                    "minReplicas": workers,
                    "maxReplicas": workers,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "w",
                                    "resources": {
                                        "requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": str(gpus)},
                                        "limits": {"nvidia.com/gpu": str(gpus)},
                                    },
                                }
                            ]
                        }
                    },
                }
            ],
        },
    }


def queue(name: str, gpu_quota: float = -1, parent: str | None = None, priority: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": name,
        "resources": {
            "gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1},
            "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
            "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        },
    }
    if parent:
        spec["parentQueue"] = parent
    if priority is not None:
        spec["priority"] = priority
    return spec

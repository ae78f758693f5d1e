"""Every shipped example (``examples/`` and the demo's manifests) asks for a cluster its Ray Serve apps can use.

A RayService's Serve config and its RayCluster are written separately, and nothing stops them disagreeing: Serve
autoscaling up to 4 vLLM replicas of tensor-parallel 4 on a cluster fixed at one 4-GPU worker leaves three replicas
pending forever. The rule checked here, per RayService: Serve's GPU demand at its minimum replica counts fits the
workers the gang guarantees (minReplicas, or replicas without the autoscaler); its demand at the maximum fits the
most workers the cluster can have (maxReplicas with in-tree autoscaling, else replicas); and with the autoscaler on,
maxReplicas brings no worker that Serve's maximum could never fill.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*ROOT.glob("examples/**/*.yaml"), *ROOT.glob("kai_ray/sim/demo/*.yaml")])


def _docs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in SOURCES:
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("apiVersion", "").startswith("ray.io/"):
                out.append((f"{path.relative_to(ROOT)}:{doc['kind']}/{doc['metadata']['name']}", doc))
    return out


def _bounds(cfg: dict[str, Any]) -> tuple[int, int]:
    auto = cfg.get("autoscaling_config")
    if auto:
        return int(auto.get("min_replicas", 1)), int(auto.get("max_replicas", 1))
    n = int(cfg.get("num_replicas", 1))
    return n, n


def serve_gpu_demand(serve_config: str) -> tuple[float, float]:
    """(GPUs at every deployment's minimum replicas, GPUs at their maximum) of a ``serveConfigV2``."""
    low = high = 0.0
    for app in yaml.safe_load(serve_config).get("applications") or []:
        for llm in (app.get("args") or {}).get("llm_configs") or []:
            engine = llm.get("engine_kwargs") or {}
            gpus = int(engine.get("tensor_parallel_size", 1)) * int(engine.get("pipeline_parallel_size", 1))
            lo, hi = _bounds(llm.get("deployment_config") or {})
            low, high = low + lo * gpus, high + hi * gpus
        for dep in app.get("deployments") or []:
            gpus = float((dep.get("ray_actor_options") or {}).get("num_gpus", 0))
            lo, hi = _bounds(dep)
            low, high = low + lo * gpus, high + hi * gpus
    return low, high


def _worker_gpus(group: dict[str, Any]) -> float:
    params = group.get("rayStartParams") or {}
    if "num-gpus" in params:
        return float(params["num-gpus"])
    total = 0.0
    for ctr in group["template"]["spec"]["containers"]:
        total += float(((ctr.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu", 0))
    return total


RAY_SERVICES = [(name, doc) for name, doc in _docs() if doc["kind"] == "RayService"]


def test_there_are_examples_to_check() -> None:
    assert len(SOURCES) >= 6 and RAY_SERVICES, SOURCES


@pytest.mark.parametrize("name,doc", RAY_SERVICES, ids=[n for n, _ in RAY_SERVICES])
def test_serve_bounds_match_the_cluster(name: str, doc: dict[str, Any]) -> None:
    cluster = doc["spec"]["rayClusterConfig"]
    autoscaling = bool(cluster.get("enableInTreeAutoscaling"))
    low, high = serve_gpu_demand(doc["spec"]["serveConfigV2"])
    groups = [g for g in cluster.get("workerGroupSpecs") or [] if _worker_gpus(g) > 0]
    if not high:
        return
    assert groups, f"{name}: Serve asks for GPUs and no worker group has any"
    per_worker = {_worker_gpus(g) for g in groups}
    assert len(per_worker) == 1, f"{name}: GPU worker groups of different sizes; extend this check"
    w = per_worker.pop()
    guaranteed = sum(g["minReplicas"] if autoscaling else g["replicas"] for g in groups) * w
    most = sum(g["maxReplicas"] if autoscaling else g["replicas"] for g in groups) * w
    assert low <= guaranteed, f"{name}: Serve's minimum needs {low:g} GPUs, the gang guarantees {guaranteed:g}"
    assert high <= most, f"{name}: Serve may scale to {high:g} GPUs, the cluster can have at most {most:g}" + (
        "" if autoscaling else " (in-tree autoscaling is off)"
    )
    if autoscaling:
        useful = math.ceil(high / w)
        assert most / w <= useful, f"{name}: maxReplicas allows {most / w:g} GPU workers, Serve can fill {useful}"


def test_the_rule_catches_a_fixed_cluster_smaller_than_serves_maximum() -> None:
    (_, vllm) = next((n, d) for n, d in RAY_SERVICES if d["metadata"]["name"] == "qwen-vllm")
    bad = yaml.safe_load(yaml.safe_dump(vllm))
    bad["spec"]["rayClusterConfig"]["enableInTreeAutoscaling"] = False
    bad["spec"]["rayClusterConfig"]["workerGroupSpecs"][0].update(replicas=1, minReplicas=1, maxReplicas=1)
    with pytest.raises(AssertionError, match="at most 4"):
        test_serve_bounds_match_the_cluster("bad", bad)

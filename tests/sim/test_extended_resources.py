"""Every resource a pod asks for is fitted: TPU, AMD GPU and MIG gangs land only where the resource exists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kai_ray.scheduler.snapshot import PodPhase
from kai_ray.sim.run import build_engine
from kai_ray.sim.scenario import load_scenario

QUEUE = {"gpu": {"quota": -1, "limit": -1}, "cpu": {"quota": -1, "limit": -1}, "memory": {"quota": -1, "limit": -1}}


def _cluster(name: str, resource: str, amount: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "namespace": "ml", "labels": {"kai.scheduler/queue": "ml"}},
        "spec": {
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {"spec": {"containers": [{"name": "ray-head", "resources": {"requests": {"cpu": "1"}}}]}},
            },
            "workerGroupSpecs": [
                {
                    "groupName": "w",
                    "replicas": replicas,
                    "minReplicas": replicas,
                    "maxReplicas": replicas,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "ray-worker",
                                    "resources": {
                                        "requests": {"cpu": "1", resource: amount},
                                        "limits": {resource: amount},
                                    },
                                }
                            ]
                        }
                    },
                }
            ],
        },
    }


def _run(tmp_path: Path, nodes: list[dict[str, Any]], clusters: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    scenario = {
        "nodes": nodes,
        "queues": [{"name": "ml", "resources": QUEUE}],
        "workloads": [{"at": 0, "duration": "1h", "manifest": m} for m in clusters],
        "simulation": {"until": "2m"},
    }
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    engine = build_engine(load_scenario(path))
    engine.run()
    assert not engine.errors
    out: dict[str, tuple[str, str]] = {}
    for w in list(engine.active.values()) + list(getattr(engine, "pending", {}).values()):
        if w.job is None:
            continue
        for pod in w.job.pods:
            out[pod.name] = (pod.phase.value, pod.node or "")
    return out


NODES = [
    {"name": "cpu-node", "cpu": 64, "memory": "256Gi"},
    {"name": "tpu", "cpu": 64, "memory": "256Gi", "resources": {"google.com/tpu": 4}},
    {"name": "amd", "cpu": 64, "memory": "256Gi", "resources": {"amd.com/gpu": 8}},
    {"name": "mig", "cpu": 64, "memory": "256Gi", "resources": {"nvidia.com/mig-1g.10gb": 7}},
]


def test_tpu_amd_and_mig_gangs_land_only_where_the_resource_exists(tmp_path: Path) -> None:
    placed = _run(
        tmp_path,
        NODES,
        [
            _cluster("tpu-job", "google.com/tpu", "4", 1),
            _cluster("amd-job", "amd.com/gpu", "4", 2),
            _cluster("mig-job", "nvidia.com/mig-1g.10gb", "3", 2),
        ],
    )
    workers = {name: where for name, where in placed.items() if "worker" in name}
    assert len(workers) == 5
    for name, (phase, node) in workers.items():
        assert phase == PodPhase.RUNNING.value, name
        expected = name.split("-")[0]
        assert node == expected, (name, node)


def test_a_gang_larger_than_the_resource_stays_pending_naming_it(tmp_path: Path) -> None:
    placed = _run(tmp_path, NODES, [_cluster("big-tpu", "google.com/tpu", "4", 2)])
    workers = [where for name, where in placed.items() if "worker" in name]
    assert workers and all(phase == PodPhase.PENDING.value for phase, _ in workers)

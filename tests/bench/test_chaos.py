"""Chaos on the real API server: operator processes SIGKILLed, the scheduler's leader among them during a
preemption, while no node is over-committed, no pod bound twice, no gang left partly bound, no PodGroup lost, and
everything that fits is bound again after the last kill. ``kai-ray bench chaos`` runs the longer version."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kai_ray.bench.chaos import ChaosConfig, run_chaos
from kai_ray.k8s.base.rest import Kube
from kai_ray.testing.controlplane.harness import ControlPlane

pytestmark = pytest.mark.slow


def test_operator_kills_keep_every_invariant(
    kube: Kube,
    control_plane: ControlPlane,
    namespace: str,
    node_pool: Any,
    priority_classes: Any,
    tmp_path: Path,
) -> None:
    cfg = ChaosConfig(nodes=4, gpus_per_node=8, replicas=2, kills=5, kill_interval=(3.0, 6.0))
    names, selector = node_pool(cfg.nodes, gpus=cfg.gpus_per_node)
    capacity = {n: float(cfg.gpus_per_node) for n in names}
    result = run_chaos(
        kube, control_plane.kubeconfig_path, namespace, selector, capacity, cfg, tmp_path / "logs", progress=print
    )
    report = json.dumps(result.to_dict(), indent=1)
    print(f"\nchaos: {report}")
    assert result.kills == cfg.kills and result.leader_kills >= 1, report
    assert result.kills_during_preemption >= 1, report
    assert not result.overcommitted, report
    assert not result.double_bound, report
    assert not result.partial_gangs, report
    assert not result.lost_podgroups, report
    assert result.recovered, report
    assert not result.monitor_errors, report
    assert not result.tracebacks, report
    assert result.max_rss_mb["scheduler"] < cfg.memory_limit_mb, report

"""Fuzz through the real API server: 500 schema-accepted mutated Ray CRs, PodGroups, Queues and pods, while
good gangs keep being bound within a bound, with no traceback in the operators' logs, no operator dying, and their
memory bounded. ``kai-ray bench fuzz`` runs the longer version."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kai_ray.bench.fuzz import FuzzConfig, run_fuzz
from kai_ray.k8s.base.rest import Kube
from kai_ray.testing.controlplane.harness import ControlPlane

pytestmark = pytest.mark.slow


def test_five_hundred_bad_objects_never_stop_good_jobs(
    kube: Kube,
    control_plane: ControlPlane,
    namespace: str,
    node_pool: Any,
    priority_classes: Any,
    tmp_path: Path,
) -> None:
    cfg = FuzzConfig(objects=500, good_every=25, good_within=60.0)
    _, selector = node_pool(2, gpus=8)
    result = run_fuzz(kube, control_plane.kubeconfig_path, namespace, selector, cfg, tmp_path / "logs", say=print)
    report = json.dumps(result.to_dict(), indent=1)
    print(f"\nfuzz: {report}")
    assert result.accepted >= 500, report
    assert len(result.accepted_by_kind) == 6, report
    assert result.good_jobs >= 20 and result.good_bound == result.good_jobs, report
    assert not result.good_late, report
    assert not result.died, report
    assert not result.tracebacks, report
    assert result.max_rss_mb["scheduler"] < cfg.memory_limit_mb, report

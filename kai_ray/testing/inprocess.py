"""The settings for kai-ray's operators run inside a test or benchmark process against a test control plane.

In-process operators (as the API-server tests, the KubeRay loop test and the node-hours benchmark run them) need the
same handful of settings: the plane's kubeconfig, one namespace, no leader election, loopback ports picked by the
system, and short periods so a cycle follows a change within a fraction of a second. One function gives them, so the
tests and benchmarks cannot drift apart on what "an operator on the test plane" means.
"""

from __future__ import annotations

from typing import Any

from kai_ray.k8s.config import OperatorConfig
from kai_ray.testing.controlplane.harness import ControlPlane


def operator_config(plane: ControlPlane, namespace: str, **overrides: Any) -> OperatorConfig:
    """An :class:`OperatorConfig` for an operator of ``namespace`` on ``plane``; ``overrides`` replace any field."""
    base: dict[str, Any] = {
        "kubeconfig": str(plane.kubeconfig_path),
        "namespaces": (namespace,),
        "leader_elect": False,
        "lease_namespace": namespace,
        "lease_duration": 3.0,
        "renew_deadline": 2.0,
        "retry_period": 0.3,
        "metrics_port": 0,
        "health_port": 0,
        "bind_address": "127.0.0.1",
        "schedule_period": 0.5,
        "debounce": 0.02,
        "status_interval": 0.5,
        "bind_workers": 8,
        "write_workers": 4,
    }
    base.update(overrides)
    return OperatorConfig(**base)

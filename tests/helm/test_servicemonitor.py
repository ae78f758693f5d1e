"""The chart's optional ServiceMonitor, rendered by the real `helm`: off by default, selecting the metrics Service."""

from __future__ import annotations

from pathlib import Path

import pytest

from kai_ray.testing.controlplane import build
from tests.helm.test_chart import CHART, by_kind, render, run_helm


@pytest.fixture(scope="module")
def helm() -> Path:
    return build.ensure("helm")


def test_servicemonitor_is_off_by_default(helm: Path) -> None:
    assert by_kind(render(helm), "ServiceMonitor") == []


def test_servicemonitor_selects_the_metrics_service(helm: Path) -> None:
    docs = render(
        helm,
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.serviceMonitor.interval=15s",
        "--set",
        "metrics.serviceMonitor.labels.release=prom",
    )
    (sm,) = by_kind(docs, "ServiceMonitor")
    (svc,) = [d for d in by_kind(docs, "Service") if d["metadata"]["name"].endswith("-metrics")]
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["namespace"] == "kai-system" and sm["metadata"]["labels"]["release"] == "prom"
    assert sm["spec"]["namespaceSelector"] == {"matchNames": ["kai-system"]}
    labels = svc["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in sm["spec"]["selector"]["matchLabels"].items())
    assert sm["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s"}]
    assert any(p["name"] == "metrics" for p in svc["spec"]["ports"])


def test_servicemonitor_values_are_checked(helm: Path) -> None:
    typo = run_helm(helm, "template", "rel", str(CHART), "--set", "metrics.serviceMonitor.enable=true")
    assert typo.returncode != 0 and "enable" in typo.stderr
    bad = run_helm(helm, "template", "rel", str(CHART), "--set", "metrics.serviceMonitor.interval=often")
    assert bad.returncode != 0 and "interval" in bad.stderr
    orphan = run_helm(
        helm,
        "template",
        "rel",
        str(CHART),
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.service.enabled=false",
    )
    assert orphan.returncode != 0 and "needs metrics.service.enabled" in orphan.stderr

"""The chart's time-based fair share values reach the scheduler's real parser, and bad ones are refused by the
schema (with the real ``helm``)."""

from __future__ import annotations

import pytest

from kai_ray.cli.operator import parse_args
from tests.helm.test_chart import CHART, args_of, by_kind, helm, render, run_helm  # noqa: F401


def _scheduler_args(docs: list[dict]) -> list[str]:
    deploy = next(d for d in by_kind(docs, "Deployment") if d["metadata"]["name"].endswith("scheduler"))
    argv = args_of(deploy)
    assert argv[:3] == ["kai-ray", "operator", "scheduler"]
    return argv[3:]


def test_defaults_are_kais_and_off(helm):  # noqa: F811
    config = parse_args("scheduler", _scheduler_args(render(helm)))
    assert config.k_value == 1.0 and config.usage_db == "none"
    params = config.usage_params()
    assert (params.window_size, params.window_type, params.half_life_period) == (7 * 86400.0, "sliding", 0.0)
    assert (params.fetch_interval, params.staleness_period) == (60.0, 300.0)


def test_internal_and_prometheus_values_reach_the_parser(helm):  # noqa: F811
    docs = render(
        helm,
        "--set-json", "scheduler.kValue=0.5",
        "--set", "scheduler.usageDB.clientType=internal",
        "--set", "scheduler.usageDB.usageParams.windowSize=2d",
        "--set", "scheduler.usageDB.usageParams.windowType=cron",
        "--set-string", "scheduler.usageDB.usageParams.cronString=0 0 * * 1",
        "--set", "scheduler.usageDB.usageParams.halfLifePeriod=12h",
        "--set", "scheduler.usageDB.usageParams.fetchInterval=30s",
    )  # fmt: skip
    config = parse_args("scheduler", _scheduler_args(docs))
    params = config.usage_params()
    assert config.k_value == 0.5 and config.usage_db == "internal"
    assert (params.window_type, params.cron_string, params.half_life_period) == ("cron", "0 0 * * 1", 43200.0)
    assert (params.window_size, params.fetch_interval) == (172800.0, 30.0)
    metric = 'max by (queue_name) (my_gpus{cluster="a,b"})'
    docs = render(
        helm,
        "--set", "scheduler.usageDB.clientType=prometheus",
        "--set", "scheduler.usageDB.connectionString=http://prometheus.monitoring:9090",
        "--set", "scheduler.usageDB.usageParams.windowType=tumbling",
        "--set", "scheduler.usageDB.usageParams.tumblingWindowStartTime=2026-01-05T00:00:00Z",
        "--set-string", f"scheduler.usageDB.usageParams.extraParams.gpuAllocationMetric={metric.replace(',', chr(92) + ',')}",
    )  # fmt: skip
    config = parse_args("scheduler", _scheduler_args(docs))
    assert config.usage_db == "prometheus" and config.usage_db_url == "http://prometheus.monitoring:9090"
    assert config.usage_params().tumbling_window_start_time == 1767571200.0
    assert config.usage_extra_params == {"gpuAllocationMetric": metric}


@pytest.mark.parametrize(
    "bad,field",
    [
        ("scheduler.kValue=-1", "kValue"),
        ("scheduler.usageDB.clientType=influx", "clientType"),
        ("scheduler.usageDB.usageParams.windowSize=a-week", "windowSize"),
        ("scheduler.usageDB.usageParams.windowType=hopping", "windowType"),
        ("scheduler.usageDB.usageParams.extraParams.gpuMetric=x", "extraParams"),
        ("scheduler.usageDB.connectionString=prometheus:9090", "connectionString"),
    ],
)
def test_schema_rejects_bad_usage_values(helm, bad, field):  # noqa: F811
    out = run_helm(helm, "template", "rel", str(CHART), "--set", bad)
    assert out.returncode != 0
    assert field in out.stderr

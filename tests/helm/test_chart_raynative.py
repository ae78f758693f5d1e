"""The chart's Ray-native values (docs/ray-native.md) reach the scheduler's real flag parser, and bad ones are refused
by the schema naming the value (with the real ``helm``)."""

from __future__ import annotations

import pytest

from kai_ray.cli.operator import parse_args
from tests.helm.test_chart import CHART, helm, render, run_helm  # noqa: F401
from tests.helm.test_chart_usage import _scheduler_args

pytestmark = pytest.mark.raynative


def test_defaults_match_the_operators_defaults(helm):  # noqa: F811
    config = parse_args("scheduler", _scheduler_args(render(helm)))
    assert (config.idle_aware_victims, config.checkpoint_aware_victims, config.upgrade_surge) == (True, True, True)
    assert (config.ready_timeout, config.ready_timeout_backoff, config.ray_activity_interval) == (0.0, 60.0, 30.0)


def test_non_default_values_reach_the_parser(helm):  # noqa: F811
    docs = render(
        helm,
        "--set", "scheduler.rayNative.idleAwareVictims=false",
        "--set", "scheduler.rayNative.checkpointAwareVictims=false",
        "--set", "scheduler.rayNative.rayActivityInterval=0s",
        "--set", "scheduler.rayNative.readyTimeout=5m",
        "--set", "scheduler.rayNative.readyTimeoutBackoff=90s",
        "--set", "scheduler.rayNative.upgradeSurge=false",
    )  # fmt: skip
    argv = _scheduler_args(docs)
    for flag in ("--no-ray-idle", "--no-ray-checkpoints", "--no-upgrade-surge", "--ready-timeout=5m"):
        assert flag in argv
    config = parse_args("scheduler", argv)
    assert (config.idle_aware_victims, config.checkpoint_aware_victims, config.upgrade_surge) == (False, False, False)
    assert (config.ready_timeout, config.ready_timeout_backoff, config.ray_activity_interval) == (300.0, 90.0, 0.0)


@pytest.mark.parametrize(
    "bad,field",
    [
        ("scheduler.rayNative.readyTimeout=five-minutes", "readyTimeout"),
        ("scheduler.rayNative.readyTimeoutBackoff=-1m", "readyTimeoutBackoff"),
        ("scheduler.rayNative.rayActivityInterval=30", "rayActivityInterval"),
        ("scheduler.rayNative.idleAwareVictims=sometimes", "idleAwareVictims"),
        ("scheduler.rayNative.rayIdle=true", "rayIdle"),
    ],
)
def test_schema_rejects_bad_values_naming_them(helm, bad, field):  # noqa: F811
    out = run_helm(helm, "template", "rel", str(CHART), "--set", bad)
    assert out.returncode != 0
    assert field in out.stderr

"""Ray-native scheduling in the simulator: each Ray-native scenario with its feature off and on (the docs/ray-native.md table)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kai_ray.sim.raynative import FEATURES, markdown, run_feature
from kai_ray.sim.scenario import ScenarioError, parse_scenario

pytestmark = pytest.mark.raynative

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "ray-native"


def test_idle_aware_victims_lose_no_work_where_kai_order_loses_a_busy_session() -> None:
    off, on = run_feature(EXAMPLES / "idle.yaml", False), run_feature(EXAMPLES / "idle.yaml", True)
    assert off.work_lost_gpu_hours == pytest.approx(4.0)  # 30 busy minutes x 8 GPUs
    assert on.work_lost_gpu_hours == 0.0


def test_checkpoint_aware_order_loses_the_least_work_since_a_checkpoint() -> None:
    off, on = run_feature(EXAMPLES / "checkpoint.yaml", False), run_feature(EXAMPLES / "checkpoint.yaml", True)
    assert off.work_lost_gpu_hours == pytest.approx(49 * 8 / 60, abs=0.01)
    assert on.work_lost_gpu_hours == pytest.approx(10 * 8 / 60, abs=0.01)


def test_ready_timeout_frees_the_gpus_of_a_half_started_gang() -> None:
    off, on = run_feature(EXAMPLES / "ready-timeout.yaml", False), run_feature(EXAMPLES / "ready-timeout.yaml", True)
    assert off.half_started_gpu_hours == pytest.approx(32.0)  # 8 GPUs for the whole 4 h run
    assert on.half_started_gpu_hours < 0.7  # 8 GPUs for its 5-minute timeout
    assert off.jct_seconds["team/eval"] is None
    assert on.jct_seconds["team/eval"] is not None


def test_a_rayservice_upgrade_in_a_full_queue_serves_only_as_a_surge() -> None:
    off, on = run_feature(EXAMPLES / "upgrade.yaml", False), run_feature(EXAMPLES / "upgrade.yaml", True)
    assert off.upgrade_served is False
    assert on.upgrade_served is True and on.time_to_serve_seconds is not None
    assert on.time_to_serve_seconds < 60
    assert "| RayService upgrade surge | `upgrade.yaml` |" in markdown(
        [off, on]
        + [run_feature(EXAMPLES / name, flag) for name in FEATURES if name != "upgrade.yaml" for flag in (False, True)]
    )


def test_upgrade_at_is_for_a_rayservice_only() -> None:
    doc = {
        "nodes": [{"name": "n", "gpus": 8}],
        "workloads": [
            {
                "manifest": {
                    "apiVersion": "ray.io/v1",
                    "kind": "RayCluster",
                    "metadata": {"name": "c", "labels": {"kai.scheduler/queue": "default-queue"}},
                    "spec": {"headGroupSpec": {"template": {"spec": {"containers": [{"name": "h", "image": "r"}]}}}},
                },
                "upgradeAt": "10m",
            }
        ],
    }
    with pytest.raises(ScenarioError, match=r"workloads\[0\]\.upgradeAt: only a RayService upgrades"):
        parse_scenario(doc, "s.yaml")


def test_max_runtime_stops_a_run_and_it_stays_stopped() -> None:
    from kai_ray.sim.run import simulate
    from kai_ray.sim.run_metrics import result_document

    doc = {
        "nodes": [{"name": "n", "gpus": 8}],
        "workloads": [
            {
                "manifest": {
                    "apiVersion": "ray.io/v1",
                    "kind": "RayJob",
                    "metadata": {
                        "name": "long",
                        "labels": {"kai.scheduler/queue": "default-queue"},
                        "annotations": {"kai-ray.io/max-runtime": "10m"},
                    },
                    "spec": {
                        "entrypoint": "python train.py",
                        "submissionMode": "SidecarMode",
                        "rayClusterSpec": {
                            "headGroupSpec": {"template": {"spec": {"containers": [{"name": "h", "image": "r"}]}}}
                        },
                    },
                },
                "duration": "1h",
            }
        ],
        "simulation": {"rayFacts": True, "until": "2h"},
    }
    out = result_document(simulate(parse_scenario(doc, "s.yaml")), "s.yaml")
    w = out["workloads"]["default/long"]
    assert w["state"] == "Pending" and w["pending_reason"] == "MaxRuntimeExceeded"
    stops = [e for e in out["events"] if e["reason"] == "MaxRuntime"]
    assert len(stops) == 1 and stops[0]["t"] == pytest.approx(600, abs=2)


def test_simulate_prints_the_ray_native_figures_when_ray_facts_is_on(capsys: pytest.CaptureFixture[str]) -> None:
    from kai_ray.cli import main

    outs: list[str] = []
    for argv in (["simulate", str(EXAMPLES / "upgrade.yaml")], ["simulate", "demo"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert not exc.value.code
        outs.append(capsys.readouterr().out)
    out = outs[0]
    assert "Ray-native: work lost since checkpoint or busy phase (GPU-h)" in out
    assert "Ray-native: GPU-hours held by half-started gangs" in out
    assert "Ray-native: serve/chat-upgrade upgrade serves after" in out
    assert "Ray-native" not in outs[1], "rayFacts off (the demo): none of them"

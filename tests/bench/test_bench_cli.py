"""``kai-ray bench core`` prints the figures as JSON and refuses bad input with one line, not a traceback."""

from __future__ import annotations

import json

import pytest

from kai_ray.cli import main


def _run(argv: list[str]) -> None:
    try:
        main(argv)
    except SystemExit as exc:  # typer exits 0 after a successful command
        assert exc.code in (0, None)


def test_bench_core_json(capsys: pytest.CaptureFixture[str]) -> None:
    _run(["bench", "core", "--nodes", "40", "--gpus-per-node", "8", "--jobs", "50", "--gang", "8", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["binds"] == 40 * 8  # 50 gangs of 8 on 320 GPUs: 40 fit
    for key in ("pods_per_second", "cycle_seconds", "peak_rss_mb"):
        assert out[key] > 0


def test_bench_core_preemption_json(capsys: pytest.CaptureFixture[str]) -> None:
    _run(
        [
            "bench",
            "core",
            "--preemption",
            "--nodes",
            "20",
            "--running-jobs",
            "160",
            "--gang",
            "2",
            "--gpus-per-pod",
            "4",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert out["preemptor_scheduled"] is True
    assert out["evictions"] == 8  # two 4-GPU pods: exactly 8 single-GPU victims, no more
    assert out["decision_seconds"] > 0


def test_bench_core_churn_keeps_up_with_a_steady_stream(capsys: pytest.CaptureFixture[str]) -> None:
    """Every cycle 5 gangs of 8 arrive and 5 running ones complete on a 90%-full cluster: each cycle binds what
    arrived (the completions made room for it), so nothing is left pending and the run is bounded by --cycles."""
    argv = ["bench", "core", "--churn", "--nodes", "50", "--arrivals", "5", "--cycles", "12", "--json"]
    _run(argv)
    out = json.loads(capsys.readouterr().out)
    assert out["cycles"] == 12 and not out["internal_errors"]
    assert out["gangs_bound"] == out["gangs_completed"] == 60 and out["pods_bound"] == 480
    assert out["pending_gangs_at_end"] == 0
    assert 0 < out["cycle_p50_seconds"] <= out["cycle_p99_seconds"]
    assert out["open_p50_seconds"] > 0 and out["actions_p50_seconds"] > 0
    assert out["pods_per_second"] == pytest.approx(8 * out["gangs_per_second"])


def test_bench_core_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "core", "--nodes", "-3"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--nodes" in err and "Traceback" not in err

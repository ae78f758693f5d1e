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


def test_bench_core_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "core", "--nodes", "-3"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--nodes" in err and "Traceback" not in err

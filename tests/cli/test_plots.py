"""``simulate --report``: plots titled by the policy, and no simulation run when plots cannot be drawn."""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

import pytest

from kai_ray.cli import main


def test_report_without_matplotlib_fails_before_the_simulation(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A newcomer's report: the check came after the whole run (135 CPU s lost on a trace)."""
    import kai_ray.sim.run

    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    def never(*_: Any, **__: Any) -> Any:
        raise AssertionError("the simulation ran")

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    monkeypatch.setattr(kai_ray.sim.run, "simulate", never)
    capsys.readouterr()
    for argv in (["simulate", "demo", "--report", str(tmp_path)], ["demo", "--report", str(tmp_path)]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        assert "--report: plots need matplotlib" in capsys.readouterr().err


def test_report_titles_name_the_policy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import kai_ray.cli.simulate

    titles: list[str] = []
    monkeypatch.setattr(
        kai_ray.cli.simulate, "write_report_or_fail", lambda res, report, title: titles.append(title) or []
    )
    for policy in ("kai-ray", "kai"):
        with pytest.raises(SystemExit) as exc:
            main(["simulate", "demo", "--policy", policy, "--report", str(tmp_path), "--json"])
        assert not exc.value.code
    assert titles == ["kai-ray", "KAI semantics"]


def test_pending_plot_legend_shows_the_queue_colours_and_a_readable_axis(tmp_path: Path) -> None:
    """The time-based fair-share example pends for days: the axis was minutes up to ~10,000; the legend showed grey
    patches while the bars are coloured by queue."""
    from kai_ray.sim.policy import POLICIES
    from kai_ray.sim.report import _colors, _pending, _queues, pyplot
    from kai_ray.sim.run import simulate
    from kai_ray.sim.scenario import load_scenario

    root = Path(__file__).resolve().parents[2]
    res = simulate(load_scenario(root / "examples" / "time-based-fairshare" / "two-queues.yaml"), POLICIES["kai-ray"])
    plt = pyplot()
    figures: list[Any] = []
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(plt, "close", figures.append)
    try:
        colors = _colors(plt, _queues(res))
        _pending(plt, res, tmp_path / "p.png", "kai-ray", colors)
    finally:
        monkeypatch.undo()
    (ax,) = figures[0].axes
    assert ax.get_xlabel() == "time pending (days)" and ax.get_xlim()[1] < 30
    legend = {t.get_text() for t in ax.get_legend().get_texts()}
    assert legend == {"queue team-a", "queue team-b", "before its first start", "after evictions"}
    for patch in ax.get_legend().get_patches()[:2]:
        assert patch.get_facecolor()[:3] != (0.5333333333333333, 0.5333333333333333, 0.5333333333333333)
    plt.close(figures[0])


def _drawn(kind: str, res: Any, tmp_path: Path) -> list[Any]:
    """The figures a report plot drew (kept open), for its legend and texts."""
    from kai_ray.sim import report

    plt = report.pyplot()
    figures: list[Any] = []
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(plt, "close", figures.append)
    try:
        queues = report._queues(res)
        colors = report._colors(plt, queues)
        scale, unit = report._unit(max(1.0, res.end - res.start))
        if kind == "timeline":
            report._timeline(plt, res, tmp_path / "t.png", "kai-ray", colors, scale, unit)
        else:
            report._allocation(plt, res, tmp_path / "a.png", "kai-ray", queues, colors, scale, unit)
    finally:
        monkeypatch.undo()
    return figures


def test_legends_list_only_what_occurs_and_labels_stay_inside(tmp_path: Path) -> None:
    from kai_ray.sim.policy import POLICIES
    from kai_ray.sim.run import simulate
    from kai_ray.sim.scenario import load_scenario, parse_scenario
    from tests.sim.helpers import ray_cluster

    calm = parse_scenario(
        {
            "nodes": [{"name": "n", "gpus": 8}],
            "queues": [{"name": "team", "resources": {"gpu": {"quota": 8, "limit": -1, "overQuotaWeight": 1}}}],
            "workloads": [{"manifest": ray_cluster("a", "team", workers=1, gpus=4), "duration": 600}],
        }
    )
    (fig,) = _drawn("timeline", simulate(calm, POLICIES["kai-ray"]), tmp_path)
    legend = {t.get_text() for t in fig.axes[0].get_legend().get_texts()}
    assert legend == {"running (team)", "completed"}, "nothing pended, was evicted or scaled: no such entries"

    root = Path(__file__).resolve().parents[2]
    demo = simulate(load_scenario(root / "kai_ray" / "sim" / "demo" / "scenario.yaml"), POLICIES["kai-ray"])
    (fig,) = _drawn("timeline", demo, tmp_path)
    legend = {t.get_text() for t in fig.axes[0].get_legend().get_texts()}
    assert "shrunk (kept running); -N: pods" in legend and "run stopped / restarted" not in legend, legend
    (fig,) = _drawn("allocation", demo, tmp_path)
    quotas = [t for ax in fig.axes for t in ax.texts if t.get_text().startswith("quota ")]
    assert quotas and all(0.0 <= t.get_position()[0] <= 1.0 for t in quotas), "quota labels inside their axes"

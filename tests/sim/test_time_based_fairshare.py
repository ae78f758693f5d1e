"""Time-based fair share in the simulator: two queues with whole-cluster jobs take turns, and over days the GPU
time they get approaches their over-quota weights; without usage, the first to start keeps the cluster."""

from __future__ import annotations

import copy
import json
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray.sim.engine import SimResult
from kai_ray.sim.run import simulate
from kai_ray.sim.scenario import ScenarioError, parse_scenario
from tests.sim.helpers import REPO, kai_ray

SCENARIO = REPO / "examples" / "time-based-fairshare" / "two-queues.yaml"
DAY = 86400.0


def _doc() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(SCENARIO.read_text())
    return doc


def _run(doc: dict[str, Any]) -> SimResult:
    return simulate(parse_scenario(doc, str(SCENARIO), SCENARIO.parent))


def gpu_share(res: SimResult, t0: float, t1: float) -> dict[str, float]:
    """Each leaf queue's share of the GPU time allocated in [t0, t1), from the world's allocation samples."""
    acc: dict[str, float] = {}
    samples = [*res.samples, (res.end, res.samples[-1][1])]
    for (ta, alloc), (tb, _) in pairwise(samples):
        lo, hi = max(ta, t0), min(tb, t1)
        if hi > lo:
            for q, v in alloc.items():
                acc[q] = acc.get(q, 0.0) + v * (hi - lo)
    total = sum(acc.values())
    return {q: v / total for q, v in acc.items()}


@pytest.mark.slow
def test_long_run_allocation_converges_to_the_weights() -> None:
    res = _run(_doc())
    assert not res.errors
    assert res.end == 7 * DAY
    weight_a = 2 / 3
    week = gpu_share(res, 0, res.end)
    after_first_day = gpu_share(res, DAY, res.end)
    # kValue 10: a queue's turn ends once its usage passes its weight share by about 10%, so the split settles a
    # point or two above the weights (68.5% here), every day of the week
    assert week["team-a"] == pytest.approx(weight_a, abs=0.03)
    assert after_first_day["team-a"] == pytest.approx(weight_a, abs=0.03)
    for day in range(1, 7):
        assert gpu_share(res, day * DAY, (day + 1) * DAY)["team-a"] == pytest.approx(weight_a, abs=0.05)
    # the allocation really alternates, in bursts of hours (not minutes) once a day of history exists
    reclaims = [e["t"] for e in res.events if e["type"] == "reclaim" and e["t"] >= DAY]
    assert len(reclaims) >= 2 * 6
    gaps = [b - a for a, b in pairwise(reclaims)]
    assert min(gaps) > 3600
    # the recorded usage stays around the weights, and the summary says the same as the world
    assert res.usage is not None
    last = [s for t, s in res.usage.samples if t >= DAY]
    assert all(0.5 < s["team-a"].usage < 0.8 for s in last)
    from kai_ray.sim.fair_share_usage import usage_document

    doc = usage_document(res.usage, res.start, res.end)
    assert doc["queues"]["team-a"]["weight_share"] == pytest.approx(weight_a, abs=1e-4)
    assert doc["queues"]["team-a"]["gpu_share"] == pytest.approx(week["team-a"], abs=1e-3)


def test_without_usage_the_first_queue_keeps_the_cluster() -> None:
    for change in ({"kValue": 0}, {"usageParams": None}):
        doc = _doc()
        doc["config"] = {**doc["config"], **change}
        if change.get("usageParams", 1) is None:
            del doc["config"]["usageParams"]
        doc["simulation"]["until"] = "48h"
        res = _run(doc)
        assert gpu_share(res, 0, res.end)["team-a"] > 0.99
        assert not [e for e in res.events if e["type"] == "reclaim"]


def test_cli_prints_the_split_and_plots_fair_share(tmp_path: Path) -> None:
    doc = _doc()
    doc["simulation"]["until"] = "24h"
    path = tmp_path / "tbf.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = kai_ray("simulate", str(path), "--report", str(tmp_path / "report"))
    assert out.returncode == 0, out.stderr
    assert "Time-based fair share (kValue 10, sliding window 1d, half-life 12h)" in out.stdout
    assert "team-a" in out.stdout and "66.67%" in out.stdout
    png = tmp_path / "report" / "fair-share.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = kai_ray("simulate", str(path), "--json")
    usage = json.loads(out.stdout)["usage"]
    assert usage["kValue"] == 10 and usage["usageParams"]["windowSize"] == DAY
    assert set(usage["queues"]) == {"team-a", "team-b"}


def test_queues_view_shows_each_queues_usage() -> None:
    out = kai_ray("queues", "--scenario", str(SCENARIO), "--at", "30h", "-o", "json")
    assert out.returncode == 0, out.stderr
    usage = {q["name"]: q["usage"] for q in json.loads(out.stdout)["queues"]}
    assert usage["team-a"]["gpu"] > usage["team-b"]["gpu"] > 0  # team-a started first and held the cluster longer
    assert usage["research"]["gpu"] == pytest.approx(usage["team-a"]["gpu"] + usage["team-b"]["gpu"], abs=1e-3)
    text = kai_ray("queues", "--scenario", str(SCENARIO), "--at", "30h")
    assert text.returncode == 0, text.stderr
    assert "USAGE" in text.stdout and f"{100 * usage['team-a']['gpu']:.1f}%" in text.stdout
    plain = kai_ray("queues", "--scenario", str(REPO / "kai_ray" / "sim" / "demo" / "scenario.yaml"), "--at", "45m")
    assert plain.returncode == 0 and "USAGE" not in plain.stdout  # no usage accounted: no column


@pytest.mark.parametrize(
    "config,message",
    [
        ({"usageParams": {"windowSize": "a week"}}, "config.usageParams.windowSize: 'a week' is not a duration"),
        ({"usageParams": {"windowType": "hopping"}}, "config.usageParams.windowType: 'hopping' is not one of"),
        ({"usageParams": {"halfLife": "1h"}}, "config.usageParams.halfLife: unknown field"),
        ({"usageParams": "1d"}, "config.usageParams: expected a mapping"),
        ({"kValue": -1}, "config.kValue: -1 must not be negative"),
    ],
)
def test_bad_usage_settings_name_the_field(config: dict[str, Any], message: str) -> None:
    doc = copy.deepcopy(_doc())
    doc["config"] = config
    with pytest.raises(ScenarioError, match=message.replace("(", r"\(").replace(".", r"\.")):
        parse_scenario(doc, "s.yaml", SCENARIO.parent)

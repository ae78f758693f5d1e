"""The simulator's incremental session changes nothing it decides: each run with the engine's
``IncrementalState`` (told of every PodGroup an event touches) equals the run that builds every cycle's session
from scratch, event for event."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kai_ray.bench.trace_gen import write_trace
from kai_ray.sim.engine import Engine, EngineOptions, SimResult
from kai_ray.sim.raynative import FEATURES
from kai_ray.sim.run import build_engine
from kai_ray.sim.scenario import load_scenario
from kai_ray.sim.trace import build_trace_engine, read_nodes, read_pods

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = [
    ROOT / "kai_ray" / "sim" / "demo" / "scenario.yaml",
    ROOT / "examples" / "dra" / "h100-training.yaml",
    ROOT / "examples" / "time-based-fairshare" / "two-queues.yaml",
    *(ROOT / "examples" / "ray-native" / name for name in sorted(FEATURES)),
]


def _both(make: Callable[[], Engine]) -> tuple[SimResult, SimResult]:
    incremental = make()
    scratch: Engine = make()
    scratch.state = None
    return incremental.run(), scratch.run()


def _same(a: SimResult, b: SimResult) -> None:
    assert a.cycles == b.cycles
    assert a.events == b.events
    assert a.samples == b.samples
    assert a.errors == b.errors == []


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_scenario_runs_the_same_with_the_incremental_session(path: Path) -> None:
    _same(*_both(lambda: build_engine(load_scenario(path))))


def test_trace_replay_runs_the_same_with_the_incremental_session(tmp_path: Path) -> None:
    nodes_csv, pods_csv = write_trace(tmp_path, 30, 400, seed=5, span=4 * 3600, mean_run=3600)

    def make() -> Engine:
        pods, _ = read_pods(pods_csv)
        return build_trace_engine(read_nodes(nodes_csv), pods, None, EngineOptions(restart_cost=0.0))

    _same(*_both(make))

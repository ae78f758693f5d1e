"""Every YAML scenario under scenarios/ runs one cycle and must meet its expectations."""

from __future__ import annotations

from pathlib import Path

import pytest

from kai_ray.scheduler.cycle import run_cycle
from kai_ray.testing.cycle_fixture import check, load_fixture

SCENARIOS = sorted((Path(__file__).parent / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario(path: Path) -> None:
    sc = load_fixture(path)
    res = run_cycle(sc.snapshot)
    internal = [f for f in res.findings if f.kind == "Cycle"]
    assert not internal, internal[0].message
    errors = check(sc, res)
    assert not errors, "\n".join(errors)

"""The DRA example scenario: claims placed by device attributes, claimed GPUs charged to their queues."""

from __future__ import annotations

from pathlib import Path

import pytest

from kai_ray.scheduler.queue_views import queue_rows
from kai_ray.scheduler.snapshot import PodPhase
from kai_ray.sim.run import build_engine
from kai_ray.sim.scenario import load_scenario
from kai_ray.sim.scenario_view import scenario_view

pytestmark = pytest.mark.dra

SCENARIO = Path(__file__).resolve().parents[2] / "examples" / "dra" / "h100-training.yaml"


def test_claims_land_on_matching_devices_and_hold_them() -> None:
    scn = load_scenario(SCENARIO)
    scn.simulation.until = 60.0
    engine = build_engine(scn)
    engine.run()
    assert not engine.errors
    placed: dict[str, str] = {}
    for w in engine.active.values():
        assert w.job is not None
        for pod in w.job.pods:
            assert pod.phase is PodPhase.RUNNING
            placed[pod.name] = pod.node or ""
    workers = {name: node for name, node in placed.items() if "worker" in name}
    assert sorted(n for name, n in workers.items() if name.startswith("dra-train"))[0].startswith("h100")
    assert all(n.startswith("h100") for name, n in workers.items() if name.startswith("dra-train"))
    assert all(n == "a100" for name, n in workers.items() if name.startswith("sweep"))
    held = [dev for claim in engine.claims.values() for devs in (claim.allocation or {}).values() for dev in devs]
    assert len(held) == len(set(held)) == 8  # 2 workers x 2 H100s + 4 trials x 1 A100
    a100 = [dev for dev in held if "/a100/" in dev]
    assert len(a100) == 4


def test_queues_view_charges_claimed_gpus() -> None:
    view = scenario_view(load_scenario(SCENARIO), 60.0)
    rows = {row.name: row for row in queue_rows(view.snapshot, view.last)}
    assert rows["training"].allocated == {"gpu": 4.0, "cpu": 18000.0, "memory": pytest.approx(136 * 2**30)}
    assert rows["research"].allocated is not None and rows["research"].allocated["gpu"] == 4
    assert rows["ml"].allocated is not None and rows["ml"].allocated["gpu"] == 8

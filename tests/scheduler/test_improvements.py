"""kai-ray's deliberate differences from KAI's victim search, each shown as a strict improvement.

The same cluster is run twice: with the option off (KAI's own outcome, as its scenario search produces it) and on
(kai-ray's default). The scenarios themselves, with kai-ray's outcome, are in ``scenarios/improvement-*.yaml``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from kai_ray.scheduler.cycle import run_cycle
from kai_ray.testing.cycle_fixture import load_fixture

SCENARIOS = Path(__file__).parent / "scenarios"


def _run(name: str, **options: object):  # type: ignore[no-untyped-def]
    sc = load_fixture(SCENARIOS / f"{name}.yaml")
    snap = replace(sc.snapshot, config=replace(sc.snapshot.config, **options))
    return run_cycle(snap)


def test_fewest_nodes_same_losses_one_node() -> None:
    kai = _run("improvement-fewest-nodes", fewest_nodes=False)
    ours = _run("improvement-fewest-nodes")
    kai_nodes = {b.node for b in kai.binds if b.job == "default/serve"}
    our_nodes = {b.node for b in ours.binds if b.job == "default/serve"}
    assert len(kai_nodes) > 1, kai_nodes  # KAI spreads the gang over the nodes of the newest victims
    assert len(our_nodes) == 1, our_nodes
    assert len(ours.evictions) == len(kai.evictions) == 4  # no more pods lost
    victims = {e.job for e in ours.evictions}
    assert all(e.action.value == "preempt" for e in ours.evictions)
    assert victims <= {f"default/t{i:02d}" for i in range(12)}  # same queue, same (train) priority


def test_minimal_victims_drops_the_unneeded_one() -> None:
    kai = _run("improvement-minimal-victims", minimal_victims=False)
    ours = _run("improvement-minimal-victims")
    moved = {e.job: e.moved_to for e in kai.evictions}
    assert moved == {"default/a": "n1", "default/c": None}  # KAI: a is evicted and re-created on n1's idle GPU
    assert {e.job for e in ours.evictions} == {"default/c"}  # kai-ray: a keeps running
    assert ours.jobs["default/build"].scheduled and kai.jobs["default/build"].scheduled

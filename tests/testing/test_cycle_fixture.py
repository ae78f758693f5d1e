"""The cycle fixture and the simulator scenario share one node vocabulary and one ``config:`` parser."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kai_ray.bridge import node_from_api
from kai_ray.sim.scenario import parse_scenario
from kai_ray.testing.cycle_fixture import ScenarioError, fixture_from_dict

NODE: dict[str, Any] = {
    "name": "gpu",
    "count": 2,
    "gpus": 8,
    "cpu": "96",
    "memory": "768Gi",
    "gpuMemory": "80Gi",
    "maxPods": 50,
    "labels": {"zone": "a"},
    "taints": [{"key": "dedicated", "value": "infer", "effect": "NoExecute"}],
    "unschedulable": True,
    "ready": False,
}


def test_a_node_entry_means_the_same_in_a_fixture_and_in_a_simulator_scenario() -> None:
    fixture_nodes = fixture_from_dict({"name": "n", "nodes": [NODE]}).snapshot.nodes
    scenario = parse_scenario({"nodes": [NODE]})
    sim_nodes = [node_from_api(n) for n in scenario.nodes]
    assert [n.name for n in fixture_nodes] == ["gpu-0", "gpu-1"]
    for mine, theirs in zip(fixture_nodes, sim_nodes, strict=True):
        # the simulator's nodes also carry the labels an API server's nodes have (hostname, GPU memory)
        assert theirs.labels == {**mine.labels, "kubernetes.io/hostname": mine.name, "nvidia.com/gpu.memory": "81920"}
        assert dataclasses.replace(theirs, labels=mine.labels) == mine
    assert fixture_nodes[0].gpu_memory_mib == 81920 and fixture_nodes[0].max_pods == 50
    assert not fixture_nodes[0].ready and fixture_nodes[0].unschedulable


def test_snake_case_keys_are_accepted_by_the_simulator_too() -> None:
    scenario = parse_scenario({"nodes": [{"name": "n", "gpus": 4, "max_pods": 7, "gpu_memory": 100}]})
    node = node_from_api(scenario.nodes[0])
    assert (node.allocatable.gpu, node.max_pods, node.gpu_memory_mib) == (4.0, 7, 100)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"nodes": [{"name": "n", "gpu": 8}]}, "nodes[0].gpu: unknown field (did you mean gpus?)"),
        ({"config": {"placement_gpu": "nope"}}, "config.placementGpu: 'nope' is not one of binpack, spread"),
        ({"config": {"actions": ["allocat"]}}, "config.actions[0]: 'allocat' is not one of allocate"),
        ({"config": {"kValue": -1}}, "config.kValue: -1 must not be negative"),
    ],
)
def test_fixtures_get_the_simulators_checks(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        fixture_from_dict({"name": "bad", **doc})
    assert str(err.value).startswith(message)
    with pytest.raises(ScenarioError) as err:
        parse_scenario({"nodes": [{"name": "n"}], **doc}, "s.yaml")
    assert str(err.value).startswith(f"s.yaml: {message}")


def test_the_kai_harness_keeps_upstream_defaults_unless_the_case_sets_them() -> None:
    base = {"name": "k", "harness": "kai", "nodes": [{"name": "node0", "gpus": 2}]}
    sc = fixture_from_dict(base)
    node = sc.snapshot.nodes[0]
    assert (node.allocatable.cpu, node.allocatable.memory, node.gpu_memory_mib) == (20_000_000.0, 20e9, 100)
    assert node.labels == {"kai.scheduler/type": "node0"}
    assert (sc.snapshot.config.max_consolidation_preemptees, sc.snapshot.config.default_staleness_grace) == (-1, 0.0)
    given = fixture_from_dict({**base, "config": {"maxConsolidationPreemptees": 3, "default_staleness_grace": "1m"}})
    assert (given.snapshot.config.max_consolidation_preemptees, given.snapshot.config.default_staleness_grace) == (
        3,
        60.0,
    )

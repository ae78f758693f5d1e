"""The simulator reads a workload's queue by the podgrouper's one rule (KAI's): the queue label, else ``project``,
else the default queue; a queue label that is there but empty names no queue."""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray.sim.scenario import ScenarioError, parse_scenario

UNLIMITED = {"gpu": {"quota": -1, "limit": -1}, "cpu": {"quota": -1, "limit": -1}, "memory": {"quota": -1, "limit": -1}}


def scenario(labels: dict[str, str]) -> dict[str, Any]:
    head = {"template": {"spec": {"containers": [{"name": "h", "image": "r"}]}}}
    return {
        "nodes": [{"name": "n", "gpus": 8}],
        "queues": [{"name": "vision", "resources": UNLIMITED}],
        "workloads": [
            {
                "manifest": {
                    "apiVersion": "ray.io/v1",
                    "kind": "RayCluster",
                    "metadata": {"name": "c", "labels": labels},
                    "spec": {"headGroupSpec": head},
                }
            }
        ],
    }


def test_a_project_label_names_the_queue() -> None:
    parse_scenario(scenario({"project": "vision"}), "s.yaml")  # 'vision' is the only queue: the project named it
    with pytest.raises(ScenarioError, match=r"queue 'default-queue' is not defined"):
        parse_scenario(scenario({}), "s.yaml")


def test_the_queue_label_comes_before_the_project() -> None:
    with pytest.raises(
        ScenarioError, match=r"workloads\[0\] \(RayCluster default/c\): queue 'research' is not defined"
    ):
        parse_scenario(scenario({"kai.scheduler/queue": "research", "project": "vision"}), "s.yaml")


def test_an_empty_queue_label_names_no_queue() -> None:
    with pytest.raises(ScenarioError, match=r"queue '' is not defined in queues"):
        parse_scenario(scenario({"kai.scheduler/queue": "", "project": "vision"}), "s.yaml")

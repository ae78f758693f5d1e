"""The semi-preemptible example in the simulator: the training cluster keeps its core (head and minReplicas workers)
through two preemptions and loses only burst workers; without the label the second preemption takes all of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kai_ray import constants as c
from kai_ray.sim.run import simulate
from kai_ray.sim.run_metrics import result_document
from kai_ray.sim.scenario import load_scenario
from tests.sim.helpers import kai_ray, write_yaml

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "semi-preemptible" / "semi-preemptible.yaml"


def _run(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = result_document(simulate(load_scenario(path)), str(path))
    return doc


def _evicted_pods(doc: dict[str, Any], workload: str) -> list[str]:
    return [
        p
        for e in doc["events"]
        if e["workload"] == workload and e.get("pods") and e["type"] in ("preempt", "reclaim")
        for p in e["pod_names"]
    ]


def test_the_core_survives_and_only_burst_workers_are_preempted() -> None:
    doc = _run(EXAMPLE)
    train = doc["workloads"]["team/pretrain"]
    assert train["state"] == "Running" and train["runs_stopped"] == 0
    gone = _evicted_pods(doc, "team/pretrain")
    assert sorted(gone) == [f"pretrain-gpu-worker-{i}" for i in range(4, 8)]  # burst workers; never the head, 0, 1
    assert doc["workloads"]["team/chat"]["state"] == "Running"
    canary = doc["workloads"]["team/chat-canary"]
    assert canary["state"] == "Pending" and canary["pending_reason"] == "NonPreemptibleOverQuota"


def test_without_the_label_the_second_service_takes_the_whole_cluster(tmp_path: Path) -> None:
    raw = yaml.safe_load(EXAMPLE.read_text())
    del raw["workloads"][0]["manifest"]["metadata"]["labels"][c.PREEMPTIBILITY_LABEL]
    doc = _run(write_yaml(tmp_path / "plain.yaml", raw))
    assert doc["workloads"]["team/pretrain"]["runs_stopped"] == 1
    assert doc["workloads"]["team/chat-canary"]["state"] == "Running"


def _annotated_team(raw: dict[str, Any], value: str) -> None:
    """The team queue as a manifest, with its default preemptibility annotation."""
    short = raw["queues"][1]
    spec = {"parentQueue": short["parentQueue"], "resources": short["resources"]}
    raw["queues"][1] = {"metadata": {"name": "team", "annotations": {c.DEFAULT_PREEMPTIBILITY: value}}, "spec": spec}


def test_a_queue_default_makes_its_clusters_semi_preemptible(tmp_path: Path) -> None:
    raw = yaml.safe_load(EXAMPLE.read_text())
    del raw["workloads"][0]["manifest"]["metadata"]["labels"][c.PREEMPTIBILITY_LABEL]
    _annotated_team(raw, "semi-preemptible")
    doc = _run(write_yaml(tmp_path / "queue-default.yaml", raw))
    assert doc["workloads"]["team/pretrain"]["runs_stopped"] == 0
    # the default replaces what the services' priority class derived too: their core is all of them (replicas =
    # minReplicas), so they are as protected as before and the canary still waits for in-quota room
    assert doc["workloads"]["team/chat-canary"]["pending_reason"] == "NonPreemptibleOverQuota"


def test_an_unknown_queue_default_is_one_line_and_exit_2(tmp_path: Path) -> None:
    raw = yaml.safe_load(EXAMPLE.read_text())
    _annotated_team(raw, "sometimes")
    out = kai_ray("simulate", str(write_yaml(tmp_path / "bad.yaml", raw)))
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0
    assert "queues[1] (Queue team): metadata.annotations[kai-ray.io/default-preemptibility]: 'sometimes'" in out.stderr

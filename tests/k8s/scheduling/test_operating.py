"""Operating kai-ray on the real kube-apiserver: the scheduler's metrics after a preemption, the queue and pending
views against a live cluster, and unknown fields reported as Warning Events.

Real: the API server, etcd, our CRDs and KubeRay's, KWOK nodes; the scheduler and podgrouper run in-process; metrics
are scraped over HTTP from the scheduler's own server; the views run through the ``kai-ray`` entry point.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from kai_ray.cli import main
from kai_ray.k8s.base.rest import Kube, events_path, queues_path, ray_path
from kai_ray.testing.controlplane.harness import ControlPlane, free_port
from tests.k8s.helpers import bound, condition, gpu_use, make_gang, podgroup, queue_body, wait_until

NodePool = Callable[..., tuple[list[str], dict[str, str]]]
DOCS = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"


def _scrape(port: int) -> dict[str, Any]:
    """{family name: (type, [(sample name, labels, value)])} from the scheduler's /metrics endpoint."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {
        f.name: (f.type, [(s.name, s.labels, s.value) for s in f.samples]) for f in text_string_to_metric_families(text)
    }


def _value(families: dict[str, Any], sample: str, **labels: str) -> float | None:
    for _, samples in families.values():
        for name, got, value in samples:
            if name == sample and all(got.get(k) == v for k, v in labels.items()):
                return float(value)
    return None


def _documented() -> set[str]:
    return set(re.findall(r"^\| `([a-z0-9_]+)` \|", DOCS.read_text(), flags=re.M))


def _exposed_name(family: str, kind: str) -> str:
    return f"{family}_total" if kind == "counter" else family


def test_metrics_after_a_preemption(
    kube: Kube, namespace: str, queues: Any, node_pool: NodePool, run_scheduler: Any, priority_classes: Any
) -> None:
    _, selector = node_pool(2, gpus=8)
    queues("dept", gpu_quota=16)
    team = queues("team", gpu_quota=16, parent="dept")
    port = free_port()
    run_scheduler(node_selector=selector, metrics_port=port, bind_address="127.0.0.1")

    training = make_gang(kube, namespace, "training", pods=4, gpus=4, queue=team, priority="train")
    wait_until("training to fill the cluster", lambda: len(bound(kube, namespace, training)) == 4, 30)
    make_gang(kube, namespace, "huge", pods=1, gpus=32, queue=team, priority="train")
    serving = make_gang(kube, namespace, "serving", pods=2, gpus=4, queue=team, priority="inference")
    wait_until("inference to be bound", lambda: len(bound(kube, namespace, serving)) == 2, 45)
    wait_until("huge's verdict", lambda: condition(podgroup(kube, namespace, "huge"), "Scheduled"), 30)

    def settled() -> dict[str, Any] | None:
        fam = _scrape(port)
        pending = _value(fam, "kai_ray_queue_pending_podgroups", queue_name=team)
        allocated = _value(fam, "kai_queue_allocated_gpus", queue_name=team)
        in_use = sum(gpu_use(kube, [namespace]).values())
        return fam if pending is not None and pending >= 1 and allocated == in_use else None

    fam = wait_until("the per-queue gauges after the preemption", settled, 30)
    labels = {"queue_name": team, "queue_metadata_name": team, "queue_display_name": ""}
    assert _value(fam, "kai_queue_info", **labels) == 1
    assert _value(fam, "kai_queue_deserved_gpus", **labels) == 16
    assert _value(fam, "kai_queue_quota_cpu_cores", **labels) == -1
    assert _value(fam, "kai_queue_fair_share_gpu", **labels) == 16
    assert _value(fam, "kai_queue_allocated_gpus", queue_name=f"{namespace}-dept") == _value(
        fam, "kai_queue_allocated_gpus", queue_name=team
    )
    assert _value(fam, "kai_ray_queue_pending_podgroups", queue_name=f"{namespace}-dept") >= 1  # type: ignore[operator]
    assert _value(fam, "kai_ray_queue_pending_pods", queue_name=team) >= 1  # type: ignore[operator]
    # the preemption: by queue and action (ours), per victim PodGroup (KAI's), and who made room for whom
    assert _value(fam, "kai_ray_queue_evictions_total", queue_name=team, action="preempt") >= 1  # type: ignore[operator]
    evicted = _value(fam, "kai_pod_group_evicted_pods_total", podgroup="training", action="preempt", nodepool="default")
    assert evicted is not None and evicted >= 1
    assert _value(fam, "kai_podgroups_scheduled_by_action", action="allocate") >= 1  # type: ignore[operator]
    assert _value(fam, "kai_podgroups_scheduled_by_action", action="preempt") >= 1  # type: ignore[operator]
    assert fam["kai_podgroups_scheduled_by_action"][0] == "unknown", "KAI's exact name: no _total suffix"
    # latencies
    assert _value(fam, "kai_ray_time_to_schedule_seconds_count", queue_name=team) >= 2  # type: ignore[operator]
    assert _value(fam, "kai_task_scheduling_latency_milliseconds_count") >= 6  # type: ignore[operator]
    assert _value(fam, "kai_task_bind_latency_milliseconds_count") >= 6  # type: ignore[operator]
    assert _value(fam, "kai_e2e_scheduling_latency_milliseconds") is not None
    assert _value(fam, "kai_action_scheduling_latency_milliseconds", action="preempt") is not None
    cycles = _value(fam, "kai_ray_scheduler_cycles_total")
    for phase in ("snapshot", "session_open", "actions", "dispatch", "report"):
        # one observation per cycle and phase (the scrape may fall between a cycle's count and its phases)
        seen = _value(fam, "kai_ray_scheduler_phase_duration_seconds_count", phase=phase)
        assert seen is not None and cycles is not None and abs(seen - cycles) <= 1, (phase, seen, cycles)
    assert _value(fam, "kai_ray_status_writes_total", kind="event", result="ok") >= 1  # type: ignore[operator]
    # process metrics, no _created series, and docs/metrics.md lists exactly what is exported
    assert _value(fam, "process_resident_memory_bytes") > 0  # type: ignore[operator]
    assert not [n for _, samples in fam.values() for n, _, _ in samples if n.endswith("_created")]
    exported = {_exposed_name(name, kind) for name, (kind, _) in fam.items()}
    assert exported - _documented() == set(), "every exported family is in docs/metrics.md"
    podgrouper_only = {
        "kai_ray_podgrouper_podgroups_total",
        "kai_ray_podgrouper_pods_stamped_total",
        "kai_ray_podgrouper_owners_marked_total",
        "kai_ray_reconcile_errors_total",
    }
    pool_only = {"target_info"}  # with --node-pool (tests/k8s/scheduling/test_node_pools.py)
    assert _documented() - exported == podgrouper_only | pool_only


def _cli_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, Any]:
    capsys.readouterr()
    try:
        main(argv)
    except SystemExit as exc:
        assert not exc.code, capsys.readouterr().err
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def test_queue_and_pending_views_on_the_cluster(
    kube: Kube,
    namespace: str,
    queues: Any,
    node_pool: NodePool,
    run_scheduler: Any,
    priority_classes: Any,
    control_plane: ControlPlane,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, selector = node_pool(1, gpus=8)
    dept = queues("dept", gpu_quota=8)
    team_a = queues("a", gpu_quota=8, parent="dept")
    team_b = queues("b", gpu_quota=0, parent="dept")
    run_scheduler(node_selector=selector)
    # a non-preemptible gang inside its queue's quota fills the node: nothing can take its GPUs
    runner = make_gang(kube, namespace, "runner", pods=2, gpus=4, queue=team_a, priority="inference")
    wait_until("the runner to be bound", lambda: len(bound(kube, namespace, runner)) == 2, 30)
    make_gang(kube, namespace, "b-train", pods=1, gpus=4, queue=team_b, priority="train")
    make_gang(kube, namespace, "b-build", pods=1, gpus=4, queue=team_b, priority="build")
    make_gang(kube, namespace, "a-more", pods=1, gpus=4, queue=team_a, priority="train")
    waiting = ("b-train", "b-build", "a-more")
    for name in waiting:
        wait_until(f"{name}'s verdict", lambda name=name: condition(podgroup(kube, namespace, name), "Scheduled"), 30)

    kubeconfig = ["--kubeconfig", str(control_plane.kubeconfig_path)]
    doc = _cli_json(capsys, ["pending", *kubeconfig, "-n", namespace, "-o", "json"])
    rows = {r["name"]: r for r in doc["pending"]}
    assert set(rows) == set(waiting)
    for name, row in rows.items():
        cond = condition(podgroup(kube, namespace, name), "Scheduled")
        assert cond is not None and row["reason"] == cond["reason"] and row["message"]
        assert row["pending_pods"] == 1 and row["requested"]["gpu"] == 4
    assert sorted(r["position"] for r in rows.values()) == sorted({r["position"] for r in rows.values()})
    # within a queue, the higher priority goes first
    assert rows["b-build"]["queue_position"] == 1 and rows["b-train"]["queue_position"] == 2
    assert rows["b-build"]["position"] < rows["b-train"]["position"]

    only_b = _cli_json(capsys, ["pending", *kubeconfig, "-q", team_b, "-o", "json"])
    assert [r["name"] for r in only_b["pending"]] == ["b-build", "b-train"]

    def queue_doc() -> dict[str, Any] | None:
        got = {q["name"]: q for q in _cli_json(capsys, ["queues", *kubeconfig, "-o", "json"])["queues"]}
        return got if (got.get(team_a) or {}).get("allocated") else None

    tree = wait_until("the scheduler's Queue status", queue_doc, 30)
    a, b, top = tree[team_a], tree[team_b], tree[dept]
    assert (a["parent"], a["depth"], a["quota"]["gpu"], a["limit"]["gpu"]) == (dept, 1, 8, -1)
    assert a["allocated"]["gpu"] == 8 and a["running_podgroups"] == 1 and a["pending_podgroups"] == 1
    assert b["pending_podgroups"] == 2 and b["pending_pods"] == 2 and b["requested"]["gpu"] == 8
    assert top["children"] == sorted([team_a, team_b]) and top["pending_podgroups"] == 3
    assert top["fair_share"]["gpu"] == 8

    text = _yaml_out(capsys, ["pending", *kubeconfig, "-n", namespace])
    assert "b-build" in text and "REASON" in text
    assert team_a in _yaml_out(capsys, ["queues", *kubeconfig])
    assert yaml.safe_load(_yaml_out(capsys, ["queues", *kubeconfig, "-o", "yaml"]))["queues"]


def _yaml_out(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    capsys.readouterr()
    try:
        main(argv)
    except SystemExit as exc:
        assert not exc.code
    return capsys.readouterr().out


def _warning_events(kube: Kube, ns: str, name: str) -> list[dict[str, Any]]:
    return [
        e
        for e in kube.get(events_path(ns))["items"]
        if e["involvedObject"].get("name") == name and e["reason"] == "UnknownField" and e["type"] == "Warning"
    ]


def test_unknown_fields_become_warning_events(
    kube: Kube, namespace: str, run_podgrouper: Any, run_scheduler: Any, node_pool: NodePool
) -> None:
    """The API server prunes unknown fields; what kubectl applied (its last-applied annotation) still has them."""
    _, selector = node_pool(1, gpus=8)
    run_podgrouper()
    run_scheduler(node_selector=selector)
    applied = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "typo", "namespace": namespace},
        "spec": {
            "headGroupSpec": {"template": {"spec": {"containers": [{"name": "head"}]}}},
            "workerGroupSpec": [{"groupName": "gpu", "replicas": 1, "minReplica": 1}],
        },
    }
    stored = {
        **applied,
        "metadata": {
            **applied["metadata"],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": json.dumps(applied)},
        },
        "spec": {"headGroupSpec": applied["spec"]["headGroupSpec"]},
    }
    kube.create(ray_path("RayCluster", namespace), stored)
    ev = wait_until("a Warning Event on the RayCluster", lambda: _warning_events(kube, namespace, "typo"), 30)
    assert ev[0]["involvedObject"]["kind"] == "RayCluster"
    assert "unknown field spec.workerGroupSpec (did you mean workerGroupSpecs?)" in ev[0]["message"]

    name = f"{namespace}-typo"
    queue = queue_body(name, gpu_quota=1)
    queue["spec"]["resources"]["gpu"]["overQuotaWieght"] = 2
    pruned = queue_body(name, gpu_quota=1)
    pruned["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": json.dumps(queue)}
    kube.create(queues_path(), pruned)
    try:
        ev = wait_until("a Warning Event on the Queue", lambda: _warning_events(kube, "default", name), 30)
        assert ev[0]["involvedObject"]["kind"] == "Queue"
        assert "spec.resources.gpu.overQuotaWieght (did you mean overQuotaWeight?)" in ev[0]["message"]
    finally:
        kube.delete(queues_path(name))

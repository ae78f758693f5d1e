"""What the scheduler's informers keep of pods, nodes and PodGroups: the cache reads the same from it as from the
whole object, and objects of one workload share their common parts."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from kai_ray.bridge import node_from_api
from kai_ray.k8s.base.slim import slim_pod
from kai_ray.k8s.config import OperatorConfig
from kai_ray.k8s.scheduling.entries import parse_podgroup, pod_entry
from kai_ray.k8s.scheduling.watched import kept_node, kept_pod, kept_podgroup


def kubelet_node(name: str, **status: Any) -> dict[str, Any]:
    """A node as a kubelet (KWOK here) reports it, heartbeat times, images and system facts included."""
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "7",
            "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.memory": "81920"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"taints": [{"key": "gpu", "value": "h100", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
            "allocatable": {"cpu": "62", "memory": "500Gi", "pods": "110", "nvidia.com/gpu": "8"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": "2026-11-29T10:00:00Z"},
                {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-11-29T10:00:00Z", "reason": "Ok"},
            ],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "nodeInfo": {"kubeletVersion": "kwok-v0.8.0", "machineID": "x"},
            "images": [{"names": ["registry.invalid/a:1"], "sizeBytes": 1}],
            **status,
        },
    }


@pytest.mark.parametrize(
    "change",
    [
        {},
        {"conditions": [{"type": "Ready", "status": "False"}]},
        {"conditions": [{"type": "MemoryPressure", "status": "False"}]},  # no Ready condition: not ready
        {"conditions": []},
        {"allocatable": None},  # capacity is read instead
    ],
)
def test_a_kept_node_reads_as_the_whole_node(change: dict[str, Any]) -> None:
    whole = kubelet_node("n1")
    for key, value in change.items():
        if value is None:
            del whole["status"][key]
        else:
            whole["status"][key] = value
    assert node_from_api(kept_node(copy.deepcopy(whole))) == node_from_api(whole)
    cordoned = copy.deepcopy(whole)
    cordoned["spec"]["unschedulable"] = True
    assert node_from_api(kept_node(copy.deepcopy(cordoned))) == node_from_api(cordoned)


def test_nodes_of_one_shape_share_their_resources_and_keep_no_heartbeats() -> None:
    a = kept_node(orjson.loads(orjson.dumps(kubelet_node("n1"))))
    b = kept_node(orjson.loads(orjson.dumps(kubelet_node("n2"))))
    assert a["status"]["allocatable"] is b["status"]["allocatable"]
    assert a["spec"]["taints"] is b["spec"]["taints"]
    assert "images" not in a["status"] and "nodeInfo" not in a["status"]
    assert a["metadata"]["resourceVersion"] == "7", "the informer compares versions"


def bench_pod(name: str, uid: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": uid,
            "resourceVersion": "3",
            "creationTimestamp": "2026-11-29T10:00:00Z",
            "labels": {"app": "bench"},
            "annotations": {"pod-group-name": f"pg-{name}"},
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "nodeName": "n1",
            "containers": [
                {"name": "main", "resources": {"requests": {"cpu": "100m"}, "limits": {"nvidia.com/gpu": "1"}}}
            ],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}],
        },
        "status": {
            "phase": "Running",
            "startTime": "2026-11-29T10:00:01Z",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-29T10:00:02Z"}],
        },
    }


def test_a_kept_pod_makes_the_same_cache_entry_and_shares_its_workloads_parts() -> None:
    config = OperatorConfig(leader_elect=False)
    whole = bench_pod("p-1", "u-1")
    kept = kept_pod(orjson.loads(orjson.dumps(whole)))
    plain = pod_entry("bench/p-1", slim_pod(copy.deepcopy(whole)), config.scheduler_name, frozenset())
    entry = pod_entry("bench/p-1", kept, config.scheduler_name, frozenset())
    assert (entry.sig, entry.request, entry.spod, entry.job_key) == (
        plain.sig,
        plain.request,
        plain.spod,
        plain.job_key,
    )
    other = kept_pod(orjson.loads(orjson.dumps(bench_pod("p-2", "u-2"))))
    for path in (("spec", "containers"), ("spec", "tolerations"), ("metadata", "labels"), ("status", "conditions")):
        assert kept[path[0]][path[1]] is other[path[0]][path[1]], path
    assert kept["metadata"]["namespace"] is other["metadata"]["namespace"]


def test_podgroups_of_one_kind_share_their_spec_and_still_parse() -> None:
    def pg(name: str) -> dict[str, Any]:
        body = {
            "metadata": {"name": name, "namespace": "bench", "uid": f"g-{name}", "managedFields": [{"manager": "x"}]},
            "spec": {"minMember": 1, "queue": "default-queue", "priorityClassName": "train"},
        }
        return kept_podgroup(orjson.loads(orjson.dumps(body)))

    a, b = pg("a"), pg("b")
    assert a["spec"] is b["spec"]
    assert "managedFields" not in a["metadata"]
    assert parse_podgroup(a, "bench/a").spec.queue == "default-queue"

"""kai-ray on a real node: pods whose containers really run, gangs that run to completion, a preemption whose victim
really receives SIGTERM and is given its grace period, and a PodDisruptionBudget computed by the real
kube-controller-manager holding an eviction back.

Real: kube-apiserver, etcd, kube-controller-manager, kubelet, containerd, runc, the CNI bridge, busybox processes.
Stand-in: the GPUs (``nvidia.com/gpu`` is capacity written onto the node: bookkeeping only, no device).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kai_ray.k8s.base.rest import Kube, podgroups_path, pods_path
from kai_ray.testing.controlplane.realnode import NODE_NAME, RealNode
from tests.k8s.helpers import bound, events, podgroup_body, wait_until
from tests.realnode.helpers import logs, phase, pod, running_containers

pytestmark = [pytest.mark.realnode, pytest.mark.slow]

MakePod = Callable[..., dict[str, Any]]
# A process that says when it starts, and on SIGTERM writes the time, takes 3 s to wind down, then writes again.
TRAPPER = (
    'm=/marker/$HOSTNAME; trap \'echo "term $(date +%s)" >> $m; sleep 3; echo "exit $(date +%s)" >> $m; exit 0\' TERM;'
    " echo started; while :; do sleep 1 & wait $!; done"
)


@pytest.fixture
def team(queues: Any, run_scheduler: Any, priority_classes: Any, on_node: dict[str, str]) -> str:
    """A queue whose quota is the node's 8 GPUs, and a kai-ray scheduler (in-process) that sees only the real node."""
    queues("dept", gpu_quota=8)
    name: str = queues("team", gpu_quota=8, parent="dept")
    run_scheduler(node_selector=on_node)
    return name


def _gang(
    kube: Kube, ns: str, make_pod: MakePod, name: str, size: int, queue: str, priority: str, script: str, **pod: Any
) -> list[str]:
    """A PodGroup (minMember = size) and its pods, each asking for 4 GPUs unless ``gpus`` says otherwise."""
    kube.create(podgroups_path(ns), podgroup_body(name, size, queue, priority))
    names = [f"{name}-{i}" for i in range(size)]
    for member in names:
        kube.create(pods_path(ns), make_pod(member, script, **{"gpus": 4, "group": name, **pod}))
    return names


def test_the_node_is_ready_and_a_pod_runs_to_completion(
    real_node: RealNode, kube: Kube, namespace: str, make_pod: MakePod
) -> None:
    node = kube.get(f"/api/v1/nodes/{NODE_NAME}")
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == str(real_node.gpus)
    assert {a["type"]: a["address"] for a in node["status"]["addresses"]}["InternalIP"] == real_node.node_ip

    kube.create(
        pods_path(namespace), make_pod("hello", "echo hello from $(hostname); cat /proc/1/cmdline", scheduler=None)
    )
    wait_until("the pod to succeed", lambda: phase(kube, namespace, "hello") == "Succeeded", 120, 0.2)
    text = logs(kube, namespace, "hello")
    assert "hello from hello" in text
    assert "cat\0/proc/1/cmdline" in text  # the shell exec'd cat as PID 1: the container has its own PID namespace
    status = (pod(kube, namespace, "hello") or {})["status"]
    assert status["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    assert status["podIP"].startswith("10.85.")


def test_a_gpu_gang_scheduled_by_kai_ray_runs_its_containers_to_completion(
    real_node: RealNode,
    kube: Kube,
    namespace: str,
    team: str,
    make_pod: MakePod,
) -> None:
    script = "echo member $(hostname) started; sleep 2; echo member $(hostname) done"
    created = time.monotonic()
    names = _gang(kube, namespace, make_pod, "gang", 4, team, "train", script, gpus=2)
    wait_until("the gang to be bound to the real node", lambda: len(bound(kube, namespace, names)) == 4, 120, 0.2)
    assert set(bound(kube, namespace, names).values()) == {NODE_NAME}

    def all_started() -> bool:
        return all(running_containers(kube, namespace, n) or phase(kube, namespace, n) == "Succeeded" for n in names)

    wait_until("every member's container to start", all_started, 180, 0.2)
    latency = time.monotonic() - created
    wait_until(
        "the gang to run to completion", lambda: all(phase(kube, namespace, n) == "Succeeded" for n in names), 180
    )
    for name in names:
        assert f"member {name} done" in logs(kube, namespace, name)
    print(f"gang of 4 on the real node: creation to all containers started {latency:.1f}s")


def _marker_volume(tmp: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes = [{"name": "marker", "hostPath": {"path": str(tmp), "type": "Directory"}}]
    return volumes, [{"name": "marker", "mountPath": "/marker"}]


def _started(kube: Kube, ns: str, names: list[str]) -> bool:
    return all(running_containers(kube, ns, n) and "started" in logs(kube, ns, n) for n in names)


def test_a_preempted_pod_gets_sigterm_and_its_grace_period_then_really_stops(
    real_node: RealNode,
    kube: Kube,
    namespace: str,
    team: str,
    make_pod: MakePod,
    tmp_path: Path,
) -> None:
    tmp_path.chmod(0o777)
    volumes, mounts = _marker_volume(tmp_path)

    training = _gang(
        kube, namespace, make_pod, "training", 2, team, "train", TRAPPER, grace=30, volumes=volumes, mounts=mounts
    )
    wait_until("training's containers to run", lambda: _started(kube, namespace, training), 180, 0.3)

    _gang(kube, namespace, make_pod, "serving", 1, team, "inference", "echo serving; sleep 3600")
    wait_until("serving to run", lambda: running_containers(kube, namespace, "serving-0"), 180, 0.3)

    evicted = [n for n in training if (tmp_path / n).is_file()]
    assert evicted, "a training pod must have been evicted to make room"
    for name in evicted:
        wait_until(f"{name} to be gone", lambda n=name: pod(kube, namespace, n) is None, 120, 0.3)
        lines = dict(line.split() for line in (tmp_path / name).read_text().splitlines())
        assert int(lines["exit"]) - int(lines["term"]) >= 3, "the grace period must let the process wind down"
    survivors = [n for n in training if n not in evicted]
    for name in survivors:
        assert running_containers(kube, namespace, name)


def test_a_pod_disruption_budget_holds_an_eviction_back_on_real_pods(
    real_node: RealNode,
    kube: Kube,
    namespace: str,
    team: str,
    make_pod: MakePod,
) -> None:
    script = "echo started; while :; do sleep 1 & wait $!; done"
    training = _gang(kube, namespace, make_pod, "training", 2, team, "train", script, labels={"app": "training"})
    wait_until("training's containers to run", lambda: _started(kube, namespace, training), 180, 0.3)

    pdb_path = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"
    kube.create(
        pdb_path,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "training"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "training"}}},
        },
    )

    def computed() -> bool:  # the disruption controller of kube-controller-manager, not the test, writes this
        status = kube.get(f"{pdb_path}/training").get("status") or {}
        return status.get("currentHealthy") == 2 and status.get("disruptionsAllowed") == 0

    wait_until("kube-controller-manager to compute the budget", computed, 120, 0.3)

    _gang(kube, namespace, make_pod, "serving", 1, team, "inference", "sleep 3600")
    ev = wait_until("an EvictionBlocked Event", lambda: events(kube, namespace, reason="EvictionBlocked"), 60)
    assert "disruption budget" in ev[0]["message"]
    assert all(running_containers(kube, namespace, n) for n in training), "the budget must keep training running"
    assert phase(kube, namespace, "serving-0") == "Pending"


def test_every_component_listens_only_on_loopback_or_the_nodes_bridge(real_node: RealNode) -> None:
    allowed = {"127.0.0.1", "::1", real_node.node_ip}
    seen: dict[str, list[tuple[str, int]]] = {}
    for name, comp in real_node.components.items():
        if comp.alive():
            seen[name] = comp.listening()
    assert {"kubelet", "containerd", "kube-apiserver", "kube-proxy", "kube-controller-manager", "coredns"} <= set(seen)
    wide = {name: [a for a in addrs if a[0] not in allowed] for name, addrs in seen.items()}
    assert not any(wide.values()), f"listening beyond loopback and {real_node.node_ip}: {wide}"

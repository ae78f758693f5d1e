"""cpufgd's key rule: a placement that strands GPUs behind missing CPU counts as fragmentation.

FGD alone asks only whether one more pod of each typical shape still fits, so it lets a CPU-only pod take CPU that
the node's free GPUs need; cpufgd sends that pod to the GPU-poor, CPU-rich node instead."""

from __future__ import annotations

import pytest

from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.snapshot import (
    Job,
    Node,
    NodeSelectorRequirement,
    Pod,
    PodPhase,
    Queue,
    Resources,
    SchedulerConfig,
    Snapshot,
)

CORE = 1000.0


def _snapshot(placement: str, pending_gpu: float, pending_cpu: float) -> Snapshot:
    # gpu-rich: 8 GPUs and 72 cores, six 1-GPU pods of 8 cores run there -> 2 GPUs and 24 cores free.
    # cpu-rich: 2 GPUs and 104 cores, idle. The typical GPU pod asks 8 cores per GPU.
    nodes = [Node("gpu-rich", Resources(8, 72 * CORE, 1e12)), Node("cpu-rich", Resources(2, 104 * CORE, 1e12))]
    running = [
        Job(
            "ns",
            f"r{i}",
            "q",
            pods=[
                Pod(
                    f"r{i}",
                    f"r{i}",
                    "ns",
                    f"ns/r{i}",
                    Resources(1, 8 * CORE, 1e9),
                    phase=PodPhase.RUNNING,
                    node="gpu-rich",
                )
            ],
        )
        for i in range(6)
    ]
    new = Job("ns", "new", "q", pods=[Pod("new", "new", "ns", "ns/new", Resources(pending_gpu, pending_cpu, 1e9))])
    cfg = SchedulerConfig(placement_gpu=placement, placement_cpu=placement, actions=("allocate",))
    return Snapshot(nodes, [Queue("q", quota=Resources(-1, -1, -1))], [*running, new], config=cfg)


def _node_of_new(snap: Snapshot) -> str:
    binds = [b for b in run_cycle(snap).binds if b.pod == "new"]
    assert len(binds) == 1
    return binds[0].node


@pytest.mark.parametrize(("placement", "node"), [("fgd", "gpu-rich"), ("cpufgd", "cpu-rich")])
def test_cpu_only_pod_goes_where_it_strands_no_gpu(placement: str, node: str) -> None:
    # 12 cores on gpu-rich would leave 12 cores for 2 free GPUs: one more typical pod still fits (FGD sees no
    # fragment, and best fit prefers the fuller node), but half a GPU's worth of CPU is gone.
    assert _node_of_new(_snapshot(placement, 0, 12 * CORE)) == node


def test_cpu_light_gpu_pod_still_packs_the_cpu_poor_node() -> None:
    # A GPU pod that brings no more CPU than its GPUs need strands nothing: cpufgd packs it like fgd.
    assert _node_of_new(_snapshot("cpufgd", 1, 8 * CORE)) == _node_of_new(_snapshot("fgd", 1, 8 * CORE))


def _pool_snapshot(placement: str) -> Snapshot:
    # pool "common": one 8-GPU node; pool "scarce": one 2-GPU node. Three 1-GPU pods are pinned to "common", one to
    # "scarce". Fewer shapes may use "scarce" (fgd's pinned part prefers it for an unpinned pod), but its pinned
    # demand per GPU of the pool is higher: 20% of the request on 20% of the GPUs against 60% on 80%.
    def node(name: str, gpus: int, model: str) -> Node:
        return Node(name, Resources(gpus, 64 * CORE, 1e12), labels={"model": model})

    def pod(name: str, model: str | None) -> Job:
        affinity = [[NodeSelectorRequirement("model", "In", (model,))]] if model else []
        spec = Pod(name, name, "ns", f"ns/{name}", Resources(1, 4 * CORE, 1e9), required_affinity=affinity)
        return Job("ns", name, "q", pods=[spec])

    jobs = [pod("new", None), *(pod(f"c{i}", "common") for i in range(3)), pod("s0", "scarce")]
    cfg = SchedulerConfig(placement_gpu=placement, placement_cpu=placement, actions=("allocate",))
    return Snapshot(
        [node("common-0", 8, "common"), node("scarce-0", 2, "scarce")],
        [Queue("q", quota=Resources(-1, -1, -1))],
        jobs,
        config=cfg,
    )


@pytest.mark.parametrize(("placement", "node"), [("fgd", "scarce-0"), ("cpufgd", "common-0")])
def test_unpinned_pod_leaves_the_pool_its_pinned_pods_press_on(placement: str, node: str) -> None:
    # cpufgd weighs each pool by the pinned demand it must absorb for its size, not by how few shapes may use it.
    assert _node_of_new(_pool_snapshot(placement)) == node

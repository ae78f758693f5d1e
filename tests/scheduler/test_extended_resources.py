"""The core fits every resource, not only gpu, cpu and memory; the bridge counts requests as kube-scheduler does."""

from __future__ import annotations

from kai_ray.api.meta import Pod as ApiPod
from kai_ray.bridge import effective_requests, node_from_api, pod_from_api
from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.snapshot import Job, Node, Pod, PodPhase, Queue, Resources, Snapshot

GI = float(2**30)


def _node(name: str, **extended: float) -> Node:
    return Node(name, Resources(0, 64000, 256 * GI), extended=dict(extended))


def _job(name: str, n: int, **extended: float) -> Job:
    pods = [
        Pod(f"ml/{name}-{i}", f"{name}-{i}", "ml", f"ml/{name}", Resources(0, 1000, GI), extended=dict(extended))
        for i in range(n)
    ]
    return Job("ml", name, "ml", min_member=n, pods=pods)


def _snapshot(nodes: list[Node], jobs: list[Job]) -> Snapshot:
    return Snapshot(nodes=nodes, queues=[Queue("ml", quota=Resources(-1, -1, -1))], jobs=jobs)


def test_extended_resources_steer_each_pod_to_a_node_that_has_them() -> None:
    nodes = [_node("a-cpu"), _node("b-tpu", **{"google.com/tpu": 8}), _node("c-amd", **{"amd.com/gpu": 4})]
    jobs = [_job("tpu", 2, **{"google.com/tpu": 4}), _job("amd", 2, **{"amd.com/gpu": 2})]
    result = run_cycle(_snapshot(nodes, jobs))
    where = {b.pod: b.node for b in result.binds}
    assert where == {"ml/tpu-0": "b-tpu", "ml/tpu-1": "b-tpu", "ml/amd-0": "c-amd", "ml/amd-1": "c-amd"}


def test_a_node_full_of_the_resource_takes_no_more() -> None:
    nodes = [_node("tpu", **{"google.com/tpu": 4})]
    running = _job("old", 1, **{"google.com/tpu": 4})
    running.pods[0].phase = PodPhase.RUNNING
    running.pods[0].node = "tpu"
    result = run_cycle(_snapshot(nodes, [running, _job("new", 1, **{"google.com/tpu": 1})]))
    assert not result.binds
    status = result.jobs["ml/new"]
    assert not status.scheduled
    assert status.details["shortfall"]["google.com/tpu"] == 1.0


def test_pending_reason_names_the_missing_resource() -> None:
    result = run_cycle(_snapshot([_node("cpu-node")], [_job("tpu", 1, **{"google.com/tpu": 4})]))
    status = result.jobs["ml/tpu"]
    assert not status.scheduled
    assert "no node has google.com/tpu 4" in status.message


def test_the_pod_count_is_a_resource_too() -> None:
    node = _node("small")
    node.max_pods = 2
    result = run_cycle(_snapshot([node], [_job("a", 2), _job("b", 1)]))
    assert sorted(b.pod for b in result.binds) == ["ml/a-0", "ml/a-1"]


def _api_pod(spec: dict[str, object], status: dict[str, object] | None = None) -> ApiPod:
    body: dict[str, object] = {"metadata": {"name": "p", "namespace": "ml"}, "spec": spec}
    if status is not None:
        body["status"] = status
    return ApiPod.model_validate(body)


def test_requests_follow_kube_scheduler_init_containers_sidecars_and_overhead() -> None:
    pod = _api_pod(
        {
            "containers": [{"name": "main", "resources": {"requests": {"cpu": "2", "google.com/tpu": "4"}}}],
            "initContainers": [
                {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
                {"name": "setup", "resources": {"requests": {"cpu": "5", "ephemeral-storage": "10Gi"}}},
            ],
            "overhead": {"cpu": "250m"},
        }
    )
    req = effective_requests(pod)
    # containers 2 + sidecar 1 = 3; the plain init container runs beside the sidecar: 5 + 1 = 6; then overhead
    assert req["cpu"] == 6.25
    assert req["google.com/tpu"] == 4
    assert req["ephemeral-storage"] == 10 * GI
    assert pod_from_api(pod, "ml/j").extended == {"google.com/tpu": 4, "ephemeral-storage": 10 * GI}


def test_pod_level_resources_take_precedence_and_a_resize_counts_what_is_held() -> None:
    pod = _api_pod(
        {
            "containers": [{"name": "main", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
            "resources": {"requests": {"memory": "4Gi"}},
        }
    )
    assert effective_requests(pod) == {"cpu": 1.0, "memory": 4 * GI}
    growing = _api_pod(
        {"containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}]},
        {
            "conditions": [{"type": "PodResizeInProgress", "status": "True"}],
            "containerStatuses": [{"name": "main", "allocatedResources": {"cpu": "3"}}],
        },
    )
    assert effective_requests(growing)["cpu"] == 3.0  # shrinking from 3 to 1: the 3 still held count
    refused = _api_pod(
        {"containers": [{"name": "main", "resources": {"requests": {"cpu": "64"}}}]},
        {
            "conditions": [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}],
            "containerStatuses": [
                {"name": "main", "allocatedResources": {"cpu": "2"}, "resources": {"requests": {"cpu": "2"}}}
            ],
        },
    )
    assert effective_requests(refused)["cpu"] == 2.0  # an infeasible resize is not counted


def test_nodes_advertise_every_allocatable_resource() -> None:
    node = node_from_api(
        {
            "metadata": {"name": "n"},
            "status": {
                "allocatable": {
                    "cpu": "8",
                    "memory": "1Gi",
                    "pods": "20",
                    "hugepages-2Mi": "1Gi",
                    "nvidia.com/mig-1g.10gb": "7",
                }
            },
        }
    )
    assert node.max_pods == 20
    assert node.extended == {"hugepages-2Mi": GI, "nvidia.com/mig-1g.10gb": 7}


def test_mig_slices_fit_the_node_and_charge_the_queue_the_gpus_of_their_profile() -> None:
    nodes = [_node("mig", **{"nvidia.com/mig-3g.40gb": 2, "nvidia.com/mig-1g.10gb": 1})]
    jobs = [_job("big", 2, **{"nvidia.com/mig-3g.40gb": 1}), _job("small", 1, **{"nvidia.com/mig-1g.10gb": 1})]
    result = run_cycle(_snapshot(nodes, jobs))
    assert len(result.binds) == 3
    assert result.queues["ml"].allocated["gpu"] == 7.0  # 2 x 3g + 1 x 1g, as KAI's GetSumGPUs


def test_a_queue_limit_on_gpus_holds_back_mig_slices() -> None:
    nodes = [_node("mig", **{"nvidia.com/mig-3g.40gb": 2})]
    snap = _snapshot(nodes, [_job("big", 2, **{"nvidia.com/mig-3g.40gb": 1})])
    snap.queues[0].limit = Resources(4, -1, -1)
    result = run_cycle(snap)
    assert not result.binds
    assert result.jobs["ml/big"].details["resource"] == "gpu"


def test_a_bound_shared_gpu_pod_holds_its_extended_resources_once() -> None:
    node = Node("n", Resources(1, 64000, 256 * GI), extended={"example.com/nic": 2})
    running = _job("old", 1, **{"example.com/nic": 1})
    running.pods[0].phase = PodPhase.RUNNING
    running.pods[0].node = "n"
    running.pods[0].gpu_fraction = 0.5
    result = run_cycle(_snapshot([node], [running, _job("new", 1, **{"example.com/nic": 1})]))
    assert [b.pod for b in result.binds] == ["ml/new-0"]


def test_a_higher_priority_gang_preempts_for_an_extended_resource() -> None:
    low = _job("low", 1, **{"google.com/tpu": 4})
    low.pods[0].phase = PodPhase.RUNNING
    low.pods[0].node = "tpu"
    low.pods[0].start_time = 0.0
    high = _job("high", 1, **{"google.com/tpu": 4})
    high.priority = 125
    snap = _snapshot([_node("tpu", **{"google.com/tpu": 4}), _node("cpu")], [low, high])
    snap.now = 1000.0
    result = run_cycle(snap)
    assert [e.pod for e in result.evictions] == ["ml/low-0"]
    assert [(b.pod, b.node) for b in result.binds] == [("ml/high-0", "tpu")]


def test_a_nodes_mig_slices_count_in_the_gpu_capacity_fair_shares_divide() -> None:
    nodes = [_node("mig", **{"nvidia.com/mig-1g.10gb": 7})]
    snap = _snapshot(nodes, [_job("a", 3, **{"nvidia.com/mig-1g.10gb": 1})])
    snap.queues[0].quota = Resources(0, -1, -1)  # all of its GPUs come from the over-quota share of the capacity
    result = run_cycle(snap)
    assert len(result.binds) == 3
    assert result.queues["ml"].fair_share["gpu"] == 3.0

"""Semi-preemptible Ray gangs through the real API server: the label on a RayCluster reaches its PodGroup (our CRD
accepts KAI's value), the scheduler charges only the core to the Queue's ``allocatedNonPreemptible``, and a core
beyond the deserved quota stays pending with KAI's reason (podgrouper and scheduler operators, KWOK nodes; the test
plays KubeRay and creates the pods)."""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray import constants as c
from kai_ray.k8s.base.rest import Kube, queues_path, ray_path
from tests.k8s.helpers import bound, kuberay_pods, make_gang, pods, wait_until
from tests.k8s.podgrouping.test_podgrouper_operator import QUEUE, _cluster_spec, _create_ray, _pg_for, _worker

pytestmark = [pytest.mark.controlplane]


def _semi_cluster(kube: Kube, ns: str, name: str, queue: str, selector: dict[str, str], **worker: Any) -> list[str]:
    spec = _cluster_spec(_worker("gpu", gpus=2, **worker))
    for group_spec in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
        group_spec["template"]["spec"]["nodeSelector"] = selector
    labels = {QUEUE: queue, "priorityClassName": "train", c.PREEMPTIBILITY_LABEL: "semi-preemptible"}
    return kuberay_pods(kube, ns, _create_ray(kube, ns, "RayCluster", name, spec, labels=labels))


def _reasons(pg: dict[str, Any] | None) -> list[str]:
    conds = ((pg or {}).get("status") or {}).get("schedulingConditions") or []
    return [r.get("reason", "") for cond in conds for r in cond.get("reasons") or []]


def test_the_core_is_charged_in_quota_and_a_core_beyond_quota_waits(
    kube: Kube,
    namespace: str,
    queues: Any,
    node_pool: Any,
    run_scheduler: Any,
    run_podgrouper: Any,
    priority_classes: Any,
) -> None:
    _, selector = node_pool(2, gpus=8)
    queues("dept", gpu_quota=16)
    team = queues("team", gpu_quota=4, parent="dept")
    run_podgrouper()
    run_scheduler(node_selector=selector)

    # head + 1 core worker (2 GPUs, in quota) and 3 burst workers (6 GPUs, over quota)
    train = _semi_cluster(kube, namespace, "train", team, selector, replicas=4, min_replicas=1, max_replicas=4)
    wait_until("the whole cluster to run", lambda: len(bound(kube, namespace, train)) == 5, 60)
    pg = _pg_for(kube, namespace, "train")
    assert pg is not None and pg["spec"]["preemptibility"] == "semi-preemptible"

    def status() -> dict[str, Any]:
        return dict(kube.get(queues_path(team)).get("status") or {})

    wait_until("the queue's allocation", lambda: (status().get("allocated") or {}).get(c.GPU_RESOURCE) == "8", 30)
    assert status()["allocatedNonPreemptible"][c.GPU_RESOURCE] == "2"

    # a second cluster whose core (2 workers, 4 GPUs) would take the non-preemptible allocation to 6 > 4
    big = _semi_cluster(kube, namespace, "big", team, selector, replicas=2, min_replicas=2, max_replicas=2)
    wait_until(
        "NonPreemptibleOverQuota on the second cluster's PodGroup",
        lambda: "NonPreemptibleOverQuota" in _reasons(_pg_for(kube, namespace, "big")),
        60,
    )
    assert bound(kube, namespace, big) == {}
    assert len(bound(kube, namespace, train)) == 5  # nothing of the first cluster was taken for it


def _bind_order(pod: dict[str, Any]) -> tuple[str, str]:
    """What the scheduler orders a core by, as the API server has it: the PodScheduled time, then the uid."""
    conds = (pod.get("status") or {}).get("conditions") or []
    at = next((cd.get("lastTransitionTime", "") for cd in conds if cd.get("type") == "PodScheduled"), "")
    return (at, pod["metadata"]["uid"])


def test_a_preemption_shrinks_the_burst_and_keeps_the_core(
    kube: Kube,
    namespace: str,
    queues: Any,
    node_pool: Any,
    run_scheduler: Any,
    run_podgrouper: Any,
    priority_classes: Any,
) -> None:
    _, selector = node_pool(1, gpus=8)
    queues("dept", gpu_quota=8)
    team = queues("team", gpu_quota=4, parent="dept")
    run_podgrouper()
    run_scheduler(node_selector=selector, drain_deadline=0.0)
    train = _semi_cluster(kube, namespace, "train", team, selector, replicas=4, min_replicas=1, max_replicas=4)
    wait_until("the cluster to fill the node", lambda: len(bound(kube, namespace, train)) == 5, 60)
    workers = {n: p for n, p in pods(kube, namespace).items() if n in train and "worker" in n}
    assert all(_bind_order(p)[0] for p in workers.values())  # the binding set PodScheduled on every worker
    core = min(workers, key=lambda n: _bind_order(workers[n]))

    # a non-preemptible service of the same queue: in quota (2 core + 2 <= 4), it needs one worker's GPUs
    make_gang(kube, namespace, "serve", pods=1, gpus=2, queue=team, priority="inference")

    def group() -> dict[str, Any]:
        rc = kube.get(ray_path("RayCluster", namespace, "train"))
        return dict(rc["spec"]["workerGroupSpecs"][0])

    wait_until("the worker group shrunk by one", lambda: group()["replicas"] == 3, 60)
    deleted = group()["scaleStrategy"]["workersToDelete"]
    assert len(deleted) == 1 and deleted[0] in workers and deleted[0] != core
    rc = kube.get(ray_path("RayCluster", namespace, "train"))
    assert not rc["spec"].get("suspend")


def test_a_queue_default_set_on_a_running_queue_takes_effect(
    kube: Kube,
    namespace: str,
    queues: Any,
    node_pool: Any,
    run_scheduler: Any,
    run_podgrouper: Any,
    priority_classes: Any,
) -> None:
    """An unlabelled `train` cluster is preemptible (nothing charged non-preemptible); annotating its Queue with
    the default semi-preemptible makes its core the queue's non-preemptible allocation, without a spec change."""
    _, selector = node_pool(1, gpus=8)
    queues("dept", gpu_quota=8)
    team = queues("team", gpu_quota=4, parent="dept")
    run_podgrouper()
    run_scheduler(node_selector=selector)
    spec = _cluster_spec(_worker("gpu", gpus=2, replicas=3, min_replicas=1, max_replicas=3))
    for group_spec in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
        group_spec["template"]["spec"]["nodeSelector"] = selector
    rc = _create_ray(kube, namespace, "RayCluster", "train", spec, labels={QUEUE: team, "priorityClassName": "train"})
    names = kuberay_pods(kube, namespace, rc)
    wait_until("the cluster to run", lambda: len(bound(kube, namespace, names)) == 4, 60)

    def charged() -> tuple[str | None, str | None]:
        st = kube.get(queues_path(team)).get("status") or {}
        gpu = c.GPU_RESOURCE
        return (st.get("allocated") or {}).get(gpu), (st.get("allocatedNonPreemptible") or {}).get(gpu)

    wait_until("the allocation in the status", lambda: charged()[0] == "6", 30)
    assert charged()[1] in (None, "0")
    kube.request(
        "PATCH",
        queues_path(team),
        body={"metadata": {"annotations": {c.DEFAULT_PREEMPTIBILITY: "semi-preemptible"}}},
        content_type="application/merge-patch+json",
    )
    wait_until("the core charged non-preemptible", lambda: charged() == ("6", "2"), 30)

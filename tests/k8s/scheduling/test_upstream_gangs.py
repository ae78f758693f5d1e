"""Upstream gangs: kai-ray schedules pods that name a Kubernetes ``scheduling.k8s.io/v1beta1`` PodGroup.

Real: a kube-apiserver of the tested release (1.37) with ``GenericWorkload`` on and ``scheduling.k8s.io/v1beta1``
served, KWOK nodes, and kube-controller-manager's Job controller with ``WorkloadWithJob`` on (it then writes a
Workload and a PodGroup for a Job and names the PodGroup in the Job's pods itself). The scheduler operator runs
in-process and finds the API by discovery. The PodGroups of the first tests are written the way a controller writes
them: a ``schedulingPolicy``, a ``disruptionMode``, a ``priorityClassName`` (the Priority admission plugin turns it
into ``priority``), and the pods name them in ``spec.schedulingGroup.podGroupName``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kai_ray import constants as c
from kai_ray.k8s.base.rest import ApiError, Kube, podgroups_path, pods_path, queues_path, serves
from kai_ray.k8s.podgrouping.operator import PodgrouperOperator
from kai_ray.k8s.scheduling import upstream_gangs
from kai_ray.k8s.scheduling.cluster_views import cluster_view
from kai_ray.k8s.scheduling.operator import SchedulerOperator, build_scheduler
from kai_ray.k8s.scheduling.pod_explanation import explain_data, render
from kai_ray.scheduler.decisions import Reason
from kai_ray.scheduler.queue_views import pending_rows
from kai_ray.testing.controlplane.harness import NODE_BATCH_LABEL, ControlPlane, our_crd_dir
from kai_ray.testing.inprocess import operator_config
from kai_ray.testing.testbed import queue_body
from tests.k8s.helpers import bound, events, kube_with_priority_classes, pod_body, wait_until

pytestmark = pytest.mark.controlplane

GATES = ("GenericWorkload=true", "WorkloadWithJob=true")
WAIT = 90.0  # generous: CI's two cores may be busy


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    args = [f"--feature-gates={','.join(GATES)}", f"--runtime-config={upstream_gangs.VERSION}=true"]
    with ControlPlane(crds=[our_crd_dir()], apiserver_extra_args=args) as cp:
        cp.start_controller_manager(controllers=("job",), feature_gates=GATES)
        yield cp


@pytest.fixture(scope="module")
def kube(plane: ControlPlane) -> Iterator[Kube]:
    k = kube_with_priority_classes(plane)
    yield k
    k.close()


class Cluster:
    """One test's namespace, nodes, Queues and scheduler on the module's control plane."""

    def __init__(self, plane: ControlPlane, kube: Kube, name: str) -> None:
        self.plane, self.kube = plane, kube
        self.ns = plane.new_namespace(prefix=name)
        self.nodes: list[str] = []
        self.queues: list[str] = []
        self.ops: list[SchedulerOperator | PodgrouperOperator] = []
        self.selector: dict[str, str] = {}

    def add_nodes(self, n: int, gpus: int = 8) -> list[str]:
        names = self.plane.create_gpu_nodes(n, gpus=gpus)
        if not self.selector:
            batch = self.kube.get(f"/api/v1/nodes/{names[0]}")["metadata"]["labels"][NODE_BATCH_LABEL]
            self.selector = {NODE_BATCH_LABEL: batch}
        else:  # later nodes join the first batch, so the running scheduler sees them
            for node in names:
                self.kube.merge_patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": self.selector}})
        self.nodes += names
        return names

    def queue(self, name: str, **kwargs: Any) -> str:
        full = f"{self.ns}-{name}"
        self.kube.create(queues_path(), queue_body(full, **kwargs))
        self.queues.append(full)
        return full

    def scheduler(self, **config: Any) -> SchedulerOperator:
        op = build_scheduler(operator_config(self.plane, self.ns, node_selector=self.selector, **config)).start()
        self.ops.append(op)
        wait_until("the scheduler to lead and sync", lambda: op.is_leader() and op.synced(), 60)
        return op

    def podgroup(
        self,
        name: str,
        min_count: int,
        queue: str | None = None,
        pclass: str = "train",
        mode: str | None = None,
        **spec: Any,
    ) -> None:
        body: dict[str, Any] = {
            "apiVersion": upstream_gangs.VERSION,
            "kind": upstream_gangs.KIND,
            "metadata": {"name": name, "labels": {c.QUEUE_LABEL: queue} if queue else {}},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}, "priorityClassName": pclass, **spec},
        }
        if mode:
            body["spec"]["disruptionMode"] = {mode: {}}
        self.kube.create(upstream_gangs.podgroups_path(self.ns), body)

    def pods(self, group: str, n: int, gpus: float, pclass: str | None = None, queue: str | None = None) -> list[str]:
        names = [f"{group}-{k}" for k in range(n)]
        for name in names:
            body = pod_body(name, gpus, labels={c.QUEUE_LABEL: queue} if queue else None)
            body["spec"]["schedulingGroup"] = {"podGroupName": group}
            if pclass:
                body["spec"]["priorityClassName"] = pclass
            self.kube.create(pods_path(self.ns), body)
        return names

    def close(self) -> None:
        for op in self.ops:
            op.stop()
        self.plane.clear_namespace(self.ns, extra=[("batch", "v1", "jobs")])
        for q in self.queues:
            with contextlib.suppress(ApiError):
                self.kube.delete(queues_path(q))
        self.plane.delete_nodes(self.nodes)


@pytest.fixture
def cluster(plane: ControlPlane, kube: Kube, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    cl = Cluster(
        plane, kube, re.sub(r"[^a-z0-9]+", "-", request.node.name.removeprefix("test_").lower())[:30].strip("-")
    )
    yield cl
    cl.close()


def _all_bound(kube: Kube, ns: str, names: list[str]) -> Callable[[], dict[str, str] | None]:
    return lambda: (lambda b: b if len(b) == len(names) else None)(bound(kube, ns, names))


def _unschedulable(kube: Kube, ns: str, pod: str) -> Callable[[], str | None]:
    return lambda: next((e["message"] for e in events(kube, ns, pod, "Unschedulable")), None)


def test_the_api_is_discovered(kube: Kube) -> None:
    assert serves(kube, upstream_gangs.VERSION, "podgroups")


def test_a_gang_that_does_not_fit_waits_whole_then_is_bound_together(cluster: Cluster) -> None:
    cluster.add_nodes(1)
    team = cluster.queue("team", gpu_quota=-1)
    cluster.scheduler()
    cluster.podgroup("g", 4, queue=team)
    names = cluster.pods("g", 4, 4)  # 16 GPUs; one 8-GPU node holds only two

    message = wait_until("the pods to be told why they wait", _unschedulable(cluster.kube, cluster.ns, "g-0"), WAIT)
    assert bound(cluster.kube, cluster.ns, names) == {}, message
    # kai-ray pending and explain show the upstream gang
    view = cluster_view(cluster.kube)
    (row,) = [r for r in pending_rows(view.snapshot, view.last, owners=view.owners) if r.namespace == cluster.ns]
    assert (row.name, row.queue, row.min_member, row.pending_pods, row.priority) == ("g", team, 4, 4, 50)
    facts = explain_data(cluster.kube, cluster.ns, "g-0")
    assert facts["pod"]["podGroup"] == "g"
    assert facts["podGroup"]["apiVersion"] == upstream_gangs.VERSION
    assert (facts["podGroup"]["queue"], facts["podGroup"]["minMember"]) == (team, 4)
    assert facts["summary"] == f"pending: {message}"
    assert "minCount=4" in render(facts)
    cluster.add_nodes(1)
    placed = wait_until("the whole gang to be bound", _all_bound(cluster.kube, cluster.ns, names), WAIT)
    assert sorted(set(placed.values())) == sorted(cluster.nodes)


def test_a_gang_beyond_max_gang_pods_is_refused_on_its_pods(cluster: Cluster) -> None:
    cluster.add_nodes(1)
    team = cluster.queue("team", gpu_quota=-1)
    cluster.scheduler(max_gang_pods=2)
    cluster.podgroup("g", 3, queue=team)
    names = cluster.pods("g", 3, 1)

    message = wait_until("the pods to be told why", _unschedulable(cluster.kube, cluster.ns, "g-2"), WAIT)
    assert "spec.schedulingPolicy.gang.minCount: 3 pods" in message and "max-gang-pods" in message
    assert bound(cluster.kube, cluster.ns, names) == {}


def test_the_queue_comes_from_the_podgroup_label(cluster: Cluster) -> None:
    cluster.add_nodes(1)
    small = cluster.queue("small", gpu_quota=2, gpu_limit=2)
    big = cluster.queue("big", gpu_quota=-1)
    cluster.scheduler()
    cluster.podgroup("g", 2, queue=small)
    names = cluster.pods("g", 2, 2, queue=big)  # the pods say big; the PodGroup's label wins

    message = wait_until(
        "the gang to be held by its queue's limit", _unschedulable(cluster.kube, cluster.ns, "g-0"), WAIT
    )
    assert small in message and bound(cluster.kube, cluster.ns, names) == {}
    cluster.kube.merge_patch(queues_path(small), {"spec": {"resources": {"gpu": {"quota": 4, "limit": 4}}}})
    wait_until("the gang to be bound once its queue allows it", _all_bound(cluster.kube, cluster.ns, names), WAIT)


def test_the_queue_comes_from_the_workload_label(cluster: Cluster) -> None:
    cluster.add_nodes(1)
    small = cluster.queue("small", gpu_quota=0, gpu_limit=0)
    cluster.scheduler()
    cluster.kube.create(
        upstream_gangs.workloads_path(cluster.ns),
        {
            "apiVersion": upstream_gangs.VERSION,
            "kind": "Workload",
            "metadata": {"name": "w", "labels": {c.QUEUE_LABEL: small}},
            "spec": {"podGroupTemplates": [{"name": "t", "schedulingPolicy": {"gang": {"minCount": 1}}}]},
        },
    )
    cluster.podgroup("g", 1, workloadRef={"workloadName": "w", "templateName": "t"})
    cluster.pods("g", 1, 1)

    message = wait_until(
        "the pod to be held by its Workload's queue", _unschedulable(cluster.kube, cluster.ns, "g-0"), WAIT
    )
    assert small in message


def test_the_podgroup_priority_beats_the_pods_priority(cluster: Cluster) -> None:
    cluster.add_nodes(1)
    team = cluster.queue("team", gpu_quota=-1)
    cluster.scheduler()
    # low: a preemptible gang (train, 50) whose pods claim inference (125, non-preemptible)
    cluster.podgroup("low", 2, queue=team, pclass="train")
    low = cluster.pods("low", 2, 4, pclass="inference")
    wait_until("the low gang to run", _all_bound(cluster.kube, cluster.ns, low), WAIT)
    # high: build-preemptible (75) over pods of train (50): only the PodGroups' priorities let it preempt
    cluster.podgroup("high", 1, queue=team, pclass="build-preemptible")
    high = cluster.pods("high", 1, 8, pclass="train")

    wait_until("the high gang to preempt the low one and run", _all_bound(cluster.kube, cluster.ns, high), WAIT)
    assert bound(cluster.kube, cluster.ns, low) == {}


@pytest.mark.parametrize(("mode", "left"), [("single", 3), ("all", 0), (None, 3)])
def test_the_disruption_mode_sets_the_victims(cluster: Cluster, mode: str | None, left: int) -> None:
    """``single`` (also the API's default) gives up one pod though the gang drops below its minCount; ``all`` every
    pod: a 2-GPU pod needs room on a node the 4-pod gang fills."""
    cluster.add_nodes(1)
    team = cluster.queue("team", gpu_quota=-1)
    op = cluster.scheduler()
    cluster.podgroup("victim", 4, queue=team, mode=mode)
    victim = cluster.pods("victim", 4, 2)
    wait_until("the victim gang to run", _all_bound(cluster.kube, cluster.ns, victim), WAIT)
    cluster.podgroup("urgent", 1, queue=team, pclass="build-preemptible")
    urgent = cluster.pods("urgent", 1, 2)

    wait_until("the urgent pod to run", _all_bound(cluster.kube, cluster.ns, urgent), WAIT)
    wait_until(
        f"{left} victim pods to be left running",
        lambda: len(bound(cluster.kube, cluster.ns, victim)) == left,
        WAIT,
    )
    preempted = wait_until(
        f"{4 - left} victim pods to be told they were preempted",
        lambda: (lambda ps: ps if len(ps) == 4 - left else None)(
            [p for p in victim if events(cluster.kube, cluster.ns, p, Reason.PREEMPTED.value)]
        ),
        WAIT,
    )
    assert set(preempted).isdisjoint(bound(cluster.kube, cluster.ns, victim))
    labels = {"queue_name": team, "action": "preempt"}
    assert op.metrics.value("kai_ray_queue_evictions_total", labels) == 4 - left, "counted in the victim's queue"


def test_a_job_controller_gang_gets_kai_ray_queues(cluster: Cluster) -> None:
    """The Job controller (``WorkloadWithJob``) writes the Workload and the PodGroup and names it in the pods; no
    podgrouper runs. The queue is the pods' label (the Job controller copies no labels to either object): its limit
    holds the 6-GPU gang back whole until it is raised. kai-ray's podgrouper, running too, makes no PodGroup of its
    own for these pods."""
    cluster.add_nodes(1)
    team = cluster.queue("team", gpu_quota=4, gpu_limit=4)
    cluster.scheduler()
    grouper = PodgrouperOperator(operator_config(cluster.plane, cluster.ns)).start()  # it must leave these pods alone
    cluster.ops.append(grouper)
    wait_until("the podgrouper to lead and sync", lambda: grouper.is_leader() and grouper.synced(), 60)
    template = pod_body("unused", 2, labels={c.QUEUE_LABEL: team})
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {
            "parallelism": 3,
            "completions": 3,
            "scheduling": {"schedulingPolicy": {"gang": {"minCount": 3}}},
            "template": {
                "metadata": {"labels": template["metadata"]["labels"]},
                "spec": {**template["spec"], "restartPolicy": "Never"},
            },
        },
    }
    cluster.kube.create(f"/apis/batch/v1/namespaces/{cluster.ns}/jobs", job)

    pods = wait_until(
        "the Job controller's pods, naming its PodGroup",
        lambda: (lambda ps: ps if len(ps) == 3 and all(upstream_gangs.pod_group_name(p["spec"]) for p in ps) else None)(
            cluster.kube.get(pods_path(cluster.ns))["items"]
        ),
        WAIT,
    )
    (group,) = {upstream_gangs.pod_group_name(p["spec"]) for p in pods}
    pg = cluster.kube.get(upstream_gangs.podgroups_path(cluster.ns, group))
    assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    assert [r["kind"] for r in pg["metadata"]["ownerReferences"] if r.get("controller")] == ["Job"]
    names = [p["metadata"]["name"] for p in pods]
    message = wait_until("the gang to be held by its queue", _unschedulable(cluster.kube, cluster.ns, names[0]), WAIT)
    assert team in message and bound(cluster.kube, cluster.ns, names) == {}
    view = cluster_view(cluster.kube)
    (row,) = [r for r in pending_rows(view.snapshot, view.last, owners=view.owners) if r.namespace == cluster.ns]
    assert (row.name, row.owner, row.queue, row.min_member) == (group, "Job/train", team, 3)
    cluster.kube.merge_patch(queues_path(team), {"spec": {"resources": {"gpu": {"quota": 8, "limit": 8}}}})
    wait_until("kai-ray to bind the Job's gang", _all_bound(cluster.kube, cluster.ns, names), WAIT)
    assert cluster.kube.get(podgroups_path(cluster.ns))["items"] == [], "no KAI PodGroup beside the upstream one"


def test_a_job_whose_template_names_a_podgroup_is_scheduled_as_that_gang(cluster: Cluster) -> None:
    """The way without ``WorkloadWithJob`` (and with it: the Job controller then manages no scheduling objects): the
    user writes the PodGroup and the Job's pod template names it."""
    cluster.add_nodes(1)
    team = cluster.queue("team", gpu_quota=-1)
    cluster.scheduler()
    cluster.podgroup("mine", 2, queue=team)
    template = pod_body("unused", 4)
    template["spec"]["schedulingGroup"] = {"podGroupName": "mine"}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "own"},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {"spec": {**template["spec"], "restartPolicy": "Never"}},
        },
    }
    cluster.kube.create(f"/apis/batch/v1/namespaces/{cluster.ns}/jobs", job)

    pods = wait_until(
        "the Job's two pods",
        lambda: (lambda ps: ps if len(ps) == 2 else None)(cluster.kube.get(pods_path(cluster.ns))["items"]),
        WAIT,
    )
    assert {upstream_gangs.pod_group_name(p["spec"]) for p in pods} == {"mine"}
    names = [p["metadata"]["name"] for p in pods]
    wait_until("kai-ray to bind the gang", _all_bound(cluster.kube, cluster.ns, names), WAIT)
    assert cluster.kube.get(upstream_gangs.workloads_path(cluster.ns))["items"] == [], "the Job controller made none"
    assert [g["metadata"]["name"] for g in cluster.kube.get(upstream_gangs.podgroups_path(cluster.ns))["items"]] == [
        "mine"
    ]

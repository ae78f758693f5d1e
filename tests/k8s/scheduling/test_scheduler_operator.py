"""The scheduler/binder operator against the real kube-apiserver + etcd, with KWOK GPU nodes.

Real: the API server (admission, the Binding and Eviction subresources, watches, Leases), etcd, our CRDs, and KWOK
turning bound pods Running and deleting evicted ones. Fake: the GPUs (KWOK nodes advertise ``nvidia.com/gpu``; no
container runs). PodGroups here are written by the test, as a user bringing their own PodGroup would (KAI's
``pod-group-name`` annotation); the podgrouper has its own tests.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from kai_ray.cli import main
from kai_ray.k8s.base.rest import Kube, events_path, podgroups_path, pods_path, queues_path
from kai_ray.k8s.scheduling.operator import SchedulerOperator
from kai_ray.k8s.scheduling.pod_explanation import explain
from kai_ray.testing.controlplane.harness import ControlPlane
from tests.k8s.helpers import (
    bound,
    condition,
    events,
    gpu_use,
    make_gang,
    pod_body,
    podgroup,
    podgroup_body,
    wait_until,
)

NodePool = Callable[..., tuple[list[str], dict[str, str]]]


def _cli(argv: list[str]) -> int:
    """Run the ``kai-ray`` entry point in-process; its exit status."""
    try:
        main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_gang_binds_all_or_nothing(
    kube: Kube, namespace: str, queues: Any, node_pool: NodePool, run_scheduler: Any, priority_classes: Any
) -> None:
    _, selector = node_pool(2, gpus=8)
    queues("dept", gpu_quota=16)
    team = queues("team", gpu_quota=16, parent="dept")
    run_scheduler(node_selector=selector)

    first = make_gang(kube, namespace, "first", pods=3, gpus=4, queue=team)
    wait_until("the first gang to be bound", lambda: len(bound(kube, namespace, first)) == 3, 30)

    # 4 GPUs are left: one pod of the second gang (2 x 4 GPUs) would fit, the gang does not.
    second = make_gang(kube, namespace, "second", pods=2, gpus=4, queue=team)
    pg = wait_until(
        "the second gang's Scheduled=False condition",
        lambda: (lambda g: g if (condition(g, "Scheduled") or {}).get("status") == "False" else None)(
            podgroup(kube, namespace, "second")
        ),
        30,
    )
    assert bound(kube, namespace, second) == {}, "a gang must never be partly bound"
    cond = condition(pg, "Scheduled")
    assert cond is not None and cond["reason"] == "GangDoesNotFit", cond
    sched = pg["status"]["schedulingConditions"][0]
    assert sched["type"] == "UnschedulableOnNodePool"
    assert sched["reasons"][0]["reason"] == "GangDoesNotFit"
    assert pg["status"]["phase"] == "Pending"
    ev = wait_until("an Unschedulable Event on the gang", lambda: events(kube, namespace, "second", "Unschedulable"))
    assert ev[0]["type"] == "Warning" and ev[0]["message"].startswith("GangDoesNotFit")

    # The first gang's PodGroup says it is scheduled, with a Scheduled event per pod.
    first_pg = wait_until(
        "the first gang's Scheduled=True condition",
        lambda: (lambda g: g if (condition(g, "Scheduled") or {}).get("status") == "True" else None)(
            podgroup(kube, namespace, "first")
        ),
    )
    assert first_pg["status"]["phase"] == "Running"
    assert "kai.scheduler/last-start-timestamp" in wait_until(
        "last-start annotation",
        lambda: (
            podgroup(kube, namespace, "first")["metadata"]
            .get("annotations", {})
            .get("kai.scheduler/last-start-timestamp")
            and podgroup(kube, namespace, "first")["metadata"]["annotations"]
        ),
    )
    wait_until(
        "Scheduled events on the first gang's pods", lambda: len(events(kube, namespace, reason="Scheduled")) >= 3
    )
    assert all(v <= 8 for v in gpu_use(kube, [namespace]).values())

    # When room appears (the first gang goes away) the second gang is bound as a whole.
    for name in first:
        kube.delete_pod(namespace, name, None, grace_seconds=0)
    wait_until("the second gang to be bound after room appears", lambda: len(bound(kube, namespace, second)) == 2, 30)


def test_gang_that_can_never_fit_reports_why(
    kube: Kube,
    namespace: str,
    queues: Any,
    node_pool: NodePool,
    run_scheduler: Any,
    priority_classes: Any,
    control_plane: ControlPlane,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, selector = node_pool(2, gpus=8)
    queues("dept")
    team = queues("team", parent="dept")
    run_scheduler(node_selector=selector)
    pods = make_gang(kube, namespace, "huge", pods=3, gpus=8, queue=team)  # 24 GPUs on a 16-GPU cluster
    pg = wait_until(
        "a pending reason on the PodGroup",
        lambda: (lambda g: g if condition(g, "Scheduled") else None)(podgroup(kube, namespace, "huge")),
        30,
    )
    cond = condition(pg, "Scheduled")
    assert cond is not None and cond["status"] == "False" and cond["reason"] == "NeverFits", cond
    assert "gpu" in cond["message"]
    assert pg["status"]["schedulingConditions"][0]["reasons"][0]["reason"] == "NeverFits"
    assert bound(kube, namespace, pods) == {}
    wait_until("an Unschedulable Event naming NeverFits", lambda: events(kube, namespace, "huge", "Unschedulable"))
    text = explain(kube, namespace, pods[0])
    assert "NeverFits" in text and "huge" in text

    # The same through the command line, and a one-line error for a name that does not exist.
    kubeconfig = str(control_plane.kubeconfig_path)
    assert _cli(["explain", pods[0], "-n", namespace, "--kubeconfig", kubeconfig]) == 0
    out = capsys.readouterr().out
    assert out.startswith("pending: NeverFits: the gang needs more gpu than the whole cluster has")
    assert "podgroup: huge" in out and "pods bound 0/3" in out
    assert _cli(["explain", "huge", "-n", namespace, "--kubeconfig", kubeconfig, "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["podGroup"]["scheduled"]["reason"] == "NeverFits" and data["podGroup"]["pods"] == {
        "total": 3,
        "bound": 0,
    }
    assert _cli(["explain", "no-such-thing", "-n", namespace, "--kubeconfig", kubeconfig]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("kai-ray: error: no pod, PodGroup") and "\n" not in err


def test_inference_preempts_training_in_one_queue(
    kube: Kube, namespace: str, queues: Any, node_pool: NodePool, run_scheduler: Any, priority_classes: Any
) -> None:
    _, selector = node_pool(2, gpus=8)
    queues("dept", gpu_quota=16)
    team = queues("team", gpu_quota=16, parent="dept")
    op: SchedulerOperator = run_scheduler(node_selector=selector)

    training = make_gang(kube, namespace, "training", pods=4, gpus=4, queue=team, priority="train")
    wait_until("training to fill the cluster", lambda: len(bound(kube, namespace, training)) == 4, 30)

    serving = make_gang(kube, namespace, "serving", pods=2, gpus=4, queue=team, priority="inference")
    wait_until("inference to be bound", lambda: len(bound(kube, namespace, serving)) == 2, 45)

    left = bound(kube, namespace, training)
    assert len(left) < 4, "some training pods must have been evicted"
    assert all(v <= 8 for v in gpu_use(kube, [namespace]).values())
    victim = wait_until(
        "the training PodGroup's Evicted condition",
        lambda: condition(podgroup(kube, namespace, "training"), "Evicted"),
    )
    assert victim["reason"] == "Preempted"
    assert f"{namespace}/serving" in victim["message"]
    ev = wait_until("a Preempted Event naming the preemptor", lambda: events(kube, namespace, reason="Preempted"))
    assert any(f"{namespace}/serving" in e["message"] for e in ev)
    wait_until(
        "the eviction to be counted",
        lambda: op.metrics.value("kai_ray_evictions_total", {"action": "preempt", "result": "ok"}) >= 1,
    )
    wait_until(
        "the last-eviction annotation on the training PodGroup",
        lambda: (
            "kai.scheduler/last-eviction-timestamp"
            in (podgroup(kube, namespace, "training")["metadata"].get("annotations") or {})
        ),
    )
    text = explain(kube, namespace, "training")
    assert "Preempted" in text and f"{namespace}/serving" in text


def test_a_preemptor_is_bound_as_its_victims_leave_before_the_next_cycle(
    kube: Kube, namespace: str, queues: Any, node_pool: NodePool, run_scheduler: Any, priority_classes: Any
) -> None:
    """Bind on release: the cycle that evicts pipelines the preemptor; the victims going is what binds it, without a
    cycle of its own (no periodic cycle runs here: the period is a minute)."""
    _, selector = node_pool(1, gpus=8)
    queues("dept", gpu_quota=8)
    team = queues("team", gpu_quota=8, parent="dept")
    op: SchedulerOperator = run_scheduler(node_selector=selector, schedule_period=60.0)
    training = make_gang(kube, namespace, "training", pods=2, gpus=4, queue=team, priority="train")
    wait_until("training to fill the node", lambda: len(bound(kube, namespace, training)) == 2, 30)
    serving = make_gang(kube, namespace, "serving", pods=1, gpus=8, queue=team, priority="inference")
    wait_until("inference to be bound", lambda: len(bound(kube, namespace, serving)) == 1, 45)
    assert bound(kube, namespace, training) == {}, "both victims are gone"
    assert all(v <= 8 for v in gpu_use(kube, [namespace]).values())
    assert op.metrics.value("kai_ray_release_binds_total") == 1, "bound as the victims left, by the plan"


def test_reclaim_across_queues(
    kube: Kube, namespace: str, queues: Any, node_pool: NodePool, run_scheduler: Any, priority_classes: Any
) -> None:
    _, selector = node_pool(2, gpus=8)
    queues("dept", gpu_quota=16)
    a = queues("a", gpu_quota=8, parent="dept")
    b = queues("b", gpu_quota=8, parent="dept")
    run_scheduler(node_selector=selector)

    jobs_a = []
    for i in range(4):  # 16 GPUs: queue a runs 8 over its quota
        jobs_a += make_gang(kube, namespace, f"a{i}", pods=1, gpus=4, queue=a, priority="train")
    wait_until("queue a to use the whole cluster", lambda: len(bound(kube, namespace, jobs_a)) == 4, 30)
    wait_until(
        "queue a's status to show 16 GPUs allocated",
        lambda: (kube.get(queues_path(a)).get("status") or {}).get("allocated", {}).get("nvidia.com/gpu") == "16",
    )

    jobs_b = make_gang(kube, namespace, "b0", pods=2, gpus=4, queue=b, priority="train")
    wait_until("queue b's in-quota gang to be bound", lambda: len(bound(kube, namespace, jobs_b)) == 2, 45)
    wait_until("queue a to keep two pods", lambda: len(bound(kube, namespace, jobs_a)) == 2, 30)
    assert all(v <= 8 for v in gpu_use(kube, [namespace]).values())

    def evicted() -> list[dict[str, Any]]:
        return [c for i in range(4) if (c := condition(podgroup(kube, namespace, f"a{i}"), "Evicted")) is not None]

    reclaimed = wait_until(
        "the Evicted conditions of the two reclaimed gangs", lambda: len(evicted()) == 2 and evicted()
    )
    assert all(c["reason"] == "Reclaimed" and f"{namespace}/b0" in c["message"] for c in reclaimed)
    assert len(bound(kube, namespace, jobs_a)) == 2, "exactly queue a's over-quota share is reclaimed"
    wait_until(
        "queue statuses to settle at 8 + 8, with queue a's fair share at 8",
        lambda: (
            lambda sa, sb: (
                (sa.get("allocated") or {}).get("nvidia.com/gpu") == "8"
                and (sb.get("allocated") or {}).get("nvidia.com/gpu") == "8"
                and (sa.get("fairShare") or {}).get("nvidia.com/gpu") == "8"
            )
        )(kube.get(queues_path(a)).get("status") or {}, kube.get(queues_path(b)).get("status") or {}),
    )


def test_bad_queue_and_podgroup_are_reported_and_scheduling_goes_on(
    kube: Kube, namespace: str, queues: Any, node_pool: NodePool, run_scheduler: Any, priority_classes: Any
) -> None:
    _, selector = node_pool(1, gpus=8)
    queues("dept")
    good = queues("good", parent="dept")
    bad = queues("bad", gpu_quota=10, gpu_limit=5, parent="dept")  # quota above limit
    op: SchedulerOperator = run_scheduler(node_selector=selector)

    in_bad_queue = make_gang(kube, namespace, "in-bad-queue", pods=1, gpus=1, queue=bad)
    kube.create(
        podgroups_path(namespace),
        podgroup_body("bad-spec", 1, good, minSubGroup=1),  # minMember and minSubGroup are exclusive
    )
    kube.create(pods_path(namespace), pod_body("bad-spec-0", 1, group="bad-spec"))

    qcond = wait_until(
        "the Queue's Valid=False condition",
        lambda: (lambda c: c if c and c["status"] == "False" else None)(condition(kube.get(queues_path(bad)), "Valid")),
    )
    assert "spec.resources.gpu.quota" in qcond["message"]
    wait_until(
        "an InvalidQueue Event",
        lambda: [e for e in kube.get(events_path("default"))["items"] if e["involvedObject"].get("name") == bad],
    )
    pg = wait_until(
        "the job in the bad queue to say so",
        lambda: (lambda c: c if c and c["reason"] == "QueueInvalid" else None)(
            condition(podgroup(kube, namespace, "in-bad-queue"), "Scheduled")
        ),
    )
    assert "spec.resources.gpu.quota" in pg["message"]
    spec_cond = wait_until(
        "the invalid PodGroup's condition",
        lambda: condition(podgroup(kube, namespace, "bad-spec"), "Scheduled"),
    )
    assert spec_cond["reason"] == "InvalidPodGroup" and "spec.minSubGroup" in spec_cond["message"]
    ev = wait_until("an Event on the invalid PodGroup", lambda: events(kube, namespace, "bad-spec", "Unschedulable"))
    assert "spec.minSubGroup" in ev[0]["message"]
    assert bound(kube, namespace, [*in_bad_queue, "bad-spec-0"]) == {}

    # The operator keeps running and scheduling.
    ok = make_gang(kube, namespace, "ok", pods=2, gpus=2, queue=good)
    wait_until("a valid gang to be bound", lambda: len(bound(kube, namespace, ok)) == 2, 30)
    cycles = op.cycles
    wait_until("more cycles", lambda: op.cycles > cycles)

    # Fixing the queue lets its job run.
    kube.merge_patch(queues_path(bad), {"spec": {"resources": {"gpu": {"limit": -1}}}})
    wait_until("the job in the fixed queue to be bound", lambda: bound(kube, namespace, in_bad_queue), 30)
    wait_until(
        "the queue's Valid=True condition",
        lambda: (condition(kube.get(queues_path(bad)), "Valid") or {}).get("status") == "True",
    )


def test_preemption_respects_pod_disruption_budgets_unless_told_to_delete(
    kube: Kube, namespace: str, queues: Any, node_pool: NodePool, run_scheduler: Any, priority_classes: Any
) -> None:
    """No kube-controller-manager runs here, so the test writes the PDB's status itself (0 disruptions allowed),
    as the disruption controller would; the API server's Eviction handler then enforces it for real."""
    _, selector = node_pool(2, gpus=8)
    queues("dept", gpu_quota=16)
    team = queues("team", gpu_quota=16, parent="dept")
    op: SchedulerOperator = run_scheduler(node_selector=selector)
    training = make_gang(kube, namespace, "training", pods=4, gpus=4, queue=team, labels={"app": "training"})
    wait_until("training to fill the cluster", lambda: len(bound(kube, namespace, training)) == 4, 30)
    pdb_path = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"
    pdb = kube.create(
        pdb_path,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "training"},
            "spec": {"minAvailable": 4, "selector": {"matchLabels": {"app": "training"}}},
        },
    )
    pdb["status"] = {
        "observedGeneration": pdb["metadata"]["generation"],
        "disruptionsAllowed": 0,
        "currentHealthy": 4,
        "desiredHealthy": 4,
        "expectedPods": 4,
    }
    kube.replace(f"{pdb_path}/training/status", pdb)

    serving = make_gang(kube, namespace, "serving", pods=2, gpus=4, queue=team, priority="inference")
    ev = wait_until("an EvictionBlocked Event", lambda: events(kube, namespace, reason="EvictionBlocked"), 30)
    assert "disruption budget" in ev[0]["message"]
    assert len(bound(kube, namespace, training)) == 4, "a PodDisruptionBudget must stop the eviction"
    assert bound(kube, namespace, serving) == {}
    assert op.metrics.value("kai_ray_evictions_total", {"action": "preempt", "result": "blocked"}) >= 1
    wait_until(
        "a blocked victim to be waited for no more (it stays; the loop must not hold cycles back for it)",
        lambda: not op.dispatch.awaiting_victims(),
        30,
    )

    op.stop()
    run_scheduler(node_selector=selector, eviction_mode="delete")
    wait_until("inference to be bound once victims are deleted", lambda: len(bound(kube, namespace, serving)) == 2, 45)
    assert all(v <= 8 for v in gpu_use(kube, [namespace]).values())


def test_a_gang_left_below_its_minimum_is_evicted_after_its_grace_period(
    kube: Kube, namespace: str, queues: Any, node_pool: NodePool, run_scheduler: Any, priority_classes: Any
) -> None:
    _, selector = node_pool(1, gpus=8)
    queues("dept")
    team = queues("team", parent="dept")
    run_scheduler(node_selector=selector)
    names = make_gang(kube, namespace, "gang", pods=3, gpus=1, queue=team, stalenessGracePeriod="3s")
    wait_until("the gang to run", lambda: len(bound(kube, namespace, names)) == 3, 30)
    kube.delete_pod(namespace, names[0], None, grace_seconds=0)  # one member dies; nothing recreates it
    stamped = wait_until(
        "the time it went stale to be stored on the PodGroup",
        lambda: (
            podgroup(kube, namespace, "gang")["metadata"]
            .get("annotations", {})
            .get("kai.scheduler/stale-podgroup-timestamp")
        ),
    )
    assert stamped.endswith("Z")
    wait_until("the rest of the gang to be evicted", lambda: bound(kube, namespace, names) == {}, 30)
    cond = wait_until("the Evicted condition", lambda: condition(podgroup(kube, namespace, "gang"), "Evicted"))
    assert cond["reason"] == "StaleGang"


def test_a_bare_pod_is_bound_once_its_own_podgroup_exists_without_the_stamp(
    kube: Kube, namespace: str, queues: Any, node_pool: NodePool, run_scheduler: Any, priority_classes: Any
) -> None:
    """A pod without owners belongs to ``pg-<name>-<uid>`` (the podgrouper gives it nothing else), so the scheduler
    binds it as soon as that PodGroup exists, before any ``pod-group-name`` stamp; without it, never."""
    _, selector = node_pool(1, gpus=8)
    queues("dept", gpu_quota=8)
    team = queues("team", gpu_quota=8, parent="dept")
    op: SchedulerOperator = run_scheduler(node_selector=selector)
    solo = kube.create(pods_path(namespace), pod_body("solo", 1))
    wait_until("the scheduler to see the pod", lambda: op.cache.pods.get(f"{namespace}/solo"))
    cycles = op.cycles
    op.wake()
    wait_until("a cycle that sees the pod", lambda: op.cycles > cycles)
    time.sleep(0.5)  # what that cycle would have dispatched has reached the API server
    assert bound(kube, namespace, ["solo"]) == {}, "no PodGroup: never bound"
    kube.create(podgroups_path(namespace), podgroup_body(f"pg-solo-{solo['metadata']['uid']}", 1, team))
    wait_until("the bare pod to be bound", lambda: bound(kube, namespace, ["solo"]), 30)
    assert "pod-group-name" not in (kube.get(pods_path(namespace, "solo"))["metadata"].get("annotations") or {})

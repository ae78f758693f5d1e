"""Which verdicts make kai-ray tell a node autoscaler that pods wait (``PodScheduled=False``/``Unschedulable``).

The end-to-end proof is the Karpenter lane (tests/k8s/autoscaling): a Ray worker group scaled up beyond the nodes
gets one bought. Here, the rule on the verdicts the core writes."""

from __future__ import annotations

from kai_ray.k8s.scheduling.podcondition import pending_reason
from kai_ray.scheduler.decisions import JobStatus, Reason


def test_a_waiting_gang_is_marked_with_its_verdict() -> None:
    assert pending_reason(JobStatus("ns/g", False, Reason.GANG_DOES_NOT_FIT, "no node")) is Reason.GANG_DOES_NOT_FIT


def test_a_running_gangs_pending_elastic_pods_are_marked_with_what_blocks_them() -> None:
    v = JobStatus(
        "ns/rc",
        True,
        Reason.SCHEDULED,
        "running at or above its minimum; 1 elastic pods pending: no node",
        {"pendingElastic": 1, "blocking": Reason.GANG_DOES_NOT_FIT.value},
    )
    assert pending_reason(v) is Reason.GANG_DOES_NOT_FIT


def test_nothing_is_marked_for_what_waits_on_nothing_a_node_could_give() -> None:
    running = JobStatus("ns/rc", True, Reason.SCHEDULED, "running", {"bound": 0})
    pipelined = JobStatus("ns/rc", True, Reason.PIPELINED, "1 pods pipelined", {"pipelined": 1})
    short = JobStatus("ns/g", False, Reason.NOT_READY, "fewer pods than the minimum")
    gated = JobStatus("ns/g", False, Reason.OVER_LIMIT, "gated: queue over quota", {"gated": True})
    assert [pending_reason(v) for v in (running, pipelined, short, gated)] == [None, None, None, None]

"""``PodScheduled=False``/``Unschedulable`` on the pods kai-ray leaves pending: the node autoscaler's signal.

Why: a node autoscaler (Karpenter, the cluster autoscaler) buys nodes for a pending pod only when the pod says it
could not be scheduled, i.e. its ``PodScheduled`` condition is ``False`` with reason ``Unschedulable``; kube-scheduler
writes it for its own pods, and KAI's scheduler for its pods (with the verdict as the message). Without it a gang
that fits no node waits for ever on a cluster that could grow. kai-ray writes it as KAI does, with one difference
that matters for autoscaling: a pod that still carries a scheduling gate is never marked (the API server already says
``SchedulingGated`` for it), so a gang held back by its queue's quota gate (:mod:`kai_ray.k8s.scheduling.ungate`)
is invisible to the autoscaler, and one whose queue does not gate is marked like every pending pod, as under KAI.

The pending elastic pods of a gang that runs (a Ray worker group its autoscaler grew) are marked too, with what
blocks them: otherwise a Ray scale-up beyond the nodes there are would never get a node.

Writes are rare: a pod is marked once per reason (the message is the verdict when first written, refreshed only when
the reason changes), after the verdict has lasted :data:`SETTLE` seconds (a gang whose pods are still arriving is
not marked), never for a gang that is still short of pods (``NotReadyForScheduling``: nothing to buy a node for
yet) or for a pod bound in the same cycle. Binding sets ``PodScheduled=True`` (the API server does it), so nothing is
cleared by hand. A new leader marks again what it has not written itself: the patch is idempotent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kai_ray.durations import rfc3339
from kai_ray.k8s.base.rest import ApiError, Kube, pods_path
from kai_ray.k8s.scheduling.cache import SnapshotView
from kai_ray.scheduler.decisions import CycleResult, JobStatus, Reason

log = logging.getLogger(__name__)

SETTLE = 1.0  # seconds a pending verdict must last before its pods are marked (as the PodGroup's status)
STRATEGIC = "application/strategic-merge-patch+json"  # conditions merge by type: the others stay as they are
NOT_MARKED = frozenset({Reason.NOT_READY})

Submit = Callable[[str, Callable[[], None]], None]


def condition_patch(reason: Reason, message: str, now_iso: str) -> dict[str, object]:
    """The pod status patch KAI writes for an unschedulable pod (type PodScheduled, reason Unschedulable)."""
    return {
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": f"{reason.value}: {message}",
                    "lastTransitionTime": now_iso,
                }
            ]
        }
    }


def pending_reason(v: JobStatus) -> Reason | None:
    """Why a gang's pending pods wait, when a node autoscaler should hear it (None: it should not). A gang running at
    or above its minimum is scheduled, but its pending elastic pods (a Ray worker group scaled up) wait for what
    blocks them, as a whole gang would: without the mark, no node is ever bought for a Ray autoscaler's scale-up."""
    if v.details.get("gated"):
        return None
    if v.scheduled:
        blocking = v.details.get("blocking")
        return Reason(blocking) if v.details.get("pendingElastic") and blocking else None
    return None if v.reason in NOT_MARKED else v.reason


@dataclass(eq=False)
class UnschedulableMarker:
    """Marks the pods of each cycle's pending gangs; ``submit`` runs a write in the status writer pool."""

    kube: Kube
    submit: Submit
    _first_seen: dict[str, tuple[Reason, float]] = field(default_factory=dict)  # job -> (reason, since)
    _marked: dict[str, Reason] = field(default_factory=dict)  # pod uid -> reason written

    def after_cycle(self, view: SnapshotView, result: CycleResult) -> None:
        now = time.monotonic()
        binding = {b.pod for b in result.binds}
        live: set[str] = set()
        jobs = {j.key: j for j in view.snapshot.jobs}
        for key, v in result.jobs.items():
            reason = pending_reason(v)
            if reason is None:
                self._first_seen.pop(key, None)
                continue
            seen = self._first_seen.get(key)
            if seen is None or seen[0] is not reason:
                self._first_seen[key] = seen = (reason, now)
            job = jobs.get(key)
            if job is None or now - seen[1] < SETTLE:
                continue
            for pod in job.pods:
                entry = view.pods_by_uid.get(pod.uid)
                if entry is None or entry.node or entry.terminal or pod.gated or pod.uid in binding:
                    continue
                live.add(pod.uid)
                if self._marked.get(pod.uid) is reason:
                    continue
                self._marked[pod.uid] = reason
                self.submit(f"podscheduled:{entry.key}", self._writer(entry.namespace, entry.name, reason, v.message))
        for key in [k for k in self._first_seen if k not in result.jobs]:
            del self._first_seen[key]
        for uid in [u for u in self._marked if u not in live]:
            del self._marked[uid]

    def _writer(self, namespace: str, name: str, reason: Reason, message: str) -> Callable[[], None]:
        def write() -> None:
            try:
                self.kube.request(
                    "PATCH",
                    f"{pods_path(namespace, name)}/status",
                    body=condition_patch(reason, message, rfc3339()),
                    content_type=STRATEGIC,
                )
            except ApiError as exc:
                if not exc.not_found:
                    log.info("marking pod %s/%s unschedulable: %s", namespace, name, exc)

        return write

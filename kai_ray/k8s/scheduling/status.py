"""What the scheduler writes on PodGroups and Queues: pure functions from the core's verdicts to status bodies.

PodGroup status follows KAI's shape: ``schedulingConditions`` of type ``UnschedulableOnNodePool`` with ``reasons`` (and
``details.queueDetails`` for quota reasons) while a group is pending, removed once it is scheduled; ``phase``. kai-ray
adds two ordinary ``conditions`` so ``kubectl wait`` and ``kai-ray explain`` can read a verdict: ``Scheduled``
(True/False with the core's reason and message) and ``Evicted`` (who preempted or reclaimed the group, and when).
"""

from __future__ import annotations

import os
from typing import Any

from kai_ray import constants as c
from kai_ray.api.quantity import QuantityError, parse_quantity
from kai_ray.scheduler.decisions import Evict, JobStatus, QueueStatus

NODE_POOL = "default"
SCHEDULED = "Scheduled"
EVICTED = "Evicted"
QUEUE_VALID = "Valid"


def _tid() -> str:
    """A transition ID (random; uuid4 is needlessly slow when thousands of groups change in one cycle)."""
    return os.urandom(6).hex()


def quantity(resource: str, value: float) -> str:
    """Core units (gpu count, cpu millicores, memory bytes) as a Kubernetes quantity string."""
    if value == -1:
        return "-1"
    if resource == "cpu":
        return f"{round(value)}m"
    if resource == "memory":
        return str(round(value))
    return f"{value:g}" if value != int(value) else str(int(value))


def resource_list(values: dict[str, float] | None) -> dict[str, str]:
    """``{"gpu": 2, "cpu": 4000, "memory": ...}`` -> ``{"nvidia.com/gpu": "2", "cpu": "4000m", "memory": "..."}``."""
    names = {"gpu": c.GPU_RESOURCE, "cpu": "cpu", "memory": "memory"}
    return {names[k]: quantity(k, float(v)) for k, v in (values or {}).items() if k in names}


def queue_details(details: dict[str, Any]) -> dict[str, Any] | None:
    q = details.get("queue")
    if not isinstance(q, dict):
        return None
    out: dict[str, Any] = {"name": q.get("name", "")}
    mapping = {
        "requested": "queueRequestedResources",
        "deserved": "queueDeservedResources",
        "allocated": "queueAllocatedResources",
        "allocatedNonPreemptible": "queueAllocatedNonPreemptibleResources",
        "limit": "queueResourceLimits",
        "podGroupRequested": "podGroupRequestedResources",
        "podGroupRequestedNonPreemptible": "podGroupRequestedNonPreemptibleResources",
    }
    for src, dst in mapping.items():
        if isinstance(q.get(src), dict):
            out[dst] = resource_list(q[src])
    return out


def _condition(
    existing: list[dict[str, Any]], type_: str, status: str, reason: str, message: str, now: str
) -> dict[str, Any]:
    old = next((cond for cond in existing if cond.get("type") == type_), None)
    same = old is not None and old.get("status") == status and old.get("reason") == reason
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": old.get("lastTransitionTime", now) if same and old else now,
        "transitionID": old.get("transitionID", _tid()) if same and old else _tid(),
    }


def _merge_conditions(existing: list[dict[str, Any]], new: dict[str, Any]) -> list[dict[str, Any]]:
    out = [cond for cond in existing if cond.get("type") != new["type"]]
    out.append(new)
    return sorted(out, key=lambda cond: str(cond.get("type")))


def podgroup_status(
    current: dict[str, Any] | None,
    verdict: JobStatus,
    now: str,
    counts: dict[str, int] | None = None,
    node_pool: str = NODE_POOL,
) -> dict[str, Any]:
    """The status change for one cycle's verdict: the ``Scheduled`` condition (its transition time kept while the
    verdict is unchanged), ``phase`` and KAI's ``schedulingConditions``. Other conditions are left alone."""
    current = current or {}
    conditions = list(current.get("conditions") or [])
    reason = verdict.reason.value
    cond = _condition(conditions, SCHEDULED, "True" if verdict.scheduled else "False", reason, verdict.message, now)
    status: dict[str, Any] = {"conditions": [cond]}
    if verdict.scheduled:
        status["phase"] = "Running"
        status["schedulingConditions"] = []
    else:
        status["phase"] = "Pending"
        explanation: dict[str, Any] = {"reason": reason, "message": verdict.message}
        qd = queue_details(verdict.details)
        if qd is not None:
            explanation["details"] = {"queueDetails": qd}
        old = next((sc for sc in current.get("schedulingConditions") or [] if sc.get("nodePool") == node_pool), None)
        same = old is not None and [r.get("reason") for r in old.get("reasons") or []] == [reason]
        status["schedulingConditions"] = [
            {
                "type": "UnschedulableOnNodePool",
                "nodePool": node_pool,
                "status": "True",
                "reason": "Unschedulable",
                "message": verdict.message,
                "reasons": [explanation],
                "lastTransitionTime": (old or {}).get("lastTransitionTime", now) if same else now,
                "transitionID": (old or {}).get("transitionID", _tid()) if same else _tid(),
            }
        ]
    if counts:
        status.update(counts)
    return status


def status_says(current: dict[str, Any] | None, change: dict[str, Any]) -> bool:
    """Whether ``current`` already says everything ``change`` would write: every field equal, and every condition
    of the change present with the same status, reason, message and transition (so a write would change nothing)."""
    current = current or {}
    for k, v in change.items():
        if k != "conditions":
            if current.get(k) != v and not (v in ([], None) and not current.get(k)):
                return False
            continue
        stored = {cond.get("type"): cond for cond in current.get("conditions") or []}
        for cond in v:
            old = stored.get(cond.get("type"))
            if old is None or any(old.get(f) != cond.get(f) for f in CONDITION_FIELDS):
                return False
    return True


CONDITION_FIELDS = ("status", "reason", "message", "lastTransitionTime", "transitionID")


def evicted_status(evictions: list[Evict], now: str) -> dict[str, Any]:
    """The ``Evicted`` condition after this cycle evicted pods of a group: action, reason and the preemptor."""
    cond = {
        "type": EVICTED,
        "status": "True",
        "reason": evictions[0].reason.value,
        "message": eviction_message(evictions),
        "lastTransitionTime": now,
        "transitionID": _tid(),
    }
    return {"conditions": [cond]}


def eviction_message(evictions: list[Evict]) -> str:
    first = evictions[0]
    preemptors = sorted({e.preemptor for e in evictions if e.preemptor})
    who = f" by {', '.join(preemptors)}" if preemptors else ""
    verb = {"preempt": "preempted", "reclaim": "reclaimed", "consolidation": "moved for consolidation"}.get(
        first.action.value, "evicted"
    )
    detail = f": {first.message}" if first.message else ""
    return f"{len(evictions)} pod(s) {verb}{who} ({first.action.value}){detail}"


def queue_status(qs: QueueStatus, children: list[str]) -> dict[str, Any]:
    return {
        "allocated": resource_list(qs.allocated),
        "allocatedNonPreemptible": resource_list(qs.allocated_non_preemptible),
        "requested": resource_list(qs.requested),
        "fairShare": resource_list(qs.fair_share),
        "usage": usage_status(qs.usage),
        "childQueues": sorted(children),
    }


def usage_status(usage: dict[str, float]) -> dict[str, float] | None:
    """``QueueStatus.usage`` -> ``status.usage``: normalised historical usage (a share of the cluster's capacity over
    the usage window, KAI's U') per resource name, 4 decimals (few rewrites); None when no usage is accounted, which
    also clears one left from when the feature was on."""
    if not usage:
        return None
    names = {"gpu": c.GPU_RESOURCE, "cpu": "cpu", "memory": "memory"}
    return {names[k]: round(float(v), 4) for k, v in usage.items() if k in names}


def queue_validity(current: dict[str, Any] | None, errors: list[str], now: str) -> dict[str, Any]:
    conditions = list((current or {}).get("conditions") or [])
    if errors:
        cond = _condition(conditions, QUEUE_VALID, "False", "InvalidSpec", "; ".join(errors), now)
    else:
        cond = _condition(conditions, QUEUE_VALID, "True", "Valid", "spec is valid", now)
    return {"conditions": _merge_conditions(conditions, cond)}


def oversized_fields(pod_name: str, spec: dict[str, Any] | None, largest: dict[str, float]) -> list[str]:
    """The container request fields of a pod that no node can hold (``largest``: the most any node offers, in core
    units), each named as a field path: what a NeverFits verdict should point a user at."""
    out = []
    scale = {"nvidia.com/gpu": ("gpu", 1.0), "cpu": ("cpu", 1000.0), "memory": ("memory", 1.0)}
    for i, ctr in enumerate((spec or {}).get("containers") or []):
        resources = ctr.get("resources") or {}
        for kind in ("requests", "limits"):
            for name, raw in (resources.get(kind) or {}).items():
                if name not in scale:
                    continue
                core, factor = scale[name]
                try:
                    value = parse_quantity(raw) * factor
                except QuantityError:
                    continue
                if value > largest.get(core, 0.0):
                    out.append(
                        f"Pod {pod_name} spec.containers[{i}].resources.{kind}[{name}]: {raw} is more than any node "
                        f"offers ({quantity(core, largest.get(core, 0.0))})"
                    )
            if out:
                break
    return out

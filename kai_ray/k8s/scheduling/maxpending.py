"""What a max-pending action leaves behind once the Ray path has tried to stop the owner: the record on the PodGroup
(``kai-ray.io/max-pending-acted``, which the core reads back so the action is taken once per wait, on any leader), its
condition (``Suspended`` or ``Failed``, reason ``MaxPendingTimeExceeded``) and the Warning Event's text.

Pure: the bodies are worked out here, dispatch writes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kai_ray import constants as c
from kai_ray.durations import rfc3339, span
from kai_ray.k8s.ray.elastic import SUSPEND_ANNOTATION
from kai_ray.k8s.ray.victims import StopOutcome
from kai_ray.scheduler.decisions import Reason


@dataclass(frozen=True)
class MaxPendingReport:
    annotations: dict[str, str | None]
    condition: dict[str, Any]
    text: str


def max_pending_report(out: StopOutcome) -> MaxPendingReport:
    """A kind that cannot suspend is reported (``Suspended: False``), never retried in a loop."""
    d = out.stop.decision
    action = d.action
    beyond = f"pending {span(d.waited)}, beyond its max-pending-time {span(d.limit)} ({c.MAX_PENDING_ACTION}: {action})"
    record: dict[str, Any] = {"action": action, "at": rfc3339(), "waited": span(d.waited), "suspended": out.applied}
    if not out.applied:
        record["refused"] = out.why
    # a gang kai-ray suspended for a preemptor, waiting to be resumed, is no longer resumed by kai-ray either
    annotations = {c.MAX_PENDING_ACTED: json.dumps(record, sort_keys=True), SUSPEND_ANNOTATION: None}
    what = out.stop.owner.kind if out.stop.owner is not None else "Ray object"
    if action == "fail":
        cond = {"type": "Failed", "status": "True", "reason": Reason.MAX_PENDING_TIME_EXCEEDED.value}
        after = "spec.suspend set" if out.applied else f"its pods stay pending, not placed again ({out.why})"
        text = f"{beyond}: marked failed, {after}; delete and re-create the {what} to retry"
    elif out.applied:
        cond = {"type": "Suspended", "status": "True", "reason": Reason.MAX_PENDING_TIME_EXCEEDED.value}
        text = f"{beyond}: spec.suspend set; lift it (spec.suspend: false) to queue again"
    else:
        cond = {"type": "Suspended", "status": "False", "reason": "MaxPendingActionRefused"}
        text = f"{beyond}: cannot suspend: {out.why}; reporting only"
    return MaxPendingReport(annotations, {**cond, "message": text, "lastTransitionTime": rfc3339()}, text)

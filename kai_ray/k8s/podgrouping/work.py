"""The podgrouper's work keys: ``pod/<ns>/<name>`` and ``ray/<Kind>/<ns>/<name>``, one per object in the work queue.

Why strings and not objects: the work queue de-duplicates by key, so a burst of events for one object is one
reconcile, and the parts that name follow-up work (a Ray object's pods, its owner) hand back these keys.
"""

from __future__ import annotations

POD = "pod/"
RAY = "ray/"


def pod_work(key: str) -> str:
    return f"{POD}{key}"


def ray_work(kind: str, key: str) -> str:
    return f"{RAY}{kind}/{key}"


def parse_work(work: str) -> tuple[str, str]:
    """``(kind, <ns>/<name>)``: ``Pod`` for a pod, the Ray kind for a Ray object."""
    if work.startswith(POD):
        return "Pod", work[len(POD) :]
    _, kind, key = work.split("/", 2)
    return kind, key

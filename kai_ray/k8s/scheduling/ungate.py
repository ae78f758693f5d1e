"""Removes the queue-admission gate from the pods of the gangs the cycle admitted
(:mod:`kai_ray.scheduler.queue_admission`).

Why here: the core decides which gangs their queue's quota admits; this adapter only carries that out. Each pod of an
admitted gang gets one strategic-merge patch that deletes the ``kai.scheduler/queue-admission`` gate (by name: a
foreign gate, or one removed meanwhile, is left alone) and stamps ``kai.scheduler/queue-admitted-timestamp`` in the
same write, so the stamp (the gang's reservation, read back by every later cycle and by any new leader) exists
exactly when the gate is gone. A patch lost to a leader change leaves the gang partly ungated; the core admits such
gangs first, so it converges.

A gang whose queue does not gate (``--queue-admission-gating=off``, or ``queues`` and the Queue not, or no longer,
opted in) is let go by the core unconditionally; its patch deletes the gate without the stamp, since no quota
decision reserved room for it. Turning the feature off, or a queue opting out, needs no clean-up.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kai_ray import constants as c
from kai_ray.durations import rfc3339
from kai_ray.k8s.base.rest import ApiError, Kube, pods_path
from kai_ray.k8s.scheduling.cache import PodEntry, SnapshotView
from kai_ray.scheduler.decisions import CycleResult

log = logging.getLogger(__name__)

STRATEGIC = "application/strategic-merge-patch+json"
RESEND_AFTER = 10.0  # seconds: a patch the watch has not reflected by then is sent again

Submit = Callable[[str, Callable[[], None]], None]


def ungate_patch(now_iso: str | None) -> dict[str, object]:
    """Delete the gate by name (``schedulingGates`` merges on ``name``) and, for an admission (``now_iso``), stamp
    it in the same write."""
    patch: dict[str, object] = {"spec": {"schedulingGates": [{"name": c.QUEUE_ADMISSION_GATE, "$patch": "delete"}]}}
    if now_iso is not None:
        patch["metadata"] = {"annotations": {c.QUEUE_ADMITTED: now_iso}}
    return patch


@dataclass(eq=False)
class Ungater:
    kube: Kube
    submit: Submit
    _sent: dict[str, float] = field(default_factory=dict)  # pod uid -> when its patch was submitted

    def after_cycle(self, view: SnapshotView, result: CycleResult) -> None:
        now = time.monotonic()
        for uid, admitted in [(uid, u.admitted) for u in result.ungate for uid in u.pods]:
            entry = view.pods_by_uid.get(uid)
            if entry is None or now - self._sent.get(uid, -RESEND_AFTER) < RESEND_AFTER:
                continue
            self._sent[uid] = now
            self.submit(f"ungate:{entry.key}", self._writer(entry, admitted))
        for uid in [u for u, at in self._sent.items() if now - at > 2 * RESEND_AFTER]:
            del self._sent[uid]

    def _writer(self, entry: PodEntry, admitted: bool) -> Callable[[], None]:
        def write() -> None:
            try:
                self.kube.request(
                    "PATCH",
                    pods_path(entry.namespace, entry.name),
                    body=ungate_patch(rfc3339() if admitted else None),
                    content_type=STRATEGIC,
                )
            except ApiError as exc:
                if not exc.not_found:
                    log.info("removing the queue-admission gate of pod %s: %s", entry.key, exc)

        return write

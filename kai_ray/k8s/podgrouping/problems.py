"""What is wrong with a Ray object or a pod, told on the object as a Warning Event, once per distinct message.

Why one record for every part: a Ray object's problem may be found while grouping it, while grouping one of its pods,
or when the API server refuses its PodGroup, and it must be told once, not by each; the record is also what says a
problem has gone (:meth:`Problems.cleared`).
"""

from __future__ import annotations

import logging
from typing import Any

from kai_ray.k8s.base.events import WARNING, EventRecorder, object_ref
from kai_ray.k8s.base.metrics import PodgrouperMetrics

log = logging.getLogger(__name__)


class Problems:
    def __init__(self, events: EventRecorder, metrics: PodgrouperMetrics) -> None:
        self.events = events
        self.metrics = metrics
        self._told: dict[str, str] = {}  # "<Kind>/<ns>/<name>" -> the last problem told

    def bad_ray_object(self, what: str, obj: dict[str, Any], kind: str, message: str) -> None:
        """A Ray object that cannot be grouped as it is (``what``: ``<Kind>/<ns>/<name>``)."""
        self.metrics.findings.labels(kind).inc()
        if self._told.get(what) != message:
            log.warning("%s: %s", what, message)
        self._told[what] = message
        self.events.emit(object_ref(obj, kind=kind), WARNING, "PodGroupError", message)

    def refused_for_pod(self, what: str, obj: dict[str, Any], message: str) -> None:
        """The PodGroup written for a pod was refused by the API server."""
        if self._told.get(what) != message:
            log.warning("%s: %s", what, message)
        self._told[what] = message
        self.events.emit(object_ref(obj, kind="Pod"), WARNING, "PodGroupError", message)

    def orphaned_pod(self, what: str, obj: dict[str, Any], message: str) -> None:
        """A pod whose owner chain cannot be followed."""
        if self._told.get(what) != message:
            self._told[what] = message
            log.warning("%s", message)
            self.events.emit(object_ref(obj, kind="Pod"), WARNING, "OwnerNotFound", message)

    def cleared(self, what: str) -> bool:
        """Forget the object's problem; True when there was one (the object is fine again)."""
        return self._told.pop(what, None) is not None

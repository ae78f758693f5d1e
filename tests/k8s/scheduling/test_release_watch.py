"""The release watcher's one rule: it binds a release plan as soon as the victims are gone, but never while a cycle
is deciding (that cycle's snapshot may not hold the plan's pods). The whole path runs on the control plane in
``test_scheduler_operator.py``; here the dispatch is a stand-in that only counts."""

from __future__ import annotations

import threading
from typing import Any, cast

from kai_ray.k8s.scheduling.release_watch import ReleaseWatcher
from tests.k8s.helpers import wait_until


class _Victims:
    """What the watcher reads of a dispatch: victims awaited, gone, and the plan bound."""

    def __init__(self) -> None:
        self.left = 2
        self.bound = 0

    def awaiting_victims(self) -> bool:
        return self.left > 0 or self.bound == 0

    def bind_if_released(self) -> int:
        if self.left:
            return 0
        self.bound += 1
        return 1


def test_the_plan_is_bound_once_the_victims_are_gone_and_no_cycle_is_deciding() -> None:
    victims, deciding, leading = _Victims(), threading.Lock(), threading.Event()
    leading.set()
    watcher = ReleaseWatcher(cast(Any, victims), deciding, leading)
    watcher.start()
    try:
        deciding.acquire()
        victims.left = 0
        bound_while_deciding = [victims.bound]
        for _ in range(10):  # the watcher polls every 20 ms: ten polls' worth while the cycle decides
            threading.Event().wait(0.02)
            bound_while_deciding.append(victims.bound)
        assert set(bound_while_deciding) == {0}, "never while a cycle decides"
        deciding.release()
        wait_until("the plan to be bound", lambda: victims.bound >= 1, 30)
    finally:
        watcher.stop()

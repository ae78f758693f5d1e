"""The thread that binds a preemptor's release plan the moment its victims are gone (bind on release).

Why a thread of its own: the cycle that evicts goes on after its evictions are sent (its status report costs about
as much as its decision at 5,000 nodes), and the victims are usually gone before it ends; waiting for the loop
would add the rest of that cycle to every preemption. Binding while the loop works is safe only outside its
*deciding* section (snapshot, core, dispatch): a cycle that decides from a snapshot taken before the plan's pods
were assumed could give their nodes away. The loop holds the deciding lock through that section, and this thread
only binds when it can take the lock without waiting; it tries again every ``POLL`` seconds while victims are
awaited.
"""

from __future__ import annotations

import logging
import threading

from kai_ray.k8s.scheduling.dispatch import Dispatch

log = logging.getLogger(__name__)

POLL = 0.02  # seconds between checks while victims of a pipelined gang are going
IDLE_POLL = 0.1  # seconds between checks otherwise (a flag read)


class ReleaseWatcher:
    """Binds :meth:`Dispatch.bind_if_released` as soon as the awaited victims are gone, outside the deciding
    section."""

    def __init__(self, dispatch: Dispatch, deciding: threading.Lock, leading: threading.Event) -> None:
        self.dispatch = dispatch
        self.deciding = deciding
        self.leading = leading
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="release-binds", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(POLL if self.dispatch.awaiting_victims() else IDLE_POLL):
            if not self.leading.is_set() or not self.dispatch.awaiting_victims():
                continue
            if not self.deciding.acquire(blocking=False):
                continue  # a cycle is deciding: its own snapshot may not hold the plan's pods
            try:
                self.dispatch.bind_if_released()
            except Exception:
                log.exception("binding a release plan failed; the next cycle decides")
            finally:
                self.deciding.release()

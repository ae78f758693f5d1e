"""Leader election over a ``coordination.k8s.io/v1`` Lease, client-go's algorithm.

Why this matters: two scheduler replicas that both bind would over-commit nodes. A replica acts only while it holds
the Lease; it renews every ``retry_period`` and steps down (``on_stop``) as soon as it has failed to renew for
``renew_deadline``, which is shorter than ``lease_duration`` - so the old leader has stopped before any other replica
may take over. Expiry is judged by when *this* replica last saw the lease record change (local monotonic clock), not
by the timestamps written in it, so clock skew between machines cannot shorten the wait.

A graceful stop releases the Lease (client-go's ``ReleaseOnCancel``: no holder, a one-second duration) and may leave
a note for the next leader in the Lease's annotations (``handover``); followers also *watch* the Lease, so a release is
acted on at once instead of at the next ``retry_period``. The watch only wakes the loop early: acquiring still goes
through the same optimistic-concurrency update, so it can never make two leaders.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kai_ray.k8s.base.rest import ApiError, Kube, iter_json_lines

log = logging.getLogger(__name__)

HANDOVER_PREFIX = "handover.kai-ray.io/"  # annotations a releasing leader leaves for the next one


def _now_micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class LeaseConfig:
    name: str
    namespace: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


class LeaderElector:
    """Runs in its own thread; ``is_leader`` is safe to read from any thread."""

    def __init__(
        self,
        kube: Kube,
        cfg: LeaseConfig,
        on_start: Callable[[], None],
        on_stop: Callable[[], None],
    ) -> None:
        if not cfg.renew_deadline < cfg.lease_duration:
            raise ValueError("renew deadline must be shorter than the lease duration")
        self.kube = kube
        self.cfg = cfg
        self.on_start = on_start
        self.on_stop = on_stop
        self._leader = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._observed: dict[str, Any] | None = None  # last lease spec seen
        self._observed_at = 0.0  # monotonic time it last changed
        self._wakeup = threading.Event()  # set by the Lease watch when the Lease is released or deleted
        self._watch_resp: Any = None
        self.transitions = 0
        self.handover: dict[str, str] = {}  # the annotations the previous holder left when it released the Lease
        self.acquired_at = 0.0  # monotonic time this replica last became leader
        self.took_released = False  # this replica's last acquisition took a Lease its holder had released

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.cfg.namespace}/leases/{self.cfg.name}"

    def is_leader(self) -> bool:
        return self._leader.is_set()

    def start(self) -> LeaderElector:
        self._thread = threading.Thread(target=self._run, name=f"leader-{self.cfg.name}", daemon=True)
        self._thread.start()
        threading.Thread(target=self._watch_lease, name=f"leader-watch-{self.cfg.name}", daemon=True).start()
        return self

    def stop(self, release: bool = True, timeout: float = 5.0, handover: dict[str, str] | None = None) -> None:
        """Stop campaigning; ``release=True`` hands the lease back so a peer takes over at once (graceful exit),
        with ``handover`` written as annotations of the Lease for the next leader to read."""
        self._stop.set()
        self._wakeup.set()
        resp = self._watch_resp
        if resp is not None:
            with contextlib.suppress(Exception):  # best effort on a dying socket
                resp.shutdown()
        if self._thread is not None:
            self._thread.join(timeout)
        was_leader = self._leader.is_set()
        self._step_down()
        if release and was_leader:
            try:
                lease = self.kube.get(self.path)
                if (lease.get("spec") or {}).get("holderIdentity") == self.cfg.identity:
                    lease["spec"]["holderIdentity"] = ""
                    lease["spec"]["leaseDurationSeconds"] = 1
                    if handover:
                        meta = lease.setdefault("metadata", {})
                        meta["annotations"] = {**(meta.get("annotations") or {}), **handover}
                    self.kube.replace(self.path, lease)
            except ApiError as exc:
                log.info("could not release lease %s: %s", self.cfg.name, exc)

    def _watch_lease(self) -> None:
        """Wake the election loop as soon as the Lease is released or deleted (a follower's fast path). Without
        permission to watch Leases this quietly ends and the loop polls every ``retry_period`` as before."""
        collection = f"/apis/coordination.k8s.io/v1/namespaces/{self.cfg.namespace}/leases"
        query = {"watch": "1", "fieldSelector": f"metadata.name={self.cfg.name}", "timeoutSeconds": 300}
        while not self._stop.is_set():
            try:
                resp = self.kube.open_stream(collection, query, timeout=330)
            except ApiError as exc:
                if exc.status in (401, 403, 404, 405):
                    log.debug("not watching lease %s (%s); polling only", self.cfg.name, exc)
                    return
                self._stop.wait(self.cfg.retry_period)
                continue
            except Exception:
                self._stop.wait(self.cfg.retry_period)
                continue
            self._watch_resp = resp
            try:
                for event in iter_json_lines(resp):
                    spec = (event.get("object") or {}).get("spec") or {}
                    if event.get("type") == "DELETED" or not spec.get("holderIdentity"):
                        self._wakeup.set()
                    if self._stop.is_set():
                        return
            except Exception:
                self._stop.wait(min(1.0, self.cfg.retry_period))
            finally:
                self._watch_resp = None

    # --- loop ---------------------------------------------------------------------------------------------------

    def _run(self) -> None:
        last_renew = 0.0
        last_error = ""
        while not self._stop.is_set():
            ok = False
            try:
                ok = self._try_acquire_or_renew()
                last_error = ""
            except ApiError as exc:
                if exc.unreachable:
                    self.kube.reachability.failed(exc)  # logged there, once for the whole operator
                elif str(exc) != last_error:  # e.g. a missing namespace or RBAC: say so once, keep trying
                    log.warning("lease %s/%s: %s", self.cfg.namespace, self.cfg.name, exc)
                last_error = str(exc)
            except Exception:
                log.exception("lease %s: unexpected error", self.cfg.name)
            now = time.monotonic()
            if ok:
                last_renew = now
                if not self._leader.is_set():
                    self.transitions += 1
                    log.info("%s became leader of lease %s/%s", self.cfg.identity, self.cfg.namespace, self.cfg.name)
                    self.acquired_at = now
                    self._leader.set()
                    self._call(self.on_start)
            elif self._leader.is_set() and now - last_renew >= self.cfg.renew_deadline:
                log.warning(
                    "%s lost lease %s: could not renew in %.1fs", self.cfg.identity, self.cfg.name, now - last_renew
                )
                self._step_down()
            wait = self.cfg.retry_period
            if self._leader.is_set():
                # Do not sleep past the renew deadline even if retry_period is long.
                wait = min(wait, max(0.05, self.cfg.renew_deadline - (time.monotonic() - last_renew)) / 2)
            if self._wakeup.wait(wait):
                self._wakeup.clear()

    def _step_down(self) -> None:
        if self._leader.is_set():
            self._leader.clear()
            self._call(self.on_stop)

    def _call(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:
            log.exception("leader-election callback failed")

    def _spec(self, transitions: int, acquire: str | None) -> dict[str, Any]:
        now = _now_micro()
        return {
            "holderIdentity": self.cfg.identity,
            "leaseDurationSeconds": max(1, round(self.cfg.lease_duration)),
            "acquireTime": acquire or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    def _try_acquire_or_renew(self) -> bool:
        try:
            lease = self.kube.get(self.path)
        except ApiError as exc:
            if not exc.not_found:
                raise
            spec0 = self._spec(0, None)
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.cfg.name, "namespace": self.cfg.namespace},
                "spec": spec0,
            }
            try:
                self.kube.create(f"/apis/coordination.k8s.io/v1/namespaces/{self.cfg.namespace}/leases", body)
            except ApiError as err:
                if err.conflict:
                    return False
                raise
            self._observe(spec0)
            return True
        spec = lease.get("spec") or {}
        self._observe(spec)
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or self.cfg.lease_duration)
        mine = holder == self.cfg.identity
        if holder and not mine and time.monotonic() - self._observed_at < duration:
            return False  # someone else holds a lease that has not expired as far as we have seen
        transitions = int(spec.get("leaseTransitions") or 0)
        if not mine:
            meta = lease.setdefault("metadata", {})
            notes = meta.get("annotations") or {}
            self.took_released = not holder
            self.handover = {k: v for k, v in notes.items() if k.startswith(HANDOVER_PREFIX)} if not holder else {}
            if self.handover:  # read once: a later leader must not act on this one's note
                meta["annotations"] = {k: v for k, v in notes.items() if not k.startswith(HANDOVER_PREFIX)}
        lease["spec"] = self._spec(transitions if mine else transitions + 1, spec.get("acquireTime") if mine else None)
        try:
            updated = self.kube.replace(self.path, lease)  # resourceVersion in the body: optimistic concurrency
        except ApiError as exc:
            if exc.conflict:
                return False
            raise
        self._observe(updated.get("spec") or lease["spec"])
        return True

    def _observe(self, spec: dict[str, Any]) -> None:
        record = {k: spec.get(k) for k in ("holderIdentity", "renewTime", "leaseTransitions", "acquireTime")}
        if record != self._observed:
            self._observed = record
            self._observed_at = time.monotonic()

"""List-then-watch one resource into an in-memory store, like client-go's informer.

Why our own: the operators keep a live picture of thousands of pods and must not re-list them every cycle, nor pay
for model objects per event. One thread per informer lists, then watches from the list's resourceVersion with
bookmarks. The first list asks for ``resourceVersion=0``, as client-go's reflector does: the API server answers from
its watch cache in one response instead of a consistent read page by page from etcd (at 5,000 pods about twice as
fast), and the watch that follows brings the store up to date; later lists (after a ``410 Gone``, or
:meth:`Informer.relist`) are consistent reads, paginated. A ``410 Gone`` or a broken stream is answered by a fresh
list whose differences are delivered as ordinary events, so handlers only ever see upserts and deletes. Handlers run
on the informer thread and must be quick (update a cache, enqueue a key); an exception in a handler is logged, never
fatal.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kai_ray.k8s.base.collector import collector_paused
from kai_ray.k8s.base.rest import ApiError, Kube, iter_json_lines, resource_version

log = logging.getLogger(__name__)

UPSERT = "upsert"
DELETE = "delete"

Handler = Callable[[str, str, dict[str, Any]], None]  # (UPSERT|DELETE, key, object)


def object_key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    """Drop ``managedFields``: the largest part of most objects and never read by kai-ray."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


class Informer:
    """One resource (``path`` is its collection URL, e.g. ``/api/v1/pods``), optionally filtered by selectors."""

    def __init__(
        self,
        kube: Kube,
        path: str,
        *,
        name: str = "",
        handler: Handler | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        transform: Callable[[dict[str, Any]], dict[str, Any]] = slim,
        page_size: int = 500,
        watch_timeout: int = 240,
        missing_ok: bool = False,
    ) -> None:
        self.kube = kube
        self.path = path
        self.name = name or path
        self.handlers: list[Handler] = [handler] if handler else []
        self.field_selector = field_selector
        self.label_selector = label_selector
        self.transform = transform
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.missing_ok = missing_ok  # a missing resource type (CRD not installed) is retried quietly
        self.store: dict[str, dict[str, Any]] = {}
        self.lock = threading.RLock()
        self.synced = threading.Event()
        self.missing = False
        self.resource_version = ""
        self._stop = threading.Event()
        self._relist = threading.Event()
        self._relisted = threading.Condition()
        self._list_count = 0
        self._resp: Any = None
        self.list_seconds = 0.0  # how long the last list took (pages, parsing, handlers)
        self.watching = threading.Event()  # a watch stream is open: the store follows the server within milliseconds
        self._progress = threading.Condition()
        self._thread: threading.Thread | None = None

    # --- lifecycle ----------------------------------------------------------------------------------------------

    def start(self) -> Informer:
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._close_stream()
        if self._thread is not None:
            self._thread.join(timeout)

    def wait_synced(self, timeout: float) -> bool:
        return self.synced.wait(timeout)

    def relist(self, timeout: float = 30.0) -> bool:
        """List again now (e.g. on becoming leader, to see every write of the previous leader); wait for it."""
        with self._relisted:
            target = self._list_count + 1
            self._relist.set()
            self._close_stream()
            return self._relisted.wait_for(lambda: self._list_count >= target or self._stop.is_set(), timeout)

    def wait_for_version(self, rv: str, timeout: float) -> bool:
        """Wait until this informer has seen everything up to ``rv`` (a resourceVersion another watcher of the same
        resource reported). resourceVersions are opaque to clients in principle; a value that is not an integer
        answers False, and the caller falls back to a fresh list."""
        try:
            target = int(rv)
        except ValueError:
            return False

        def seen() -> bool:
            try:
                return int(self.resource_version or 0) >= target
            except ValueError:
                return False

        with self._progress:
            return self._progress.wait_for(lambda: seen() or self._stop.is_set(), timeout) and seen()

    def _advanced(self) -> None:
        with self._progress:
            self._progress.notify_all()

    def _close_stream(self) -> None:
        resp = self._resp
        if resp is not None:
            with contextlib.suppress(Exception):  # best effort on a dying socket
                resp.shutdown()

    # --- reading ------------------------------------------------------------------------------------------------

    def get(self, key: str) -> dict[str, Any] | None:
        with self.lock:
            return self.store.get(key)

    def items(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.store.values())

    def list_keys(self) -> list[str]:
        with self.lock:
            return list(self.store)

    # --- the loop -----------------------------------------------------------------------------------------------

    def _query(self) -> dict[str, Any]:
        return {"fieldSelector": self.field_selector, "labelSelector": self.label_selector}

    def _run(self) -> None:
        backoff = 0.2
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list or self._relist.is_set():
                    self._relist.clear()
                    self._list()
                    need_list = False
                self._watch()
                backoff = 0.2
            except _Gone:
                need_list = True
            except ApiError as exc:
                if exc.unreachable:  # the operator's one retry loop says so and tells us when to go on
                    self.kube.reachability.failed(exc)
                    if not self.kube.reachability.wait(self._stop) and not self._stop.is_set():
                        self._stop.wait(backoff)  # the client is closing: no prober to wait for
                        backoff = min(backoff * 2, 30.0)
                    need_list = True
                    continue
                if exc.status == 404 and self.missing_ok:
                    if not self.missing:
                        log.info("%s: resource not served (CRD not installed?); retrying quietly", self.name)
                    self.missing = True
                    self.synced.set()  # nothing to wait for
                    backoff = 5.0
                else:
                    log.warning("%s: %s; retrying in %.1fs", self.name, exc, backoff)
                need_list = True
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
            except Exception as exc:
                if self._stop.is_set():
                    break
                if not self._relist.is_set():
                    log.debug("%s: watch ended (%s); resuming", self.name, exc)
                    self._stop.wait(min(backoff, 1.0))
                    backoff = min(backoff * 2, 30.0)

    def _list(self) -> None:
        with collector_paused():
            self._list_paused()

    def _list_paused(self) -> None:
        t0 = time.monotonic()
        items: dict[str, dict[str, Any]] = {}
        cont = ""
        rv = ""
        first = self._list_count == 0 and not self.resource_version
        while True:
            if first and not cont:  # from the watch cache, whole (a server without one pages as usual)
                query = {**self._query(), "resourceVersion": "0", "limit": self.page_size}
            else:
                query = {**self._query(), "limit": self.page_size, "continue": cont or None}
            page = self.kube.request("GET", self.path, query=query, timeout=120.0)
            for obj in page.get("items") or []:
                obj = self.transform(obj)
                items[object_key(obj)] = obj
            meta = page.get("metadata") or {}
            rv = meta.get("resourceVersion", rv)
            cont = meta.get("continue") or ""
            if not cont:
                break
        with self.lock:
            old = self.store
            self.store = items
            self.resource_version = rv
        self.missing = False
        for key, obj in old.items():
            if key not in items:
                self._emit(DELETE, key, obj)
        for key, obj in items.items():
            prev = old.get(key)
            if prev is None or resource_version(prev) != resource_version(obj):
                self._emit(UPSERT, key, obj)
        self.list_seconds = round(time.monotonic() - t0, 3)
        self.synced.set()
        self._advanced()
        with self._relisted:
            self._list_count += 1
            self._relisted.notify_all()

    def _watch(self) -> None:
        query = {
            **self._query(),
            "watch": "1",
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": self.watch_timeout,
        }
        resp = self.kube.open_stream(self.path, query, timeout=self.watch_timeout + 30)
        self._resp = resp
        self.watching.set()
        try:
            if self._stop.is_set() or self._relist.is_set():
                return
            for event in iter_json_lines(resp):
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    code = obj.get("code")
                    if code == 410:
                        raise _Gone()
                    raise ApiError(int(code or 500), str(obj.get("reason", "")), str(obj.get("message", "")))
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if kind == "BOOKMARK":
                    if rv:
                        self.resource_version = rv
                        self._advanced()
                    continue
                obj = self.transform(obj)
                key = object_key(obj)
                with self.lock:
                    if kind == "DELETED":
                        self.store.pop(key, None)
                    else:
                        self.store[key] = obj
                    if rv:
                        self.resource_version = rv
                self._emit(DELETE if kind == "DELETED" else UPSERT, key, obj)
                self._advanced()
                if self._stop.is_set() or self._relist.is_set():
                    return
        finally:
            self.watching.clear()
            self._resp = None

    def _emit(self, kind: str, key: str, obj: dict[str, Any]) -> None:
        for handler in self.handlers:
            try:
                handler(kind, key, obj)
            except Exception:
                log.exception("%s: handler failed for %s %s", self.name, kind, key)


class _Gone(Exception):
    """The watch's resourceVersion is too old: list again."""


def wait_all_synced(informers: list[Informer], stop: threading.Event, warn_every: float = 30.0) -> bool:
    """Wait until every informer has listed once (or ``stop`` is set). Never acts on a partial picture: a missing
    list (e.g. no RBAC permission) keeps the operator waiting and saying so, rather than scheduling blind."""
    since = time.monotonic()
    while not stop.is_set():
        waiting = [inf.name for inf in informers if not inf.synced.is_set()]
        if not waiting:
            return True
        if time.monotonic() - since >= warn_every:
            log.warning("still waiting for the first list of: %s", ", ".join(waiting))
            since = time.monotonic()
        stop.wait(0.05)
    return False

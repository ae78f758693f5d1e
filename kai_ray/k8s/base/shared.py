"""Watched objects' repeated parts held once: their strings interned, their common small parts shared by value.

Why: the JSON decoder gives every watch event fresh strings and fresh sub-objects. At 40,000 pods and as many
PodGroups the scheduler held the same namespace, label values, timestamps, tolerations and container requests
once per object (an offline reproduction of a 5,000-node cluster counted 3.4 KB of repeated strings per pod and
PodGroup, before any sub-object). orjson shares only dictionary keys; ``sys.intern`` shares strings (and frees
them with their last user); we found no library that shares JSON sub-trees by value, hence :class:`SharedParts`.

Sharing makes the stored objects read-only in those parts: nothing that reads the informers' objects may change
them in place (the operators copy before they change anything, as they must for the informer's store anyway).
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import orjson

_intern = sys.intern


_UNIQUE = frozenset({"resourceVersion"})  # new on every write: interning it would only churn the table


def intern_strings(obj: Any, skip: frozenset[int] = frozenset()) -> Any:
    """``obj`` (decoded JSON, changed in place) with every string value interned but the resourceVersion, not
    descending into the containers whose ``id`` is in ``skip`` (parts already held, interned); returns it."""
    if type(obj) is dict:
        for k, v in obj.items():
            t = type(v)
            if t is str:
                if k not in _UNIQUE:
                    obj[k] = _intern(v)
            elif (t is dict or t is list) and id(v) not in skip:
                intern_strings(v, skip)
    elif type(obj) is list:
        for i, v in enumerate(obj):
            t = type(v)
            if t is str:
                obj[i] = _intern(v)
            elif (t is dict or t is list) and id(v) not in skip:
                intern_strings(v, skip)
    return obj


class SharedParts:
    """One object per distinct value of the small parts many objects repeat (a pod's tolerations, its containers'
    requests, a PodGroup's spec). Bounded: at ``limit`` distinct values the table starts over, so parts that no
    object holds any more are not kept for ever; objects already stored keep the parts they were given."""

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._by_value: dict[bytes, Any] = {}
        self._lock = threading.Lock()

    def get(self, part: Any) -> Any:
        """The held object equal to ``part`` (a JSON value, not changed afterwards), or ``part`` itself, its
        strings interned, now held."""
        key = orjson.dumps(part)
        with self._lock:
            held = self._by_value.get(key)
        if held is not None:
            return held
        intern_strings(part)
        with self._lock:
            if len(self._by_value) >= self.limit:
                self._by_value.clear()
            return self._by_value.setdefault(key, part)

    def share(self, obj: dict[str, Any], path: tuple[str, ...]) -> int | None:
        """Replace the part of ``obj`` at ``path`` (dictionary keys), if there is one, by its held equal; returns
        the ``id`` of what is there now (None: nothing was)."""
        parent: Any = obj
        for k in path[:-1]:
            parent = parent.get(k)
            if not isinstance(parent, dict):
                return None
        part = parent.get(path[-1])
        if part is None or isinstance(part, str | int | float | bool):
            return None
        held = parent[path[-1]] = self.get(part)
        return id(held)

    def share_all(self, obj: dict[str, Any], paths: tuple[tuple[str, ...], ...]) -> dict[str, Any]:
        """``obj`` (decoded JSON, changed in place) with the parts at ``paths`` shared and every other string
        interned; returns it."""
        held = frozenset(i for i in (self.share(obj, path) for path in paths) if i is not None)
        return intern_strings(obj, held)

    def __len__(self) -> int:
        return len(self._by_value)

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


def intern_strings(obj: Any) -> Any:
    """``obj`` (decoded JSON, changed in place) with every string value interned but the resourceVersion; returns
    it."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if type(v) is str:
                if k not in _UNIQUE:
                    obj[k] = _intern(v)
            elif isinstance(v, dict | list):
                intern_strings(v)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            if type(v) is str:
                obj[i] = _intern(v)
            elif isinstance(v, dict | list):
                intern_strings(v)
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
        """The held object equal to ``part`` (a JSON value, not changed afterwards), or ``part`` itself, now held."""
        key = orjson.dumps(part)
        with self._lock:
            held = self._by_value.get(key)
            if held is None:
                if len(self._by_value) >= self.limit:
                    self._by_value.clear()
                held = self._by_value[key] = part
        return held

    def share(self, obj: dict[str, Any], path: tuple[str, ...]) -> None:
        """Replace the part of ``obj`` at ``path`` (dictionary keys), if there is one, by its held equal."""
        parent: Any = obj
        for k in path[:-1]:
            parent = parent.get(k)
            if not isinstance(parent, dict):
                return
        part = parent.get(path[-1])
        if part is not None and not isinstance(part, str | int | float | bool):
            parent[path[-1]] = self.get(part)

    def __len__(self) -> int:
        return len(self._by_value)

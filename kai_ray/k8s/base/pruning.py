"""Fields the installed CRDs do not store: found once, reported once, never written again.

The API server silently drops (prunes) every field a CRD's structural schema does not declare. kai-ray's own CRDs
declare everything kai-ray writes; KAI's do not (KAI v0.12's Queue has no ``status.fairShare`` and no
``transitionID`` on Queue conditions). When KAI's CRDs were installed first, Helm skips ours, and a writer that
compares what it wants with what is stored would rewrite the missing field forever. So every write's answer is
compared with what was sent: a path that was sent and is not stored is pruned. The first time a path is seen pruned
it is logged (and the caller may post an Event); from then on it is stripped from what is written and compared.

Paths are dotted, with ``[]`` for "every element of a list": ``status.fairShare``,
``status.conditions[].transitionID``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger(__name__)


def pruned_paths(sent: Any, stored: Any, prefix: str = "") -> set[str]:
    """Paths present in ``sent`` and absent from ``stored``: map keys, and keys of list elements by position.

    ``None`` in ``sent`` is a merge-patch deletion and not counted; values themselves are not compared (the server
    may normalise them: quantities, timestamps)."""
    out: set[str] = set()
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return out
        for key, value in sent.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if value is None:
                continue
            if key not in stored:
                out.add(path)
            else:
                out |= pruned_paths(value, stored[key], path)
    elif isinstance(sent, list) and isinstance(stored, list):
        for a, b in zip(sent, stored, strict=False):
            out |= pruned_paths(a, b, f"{prefix}[]")
    return out


def strip(body: Any, paths: set[str]) -> Any:
    """A copy of ``body`` without ``paths`` (the original is not modified)."""
    if not paths:
        return body
    return _strip(body, [p.replace("[]", ".[]").split(".") for p in paths])


def _strip(node: Any, paths: list[list[str]]) -> Any:
    if isinstance(node, list):
        inner = [p[1:] for p in paths if p and p[0] == "[]"]
        return [_strip(x, inner) for x in node] if inner else node
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        below = [p[1:] for p in paths if p and p[0] == key]
        if any(not rest for rest in below):
            continue
        out[key] = _strip(value, [b for b in below if b]) if below else value
    return out


class PruneGuard:
    """Per-kind memory of pruned paths, shared by the threads that write objects of that kind."""

    def __init__(self) -> None:
        self._pruned: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def known(self, kind: str) -> set[str]:
        with self._lock:
            return set(self._pruned.get(kind, ()))

    def strip(self, kind: str, body: Any) -> Any:
        return strip(body, self.known(kind))

    def check(self, kind: str, sent: Any, stored: Any, what: str = "") -> set[str]:
        """Record the paths of ``sent`` that ``stored`` lacks; returns those never seen before (already logged)."""
        found = pruned_paths(sent, stored)
        if not found:
            return set()
        with self._lock:
            seen = self._pruned.setdefault(kind, set())
            new = found - seen
            seen |= new
        if new:
            log.warning(
                "the installed %s CRD does not store %s (its schema prunes them%s); kai-ray stops writing them. "
                "Install kai-ray's CRDs (helm/kai-ray/crds) to keep them.",
                kind,
                ", ".join(sorted(new)),
                f", seen on {what}" if what else "",
            )
        return new

"""The headline's figures, read from what the workloads leave behind (``examples/headline/train.py`` writes
``progress.json`` and one JSON line per step), so a benchmark on the host needs no Kubernetes API to follow training.

The pure functions here are shared by the tests with real Ray processes and by ``kai-ray bench headline``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PROGRESS = "progress.json"


def read_progress(directory: Path) -> dict[str, Any] | None:
    """The training's ``progress.json`` (written atomically by the script), or None before its first write."""
    try:
        loaded = json.loads((directory / PROGRESS).read_text())
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def read_steps(log: str) -> list[int]:
    """The step numbers of the per-step JSON lines in a driver's output, in order (other lines ignored)."""
    steps = []
    for line in log.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and "event" not in rec and isinstance(rec.get("step"), int):
            steps.append(rec["step"])
    return steps


def seconds_below(history: Sequence[Sequence[float]], full: int, start: float, end: float) -> float:
    """Wall seconds in ``[start, end]`` during which the worker count (a list of ``[time, workers]`` change points,
    as ``progress.json`` keeps it) was below ``full``. Before the first point the count is taken as full."""
    total = 0.0
    points = sorted((float(t), int(n)) for t, n in history)
    current = full
    at = start
    for t, n in points:
        if t > end:
            break
        if t > at:
            if current < full:
                total += t - at
            at = t
        current = n
    if current < full and end > at:
        total += end - at
    return round(total, 3)


def steps_went_back(steps: Sequence[int]) -> int:
    """How many times a step number was not above the one before it (0 when the counter only moved forward)."""
    return sum(1 for a, b in itertools.pairwise(steps) if b <= a)

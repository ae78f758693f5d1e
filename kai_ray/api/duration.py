"""Go durations ("90s", "1h30m", "-1s", "1.5m") as seconds: the one duration parser of the house.

KAI's duration fields (``preemptionDelay``, ``stalenessGracePeriod``, ``preemptMinRuntime``) are Go
``metav1.Duration`` values, parsed by Go's ``time.ParseDuration``. Why hand-written: the official client's
``kubernetes.utils.parse_duration`` implements the stricter GEP-2257 subset (no sign, no fractions, so KAI's
``-1s`` "never" fails), and ``durationpy`` (which it wraps) accepts units Go rejects (``1d``, ``1y``) and reads
``1h-30m`` as 90 minutes. Go's grammar fits in one regular expression.
"""

from __future__ import annotations

import math
import re
from typing import Any

_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str | None) -> float | None:
    """A Go duration in seconds; None when absent or not a Go duration (callers decide whether that is an error)."""
    if not text:
        return None
    text = text.strip()
    sign = -1.0 if text.startswith("-") else 1.0
    body = text[1:] if text[:1] in "+-" else text
    if body == "0":
        return 0.0
    parts = _PART.findall(body)
    if not parts or "".join(n + u for n, u in parts) != body:
        return None
    return sign * sum(float(n) * _UNITS[u] for n, u in parts)


def seconds(value: Any) -> float:
    """Seconds from a number, a numeric string or a Go duration; ValueError (naming the value) otherwise."""
    problem = f"{value!r} is not a number of seconds or a duration like '90s' or '1h30m'"
    if isinstance(value, bool):
        raise ValueError(problem)
    if isinstance(value, int | float):
        number: float | None = float(value)
    else:
        text = str(value).strip()
        try:
            number = float(text)
        except ValueError:
            number = parse_duration(text)
    if number is None or not math.isfinite(number):
        raise ValueError(problem)
    return number

"""Durations, read and written: the one parser, the one clock and the one span formatter of the house.

Three readers, one grammar. Go durations (``90s``, ``1h30m``, ``-1s``, ``1.5m``) are what KAI's own fields hold
(``preemptionDelay``, ``stalenessGracePeriod``, ``preemptMinRuntime``: Go ``metav1.Duration``, parsed by Go's
``time.ParseDuration``), so those fields accept exactly Go's grammar (``go=True``). Everything else (command-line
flags, scenario files, KAI's Prometheus-style usage windows ``1w``/``2d12h``) accepts that grammar plus days, weeks
and years (Prometheus' ``d``, ``w``, ``y``) and the ``H:MM:SS`` clock this tool prints everywhere, so a time copied
from its output can be typed back in.

Why hand-written: the official client's ``kubernetes.utils.parse_duration`` implements the stricter GEP-2257 subset
(no sign, no fractions, so KAI's ``-1s`` "never" fails), and ``durationpy`` (which it wraps) reads ``1h-30m`` as 90
minutes. The grammar fits in one regular expression.

Not part of any layer: the scheduler core (usage windows, status messages), the API (KAI's fields), the simulator
and the CLI all import it, and it imports nothing of the house.
"""

from __future__ import annotations

import math
import re
import time
from datetime import UTC, datetime
from typing import Any

_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_UNITS = {**_GO_UNITS, "d": 86400.0, "w": 604800.0, "y": 31536000.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h|d|w|y)")
_CLOCK = re.compile(r"(\d+):([0-5]\d):([0-5]\d(?:\.\d*)?)")

EXAMPLES = "e.g. 90s, 45m, 1h30m, 2d or 0:45:00"


def parse_duration(text: str | None, *, go: bool = False) -> float | None:
    """Seconds from a duration; None when absent or not a duration (callers decide whether that is an error).

    ``go=True``: Go's ``time.ParseDuration`` grammar only (units ns to h). Otherwise also ``d``, ``w``, ``y`` and
    ``H:MM:SS``. A bare number is not a duration (``45`` could mean seconds or minutes), except ``0``."""
    if not text:
        return None
    text = text.strip()
    sign = -1.0 if text.startswith("-") else 1.0
    body = text[1:] if text[:1] in "+-" else text
    if body == "0":
        return 0.0
    if not go and (clock := _CLOCK.fullmatch(body)):
        h, m, s = clock.groups()
        return sign * (int(h) * 3600 + int(m) * 60 + float(s))
    parts = _PART.findall(body)
    if not parts or "".join(n + u for n, u in parts) != body:
        return None
    units = _GO_UNITS if go else _UNITS
    if any(u not in units for _, u in parts):
        return None
    return sign * sum(float(n) * units[u] for n, u in parts)


def seconds(value: Any) -> float:
    """Seconds from a number (a file's ``90`` or ``1.5``) or a duration string; ValueError (naming the value)
    otherwise. For files, where a number's type shows it is a count of seconds; flags go through :func:`flag`."""
    problem = f"{value!r} is not a number of seconds or a duration ({EXAMPLES})"
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


def flag(text: str) -> float:
    """Seconds from a command-line value: a duration with a unit or a clock, never a bare number (``--at 45`` would
    otherwise silently mean 45 seconds). ValueError naming the value otherwise."""
    number = parse_duration(text)
    if number is None or not math.isfinite(number):
        hint = f" (a unit is required: {text.strip()}s or {text.strip()}m?)" if _is_number(text) else ""
        raise ValueError(f"{text!r} is not a duration ({EXAMPLES}){hint}")
    return number


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def clock(t: float) -> str:
    """``H:MM:SS`` of a simulated time (negative reads as 0:00:00): the format every report, story and view uses."""
    h, rem = divmod(round(max(0.0, t)), 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}"


def span(seconds: float, *, exact: bool = False) -> str:
    """A span for people. By default the two largest units, rounded: ``45s``, ``3m05s``, ``2h01m``, ``1d02h`` (an
    elapsed time; the core's clock may be epoch seconds or simulated seconds, so only differences are shown).

    ``exact=True`` echoes a setting as it was most likely written: the largest unit that divides it, ``1w``, ``1d``,
    ``12h``, ``90s``, so no part of a configured window is rounded away."""
    if exact:
        for unit, size in (("w", 604800.0), ("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
            if seconds >= size and seconds % size == 0:
                return f"{seconds / size:g}{unit}"
        return f"{seconds:g}s"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def rfc3339(ts: float | None = None) -> str:
    """Epoch seconds (now when None) as Kubernetes writes a ``metav1.Time``: RFC 3339, UTC, whole seconds, ``Z``."""
    return datetime.fromtimestamp(time.time() if ts is None else ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> float:
    """An RFC 3339 stamp as epoch seconds; ``ValueError`` when it is none (callers decide what a bad stamp means)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()

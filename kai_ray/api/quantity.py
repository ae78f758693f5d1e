"""Kubernetes resource quantities ("500m", "2Gi", "1e3") as floats: the one quantity parser of the house.

Why here: pods, nodes and templates all carry quantities as strings; the scheduler wants numbers. Everything is
returned in base units (cores for cpu, bytes for memory); the snapshot wants millicores (x 1000).

Why hand-written: ``kubernetes.utils.parse_quantity`` gives the same numbers (a test checks that on generated
quantities) but importing it loads the whole generated client, about 0.7 s on every offline CLI call and simulator
run, and it accepts ``NaN`` and ``Infinity``. Kubernetes' grammar fits in one regular expression.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_RE = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")


class QuantityError(ValueError):
    pass


def parse_quantity(value: str | int | float) -> float:
    """Parse a Kubernetes quantity into base units (cores for cpu, bytes for memory)."""
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    match = _RE.match(text)
    if not match:
        raise QuantityError(f"not a quantity: {value!r}")
    try:
        number = Decimal(match.group(1))
    except InvalidOperation as exc:
        raise QuantityError(f"not a quantity: {value!r}") from exc
    return float(number * _SUFFIX[match.group(2) or ""])

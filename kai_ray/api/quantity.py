"""Kubernetes resource quantities ("500m", "2Gi", "1e3") as floats.

Why here: pods, nodes and templates all carry quantities as strings; the scheduler wants numbers. CPU is returned in
millicores and everything else in base units, matching the units of the scheduler snapshot.
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


def cpu_millis(value: str | int | float) -> float:
    return parse_quantity(value) * 1000.0

"""The house's one quantity parser and one duration parser, checked against the official client and Go's grammar."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity as k8s_parse_quantity

from kai_ray.api.duration import parse_duration, seconds
from kai_ray.api.quantity import QuantityError, parse_quantity

SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "Ki", "Mi", "Gi", "Ti", "Pi"]


@settings(max_examples=300, deadline=None)
@given(
    number=st.decimals(min_value=0, max_value=10**6, places=3, allow_nan=False, allow_infinity=False),
    suffix=st.sampled_from(SUFFIXES),
)
def test_quantities_agree_with_the_official_client(number: Decimal, suffix: str) -> None:
    text = f"{number}{suffix}"
    assert parse_quantity(text) == pytest.approx(float(k8s_parse_quantity(text)), rel=1e-12)


@pytest.mark.parametrize("text", ["eight", "NaN", "Infinity", "8 GPUs", "1.2.3", "", "Mi", "5ki"])
def test_bad_quantities_are_refused(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("90s", 90.0),
        ("1h30m", 5400.0),
        ("-1s", -1.0),
        ("1.5m", 90.0),
        (".5s", 0.5),
        ("300ms", 0.3),
        ("2us", 2e-6),
        ("0", 0.0),
        ("+5s", 5.0),
    ],
)
def test_go_durations(text: str, value: float) -> None:
    assert parse_duration(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["5", "1d", "1y", "1h-30m", "5 s", "s", "1e3s", "fast"])
def test_what_go_rejects_is_not_a_duration(text: str) -> None:
    assert parse_duration(text) is None


def test_seconds_takes_numbers_or_durations_and_names_the_value() -> None:
    assert seconds(3) == 3.0
    assert seconds("2.5") == 2.5
    assert seconds("1m") == 60.0
    for bad in ("soon", "nan", True):
        with pytest.raises(ValueError, match=repr(bad)):
            seconds(bad)

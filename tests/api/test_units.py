"""The house's one quantity parser, checked against the official client."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity as k8s_parse_quantity

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

"""The informers' pause of the cyclic garbage collector while they list: overlapping lists resume it only when the
last one ends, and a collector that was off before stays off."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from kai_ray.k8s.base.informer import _CollectorPause


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_overlapping_lists_resume_the_collector_when_the_last_ends(collector_on: None) -> None:
    pause = _CollectorPause()
    first, second = pause(), pause()
    first.__enter__()
    assert not gc.isenabled()
    second.__enter__()
    first.__exit__(None, None, None)
    assert not gc.isenabled(), "the second list is still running"
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_an_error_while_listing_resumes_it(collector_on: None) -> None:
    pause = _CollectorPause()
    with pytest.raises(RuntimeError), pause():
        raise RuntimeError("list failed")
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off(collector_on: None) -> None:
    gc.disable()
    with _CollectorPause()():
        assert not gc.isenabled()
    assert not gc.isenabled()
    gc.enable()

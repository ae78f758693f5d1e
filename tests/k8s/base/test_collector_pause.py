"""The cyclic garbage collector: the informers pause it while they list (overlapping lists resume it only when the
last one ends, and a collector that was off before stays off), and the scheduler freezes what survives each cycle
and thaws it for a full collection when idle."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from kai_ray.k8s.base.collector import CollectorPause, CycleFreeze


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_overlapping_lists_resume_the_collector_when_the_last_ends(collector_on: None) -> None:
    pause = CollectorPause()
    first, second = pause(), pause()
    first.__enter__()
    assert not gc.isenabled()
    second.__enter__()
    first.__exit__(None, None, None)
    assert not gc.isenabled(), "the second list is still running"
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_an_error_while_listing_resumes_it(collector_on: None) -> None:
    pause = CollectorPause()
    with pytest.raises(RuntimeError), pause():
        raise RuntimeError("list failed")
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off(collector_on: None) -> None:
    gc.disable()
    with CollectorPause()():
        assert not gc.isenabled()
    assert not gc.isenabled()
    gc.enable()


@pytest.fixture
def thawed() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _garbage_cycle() -> weakref.ref[_Node]:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_after_a_cycle_what_is_left_is_frozen_and_the_cycles_garbage_collected(
    collector_on: None, thawed: None
) -> None:
    clock = [0.0]
    freeze = CycleFreeze(thaw_period=600.0, clock=lambda: clock[0])
    thrown = _garbage_cycle()
    kept = [_Node() for _ in range(10)]
    freeze.after_cycle(idle=False)
    assert thrown() is None, "garbage cycles made during the cycle are collected before the freeze"
    assert gc.get_freeze_count() >= len(kept)
    assert all(k not in gc.get_objects() for k in kept[:1]), "frozen objects are in no generation"


def test_frozen_garbage_cycles_wait_for_the_thaw_which_comes_when_idle(collector_on: None, thawed: None) -> None:
    clock = [0.0]
    freeze = CycleFreeze(thaw_period=600.0, clock=lambda: clock[0])
    freeze.after_cycle(idle=True)
    late = _garbage_cycle()  # a cycle among objects frozen by the next freeze...
    holder = [late()]
    freeze.after_cycle(idle=True)
    del holder  # ...becomes garbage only after it
    gc.collect()
    assert late() is not None, "a frozen cycle is not scanned"
    clock[0] = 700.0
    freeze.after_cycle(idle=False)
    assert late() is not None and freeze.thaws == 0, "busy: the full collection waits"
    freeze.after_cycle(idle=True)
    assert late() is None and freeze.thaws == 1
    clock[0] = 700.0 + 3 * 600.0
    freeze.after_cycle(idle=False)
    assert freeze.thaws == 2, "after three periods the thaw comes even while busy"


def test_release_hands_every_frozen_object_back(collector_on: None, thawed: None) -> None:
    CycleFreeze().after_cycle(idle=False)
    assert gc.get_freeze_count() > 0
    CycleFreeze.release()
    assert gc.get_freeze_count() == 0

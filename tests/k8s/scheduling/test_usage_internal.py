"""The internal usage source's bookkeeping, without a server: what it writes into the Queue status, that an idle
queue's record is not rewritten, and that a new instance restores the same usage from those statuses (the real
API server round trip is in ``test_usage_persistence.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray.k8s.scheduling.cluster_views import queue_status
from kai_ray.k8s.scheduling.status import usage_status
from kai_ray.k8s.usagedb import LEDGER_FIELD, InternalUsage
from kai_ray.scheduler.decisions import CycleResult, QueueStatus
from kai_ray.scheduler.usage import UsageParams

CAPACITY = (8.0, 64000.0, 512e9)
PARAMS = UsageParams(window_size=3600.0, half_life_period=600.0, fetch_interval=10.0)


def _result(**gpus: float) -> CycleResult:
    res = CycleResult()
    for name, g in {"top": sum(gpus.values()), **gpus}.items():
        alloc = {"gpu": g, "cpu": 1000.0 * g, "memory": 1e9 * g}
        res.queues[name] = QueueStatus(name, {}, alloc, {}, {})
    return res


def _statuses(src: InternalUsage) -> dict[str, dict[str, Any]]:
    out = {}
    for name in ("top", "a", "b"):
        rec = src.ledger_status(name, top_level=name == "top")
        out[name] = {LEDGER_FIELD: rec} if rec is not None else {}
    return out


def test_records_restore_the_same_usage_and_idle_queues_are_not_rewritten() -> None:
    src = InternalUsage(PARAMS)
    assert src.before_cycle(0.0, {}) == {}
    src.after_cycle(0.0, CAPACITY, _result(a=8.0, b=0.0))
    first = _statuses(src)
    assert first["a"][LEDGER_FIELD]["level"] == [8.0, 8000.0, 8e9]
    assert "capacity" in first["top"][LEDGER_FIELD] and "capacity" not in first["a"][LEDGER_FIELD]
    src.before_cycle(20.0, {})
    src.after_cycle(20.0, CAPACITY, _result(a=0.0, b=0.0))
    idle = src.ledger_status("a", False)
    assert idle is not None and idle["level"] == [0.0, 0.0, 0.0] and idle["time"] == 20.0
    for t in (35.0, 50.0, 65.0):
        src.before_cycle(t, {})
        src.after_cycle(t, CAPACITY, _result(a=0.0, b=0.0))
    assert src.ledger_status("a", False) == idle  # still valid as written at 20 s: no status write
    assert first["b"] == {} and src.ledger_status("b", False) is None  # never held anything: nothing to keep
    top = src.ledger_status("top", True)
    assert top is not None and top["capacity"]["time"] == 65.0  # the capacity record moves on

    again = InternalUsage(PARAMS)
    restored = again.before_cycle(70.0, _statuses(src))
    want = src.ledger.usage(70.0) if src.ledger is not None else {}
    assert restored["a"].gpu == pytest.approx(want["a"][0], rel=1e-6) and restored["a"].gpu > 0
    assert restored["top"].cpu == pytest.approx(want["top"][1], rel=1e-6)
    assert "b" not in restored

    src.forget()  # leadership lost: the next leader (maybe this one) restores from the statuses
    assert src.ledger is None and src.ledger_status("a", False) is None


def test_status_usage_is_keyed_by_resource_name() -> None:
    assert usage_status({"gpu": 0.123456, "cpu": 0.5, "memory": 0.0}) == {
        "nvidia.com/gpu": 0.1235,
        "cpu": 0.5,
        "memory": 0.0,
    }
    assert usage_status({}) is None  # no usage source: the field is cleared


def test_views_read_status_usage_back() -> None:
    """``kai-ray queues`` on a cluster reads the usage the scheduler wrote (shares: no quantity units)."""
    written = usage_status({"gpu": 0.7021, "cpu": 0.5, "memory": 0.25})
    qs = queue_status("a", {"allocated": {"nvidia.com/gpu": "2"}, "usage": written})
    assert qs is not None and qs.usage == {"gpu": 0.7021, "cpu": 0.5, "memory": 0.25}
    qs = queue_status("a", {"allocated": {"nvidia.com/gpu": "2"}, "usage": {"nvidia.com/gpu": "high", "x": 1}})
    assert qs is not None and qs.usage == {}

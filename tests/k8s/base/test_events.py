"""Events on the real API server: one Event per (object, type, reason), its count bumped, and a token bucket per
object that defers, never loses, the latest message."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kai_ray.k8s.base.events import WARNING, EventRecorder, TokenBucket
from kai_ray.k8s.base.rest import Kube, events_path
from kai_ray.k8s.base.workqueue import Dispatcher
from kai_ray.testing.controlplane.harness import ControlPlane
from tests.k8s.helpers import wait_until


@pytest.fixture
def kube(control_plane: ControlPlane) -> Iterator[Kube]:
    k = Kube(control_plane.api_client(pool_size=8))
    yield k
    k.close()


@pytest.fixture
def writer() -> Iterator[Dispatcher]:
    d = Dispatcher("events-test", 2).start()
    yield d
    d.stop()


def _ref(ns: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": ns, "uid": f"uid-{name}"}


def _on(kube: Kube, ns: str, name: str) -> list[dict[str, Any]]:
    return [ev for ev in kube.get(events_path(ns))["items"] if ev["involvedObject"].get("name") == name]


def test_the_bucket_allows_a_burst_then_one_per_refill() -> None:
    bucket = TokenBucket(burst=3, refill=10.0)
    assert [bucket.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(0.0) == pytest.approx(10.0)
    assert bucket.take(4.0) == pytest.approx(6.0)  # nothing taken while waiting
    assert bucket.take(10.0) == 0.0
    assert bucket.take(10.0) == pytest.approx(10.0)


def test_one_event_per_object_and_reason_whatever_the_messages(kube: Kube, namespace: str, writer: Dispatcher) -> None:
    rec = EventRecorder(kube, "test", "me", writer, burst=3, refill=0.5)
    for i in range(50):
        rec.emit(_ref(namespace, "flappy"), WARNING, "Unschedulable", f"reason number {i}")
    rec.emit(_ref(namespace, "flappy"), WARNING, "Evicted", "preempted")

    def settled() -> list[dict[str, Any]] | None:
        evs = _on(kube, namespace, "flappy")
        one = [ev for ev in evs if ev["reason"] == "Unschedulable"]
        return evs if len(one) == 1 and one[0]["count"] == 50 and len(evs) == 2 else None

    evs = wait_until("one Unschedulable Event counting all 50, and one Evicted", settled, 30)
    unsched = next(ev for ev in evs if ev["reason"] == "Unschedulable")
    assert unsched["message"] == "reason number 49", "the latest message is what is stored"
    # burst of 3 on the object (one of them the Evicted Event's), then one write per refill: a handful, not 51
    assert rec.written <= 6, rec.written
    assert rec.dropped >= 44


def test_a_repeated_event_bumps_its_count_instead_of_a_new_event(
    kube: Kube, namespace: str, writer: Dispatcher
) -> None:
    rec = EventRecorder(kube, "test", "me", writer, repeat_interval=0.0)
    rec.emit(_ref(namespace, "again"), WARNING, "Unschedulable", "same")
    wait_until("the first Event", lambda: _on(kube, namespace, "again"), 30)
    for _ in range(4):
        rec.emit(_ref(namespace, "again"), WARNING, "Unschedulable", "same")
    evs = wait_until(
        "the count bumped to 5 on the one Event",
        lambda: (lambda e: e if len(e) == 1 and e[0]["count"] == 5 else None)(_on(kube, namespace, "again")),
        30,
    )
    assert evs[0]["message"] == "same"


def test_an_expired_event_is_written_anew(kube: Kube, namespace: str, writer: Dispatcher) -> None:
    rec = EventRecorder(kube, "test", "me", writer)
    rec.emit(_ref(namespace, "ttl"), WARNING, "Unschedulable", "first")
    (ev,) = wait_until("the first Event", lambda: _on(kube, namespace, "ttl"), 30)
    kube.delete(f"{events_path(namespace)}/{ev['metadata']['name']}")  # what the API server's event TTL does
    rec.emit(_ref(namespace, "ttl"), WARNING, "Unschedulable", "second")
    again = wait_until(
        "the Event written again", lambda: [e for e in _on(kube, namespace, "ttl") if e["message"] == "second"], 30
    )
    assert again[0]["count"] == 2

"""The change recorder: what the informers saw reaches the incremental session, and nothing stale is reused."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kai_ray.k8s.scheduling.changes import ChangeRecorder
from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.snapshot import Job, Node, Pod, Queue, Resources, Snapshot


def _snap(nodes: list[Node], gpus: float = 4) -> Snapshot:
    pod = Pod("u0", "p0", "ns", "ns/g", Resources(gpus, 100, 1e6))
    return Snapshot(nodes, [Queue("q", quota=Resources(-1, -1, -1))], [Job("ns", "g", "q", pods=[pod])], now=1.0)


NODES = [Node("a", Resources(8, 8000, 64e9)), Node("b", Resources(8, 8000, 64e9))]


def _warm() -> ChangeRecorder:
    """A recorder past the first cycle of its state (which keeps nothing)."""
    rec = ChangeRecorder()
    rec.take()
    rec.run(_snap(NODES))
    return rec


def test_the_first_cycle_of_a_term_keeps_nothing_and_the_next_builds_the_session() -> None:
    """After a takeover or a cold start the first cycle stands between the Lease and the first binds: it runs a
    session that keeps nothing (cheaper than building every PodGroup's kept block); the next cycle builds it."""
    rec = ChangeRecorder()
    rec.take()
    snap = _snap(NODES)
    assert [b.node for b in rec.run(snap).binds] == [b.node for b in run_cycle(snap).binds]
    assert rec.state.node_base is None
    rec.take()
    rec.run(_snap(NODES))
    assert rec.state.node_base is not None
    rec.new_term()
    rec.take()
    rec.run(_snap(NODES))
    assert rec.state.node_base is None


def test_node_arrays_are_kept_until_a_node_changes() -> None:
    rec = _warm()
    rec.take()
    rec.run(_snap(NODES))
    kept = rec.state.node_base
    assert kept is not None
    rec.take()
    rec.run(_snap(list(NODES)))
    assert rec.state.node_base is kept
    rec.nodes()
    rec.take()
    rec.run(_snap(NODES))
    assert rec.state.node_base is not kept


def test_a_node_whose_allocatable_shrank_without_an_event_is_still_seen() -> None:
    """Another scheduler's pods take room off a node in the snapshot: no node event, different node."""
    rec = _warm()
    rec.take()
    rec.run(_snap(NODES))
    shrunk = [replace(NODES[0], allocatable=Resources(2, 8000, 64e9)), NODES[1]]
    snap = _snap(shrunk, gpus=4)
    rec.take()
    got = rec.run(snap)
    assert [b.node for b in got.binds] == [b.node for b in run_cycle(snap).binds] == ["b"]


def test_a_change_recorded_after_take_is_told_to_the_next_cycle() -> None:
    rec = _warm()
    rec.take()
    rec.run(_snap(NODES))
    kept = rec.state.node_base
    rec.take()
    rec.nodes()  # lands while the snapshot is being built
    rec.run(_snap(NODES))
    assert rec.state.node_base is kept
    rec.take()
    rec.run(_snap(NODES))
    assert rec.state.node_base is not kept


def test_everything_and_a_new_term_and_a_failed_cycle_start_from_a_fresh_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rec = ChangeRecorder()
    first = rec.state
    rec.everything()
    rec.take()
    rec.run(_snap(NODES))
    assert rec.state is not first
    second = rec.state
    rec.new_term()
    assert rec.state is not second
    third = rec.state

    def boom(snapshot: Snapshot, state: object = None) -> None:
        raise RuntimeError("core failed")

    monkeypatch.setattr("kai_ray.k8s.scheduling.changes.run_cycle", boom)
    with pytest.raises(RuntimeError):
        rec.run(_snap(NODES))
    assert rec.state is not third

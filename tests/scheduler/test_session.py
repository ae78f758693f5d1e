"""The session's accounting: node room, shared GPUs, releasing room, queue charges and gang counters in step."""

from __future__ import annotations

import numpy as np

from kai_ray.scheduler.nodebase import CPU, GPU, MEM
from kai_ray.scheduler.session import le
from kai_ray.scheduler.session_build import build_session
from kai_ray.scheduler.snapshot import UNLIMITED, PodPhase
from tests.scheduler.session_fixtures import job, pod, snapshot


def _state(ses):
    return ses.free.copy(), ses.rel.copy(), ses.pods_free.copy(), [list(q) for q in ses.q_alloc]


def test_occupy_and_vacate_are_inverse_on_node_room() -> None:
    ses = build_session(snapshot(job("ns/a", "a", [pod("ns/a", 0, 2)])))
    free0 = ses.free.copy()
    group, created = ses.occupy(0, 1, None)
    assert (group, created) == (None, False)
    assert ses.free[GPU, 1] == 6.0 and ses.free[CPU, 1] == 63000.0 and ses.free[MEM, 1] == 511e9
    assert ses.p_node[0] == 1 and 1 in ses.slot_dirty
    ses.vacate(0, created)
    assert np.array_equal(ses.free, free0) and ses.p_node[0] == -1


def test_fractions_share_one_gpu_which_is_freed_with_its_last_tenant() -> None:
    ses = build_session(snapshot(job("ns/f", "a", [pod("ns/f", i, 0, fraction=0.5) for i in range(2)])))
    g0, created0 = ses.occupy(0, 0, None)
    g1, created1 = ses.occupy(1, 0, g0)
    assert g0 == g1 == "n0-gpu0" and created0 and not created1
    assert ses.free[GPU, 0] == 7.0 and ses.groups[0][g0][0] == 1.0 and ses.frac_room[0] == 0.0
    ses.vacate(1, created1)
    assert ses.free[GPU, 0] == 7.0 and ses.frac_room[0] == 0.5
    ses.vacate(0, created0)
    assert ses.free[GPU, 0] == 8.0 and ses.groups[0] == {}


def test_release_counts_room_as_releasing_and_back() -> None:
    ses = build_session(snapshot(job("ns/r", "a", [pod("ns/r", 0, 3, node="n0", phase=PodPhase.RUNNING)])))
    ses.release(0)
    assert ses.rel[GPU, 0] == 3.0 and ses.rel_pods[0] == 1 and ses.any_releasing
    ses.release(0, -1.0)
    assert ses.rel[GPU, 0] == 0.0 and ses.rel_pods[0] == 0


def test_charge_walks_the_queue_chain_and_non_preemptible_jobs_count_twice() -> None:
    ses = build_session(snapshot(job("ns/np", "b", [pod("ns/np", 0, 2)], priority=100)))
    jb = ses.jobs[0]
    b, root = ses.tree.get("b"), ses.tree.get("root")
    assert b is not None and root is not None
    ses.charge(jb, (2.0, 1000.0, 1e9), 1.0)
    assert ses.q_alloc[b.idx] == ses.q_alloc[root.idx] == [2.0, 1000.0, 1e9]
    assert ses.q_alloc_np[b.idx] == [2.0, 1000.0, 1e9]
    ses.charge(jb, (2.0, 1000.0, 1e9), -1.0)
    assert ses.q_alloc[b.idx] == [0.0, 0.0, 0.0] and ses.q_alloc_np[root.idx] == [0.0, 0.0, 0.0]


def test_count_active_moves_queue_gang_and_version_together() -> None:
    ses = build_session(snapshot(job("ns/g", "a", [pod("ns/g", i) for i in range(2)], min_member=2)))
    jb = ses.jobs[0]
    a = ses.tree.get("a")
    assert a is not None
    ses.count_active(jb, 0, 1)
    assert jb.n_active == 1 and not jb.min_satisfied() and ses.q_alloc[a.idx][0] == 1.0 and jb.version == 1
    ses.count_active(jb, 1, 1)
    assert jb.min_satisfied() and jb.elastic_state() == 1


def test_charged_adds_the_gpus_of_mig_slices() -> None:
    ses = build_session(snapshot(job("ns/m", "a", [pod("ns/m", 0, 0, extended={"nvidia.com/mig-3g.40gb": 1})])))
    assert ses.charged(0)[0] == 3.0


def test_hold_and_unhold_keep_room_for_a_moved_copy() -> None:
    ses = build_session(snapshot(job("ns/h", "a", [pod("ns/h", 0, 4, node="n0", phase=PodPhase.RUNNING)])))
    before = _state(ses)
    group, created = ses.hold(0, 1, None)
    assert ses.free[GPU].tolist() == [4.0, 4.0] and ses.p_node[0] == 0  # the pod keeps its own place
    ses.unhold(0, 1, group, created)
    after = _state(ses)
    assert all(np.array_equal(x, y) for x, y in zip(before[:3], after[:3], strict=True))


def test_le_reads_minus_one_as_unlimited() -> None:
    assert le(5.0, UNLIMITED) and not le(UNLIMITED, 5.0) and le(5.0 + 1e-12, 5.0) and not le(5.1, 5.0)

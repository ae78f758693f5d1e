"""The statement: each operation is undone exactly by rollback, so hypotheses leave no trace."""

from __future__ import annotations

import numpy as np

from kai_ray.scheduler.decisions import Action, Reason
from kai_ray.scheduler.nodebase import GPU
from kai_ray.scheduler.session import ALLOCATED, BOUND, EVICTED, MOVED, PENDING, PIPELINED, EvictInfo, Session
from kai_ray.scheduler.session_build import build_session
from kai_ray.scheduler.snapshot import PodPhase
from kai_ray.scheduler.statement import Allocated, Evicted, Moved, Unevicted
from tests.scheduler.session_fixtures import job, pod, snapshot

RUNNING = PodPhase.RUNNING
INFO = EvictInfo(Action.RECLAIM, Reason.RECLAIMED, "ns/p", "reclaimed", False, True)


def _picture(ses: Session) -> tuple:
    return (
        ses.free.tolist(),
        ses.rel.tolist(),
        ses.pods_free.tolist(),
        [list(q) for q in ses.q_alloc],
        list(ses.p_status),
        list(ses.p_node),
        dict(ses.evict_info),
        dict(ses.p_moved),
        [(j.n_active, j.n_pend) for j in ses.jobs],
        {k: {g: list(v) for g, v in d.items()} for k, d in sorted(ses.groups.items()) if d},
    )


def _session() -> Session:
    return build_session(
        snapshot(
            job("ns/run", "a", [pod("ns/run", i, 2, node="n0", phase=RUNNING) for i in range(2)]),
            job("ns/new", "b", [pod("ns/new", i, 1) for i in range(2)] + [pod("ns/new", 9, 0, fraction=0.5)]),
        )
    )


def test_allocate_then_rollback_restores_everything() -> None:
    ses = _session()
    st = ses.stmt
    before = _picture(ses)
    cp = st.checkpoint()
    new = ses.jobs[ses.job_index["ns/new"]]
    st.allocate(new.pods[0], 1, False)
    st.allocate(new.pods[2], 1, True)
    assert [type(op) for op in st.log] == [Allocated, Allocated]
    assert ses.p_status[new.pods[0]] == ALLOCATED and ses.p_status[new.pods[2]] == PIPELINED
    assert ses.free[GPU, 1] == 6.0 and new.n_pend == 1
    st.rollback(cp)
    assert _picture(ses) == before and st.log == []


def test_evict_and_unevict_and_their_rollback() -> None:
    ses = _session()
    st = ses.stmt
    before = _picture(ses)
    run = ses.jobs[ses.job_index["ns/run"]]
    p = run.pods[0]
    cp = st.checkpoint()
    st.evict(p, INFO)
    assert ses.p_status[p] == EVICTED and ses.evict_info[p] is INFO and ses.rel[GPU, 0] == 2.0
    assert run.n_active == 1
    mid = _picture(ses)
    st.unevict(p)
    assert ses.p_status[p] == BOUND and p not in ses.evict_info and ses.rel[GPU, 0] == 0.0
    assert [type(op) for op in st.log] == [Evicted, Unevicted]
    st.rollback(cp + 1)
    assert _picture(ses) == mid
    st.rollback(cp)
    assert _picture(ses) == before


def test_move_holds_room_for_the_copy_and_rollback_gives_it_back() -> None:
    ses = _session()
    st = ses.stmt
    run = ses.jobs[ses.job_index["ns/run"]]
    p = run.pods[1]
    cp = st.checkpoint()
    st.evict(p, INFO)
    after_evict = _picture(ses)
    st.move(p, 1, None)
    assert ses.p_status[p] == MOVED and ses.p_moved[p] == (1, None) and ses.free[GPU, 1] == 6.0
    assert run.n_active == 2  # the gang keeps running while its pod is re-created
    assert isinstance(st.log[-1], Moved)
    st.rollback(cp + 1)
    assert _picture(ses) == after_evict
    st.rollback(cp)
    assert ses.p_status[p] == BOUND and ses.free[GPU].tolist() == [4.0, 8.0]


def test_convert_to_pipelined_turns_the_jobs_allocations_of_the_statement_pipelined() -> None:
    ses = _session()
    st = ses.stmt
    new = ses.jobs[ses.job_index["ns/new"]]
    since = st.checkpoint()
    st.allocate(new.pods[0], 1, False)
    st.allocate(new.pods[1], 1, True)
    st.convert_to_pipelined(new, since)
    assert [ses.p_status[p] for p in new.pods[:2]] == [PIPELINED, PIPELINED]
    st.rollback(since)
    assert [ses.p_status[p] for p in new.pods] == [PENDING, PENDING, PENDING]
    assert np.array_equal(ses.free, build_session(ses.snapshot).free)

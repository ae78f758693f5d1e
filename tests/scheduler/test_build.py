"""The build: a snapshot becomes a session's rows and node arrays, the same whether PodGroups are new or kept."""

from __future__ import annotations

import numpy as np

from kai_ray.scheduler.nodebase import CPU, GPU
from kai_ray.scheduler.session import BOUND, IGNORED, PENDING, RELEASING
from kai_ray.scheduler.session_build import build_session, extended_names
from kai_ray.scheduler.snapshot import Node, PodPhase, Resources
from tests.scheduler.session_fixtures import NOW, job, pod, snapshot

RUNNING = PodPhase.RUNNING


def test_jobs_are_placed_in_key_order_with_their_pods_counted_on_their_nodes() -> None:
    snap = snapshot(
        job("ns/z", "a", [pod("ns/z", 0)]),
        job("ns/a", "b", [pod("ns/a", 0, 2, node="n1", phase=RUNNING), pod("ns/a", 1, 1, node="n1", phase=RUNNING)]),
    )
    ses = build_session(snap)
    assert [j.key for j in ses.jobs] == ["ns/a", "ns/z"]
    assert ses.job_index == {"ns/a": 0, "ns/z": 1}
    assert ses.p_status == [BOUND, BOUND, PENDING]
    assert ses.initial_status == ses.p_status
    assert ses.free[GPU].tolist() == [8.0, 5.0]
    assert ses.free[CPU].tolist() == [64000.0, 62000.0]
    assert ses.pods_free.tolist() == [110, 108]
    assert ses.p_start == [NOW, NOW, NOW]  # not started: the session's clock
    assert ses.jobs[0].n_active == 2 and ses.jobs[1].n_pend == 1
    assert ses.p_risk == [0.0, 0.0, 0.0]
    assert ses.stmt.log == [] and ses.stmt.checkpoint() == 0


def test_queue_accounting_charges_the_whole_chain_and_requests_count_pending_pods() -> None:
    snap = snapshot(job("ns/r", "a", [pod("ns/r", 0, 2, node="n0", phase=RUNNING), pod("ns/r", 1, 3)]))
    ses = build_session(snap)
    a, root = ses.tree.get("a"), ses.tree.get("root")
    assert a is not None and root is not None
    assert ses.q_alloc[a.idx][0] == 2.0 and ses.q_alloc[root.idx][0] == 2.0
    assert ses.q_request[a.idx][0] == 5.0 and ses.q_request[root.idx][0] == 5.0
    assert ses.q_alloc_np[a.idx][0] == 0.0  # preemptible (priority 50)


def test_releasing_pods_hold_room_that_is_counted_as_releasing() -> None:
    snap = snapshot(job("ns/r", "a", [pod("ns/r", 0, 4, node="n0", phase=PodPhase.RELEASING)]))
    ses = build_session(snap)
    assert ses.p_status == [RELEASING]
    assert ses.free[GPU, 0] == 4.0 and ses.rel[GPU, 0] == 4.0 and ses.rel_pods[0] == 1
    assert ses.any_releasing


def test_bad_input_becomes_findings_not_errors() -> None:
    dup = job("ns/d", "a", [pod("ns/d", 0)])
    snap = snapshot(
        dup,
        job("ns/d", "b", [pod("ns/d", 9)]),
        job("ns/u", "a", [pod("ns/u", 0, node="gone", phase=RUNNING)]),
        job("ns/q", "nope", [pod("ns/q", 0)]),
        job("ns/i", "a", [pod("ns/i", 0, fraction=1.5)]),
    )
    ses = build_session(snap)
    what = {(f.kind, f.field) for f in ses.findings}
    assert ("PodGroup", "name") in what  # the duplicate PodGroup: the first is used
    assert ("Pod", "nodeName") in what  # bound to an unknown node: not counted
    assert ("Pod", "gpu-fraction") in what
    assert ses.jobs[ses.job_index["ns/d"]].spec is dup
    assert ses.jobs[ses.job_index["ns/q"]].invalid is not None
    assert ses.p_status[ses.jobs[ses.job_index["ns/i"]].pods[0]] == IGNORED
    assert ses.free[GPU].tolist() == [8.0, 8.0]


def test_extended_resources_get_one_row_each_from_nodes_and_pods() -> None:
    nodes = [Node("n0", Resources(8, 64000, 512e9), extended={"x.io/fpga": 2})]
    snap = snapshot(job("ns/e", "a", [pod("ns/e", 0, 0, extended={"y.io/nic": 1})]), nodes=nodes)
    assert extended_names(snap) == ["x.io/fpga", "y.io/nic"]
    ses = build_session(snap)
    assert ses.xnames == ["x.io/fpga", "y.io/nic"]
    assert ses.xfree[:, 0].tolist() == [2.0, 0.0]


def test_kept_blocks_and_node_arrays_give_the_same_session_as_a_fresh_build() -> None:
    jobs = [
        job("ns/a", "a", [pod("ns/a", 0, 2, node="n0", phase=RUNNING), pod("ns/a", 1, 0, fraction=0.5)]),
        job("ns/b", "b", [pod("ns/b", i, 1, node="n1", phase=RUNNING) for i in range(3)]),
    ]
    snap = snapshot(*jobs)
    blocks: dict = {}
    first = build_session(snap, None, blocks)
    assert set(blocks) == {"ns/a", "ns/b"}
    again = build_session(snap, first.node_base, blocks)
    fresh = build_session(snap)
    assert again.node_base is first.node_base
    for ses in (again, first):
        assert ses.p_status == fresh.p_status and ses.p_node == fresh.p_node and ses.p_req == fresh.p_req
        assert np.array_equal(ses.free, fresh.free) and np.array_equal(ses.rel, fresh.rel)
        assert ses.q_alloc == fresh.q_alloc and ses.q_request == fresh.q_request
        assert [j.pods for j in ses.jobs] == [j.pods for j in fresh.jobs]
        assert [ps.n_active for j in ses.jobs for ps in j.podsets.values()] == [
            ps.n_active for j in fresh.jobs for ps in j.podsets.values()
        ]

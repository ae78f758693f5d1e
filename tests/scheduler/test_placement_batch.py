"""The vectorised gang placement must choose exactly the nodes that pod-by-pod bin-packing would."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kai_ray.scheduler.allocation import place_batch, place_pod
from kai_ray.scheduler.cycle import open_session
from kai_ray.scheduler.snapshot import Job, Node, Pod, PodPhase, Queue, Resources, Snapshot


@st.composite
def gang_on_cluster(draw: st.DrawFn) -> Snapshot:
    nodes = [
        Node(
            f"n{i:02d}",
            Resources(float(draw(st.sampled_from([0, 4, 8]))), float(draw(st.sampled_from([8000, 64000]))), 1e12),
            max_pods=draw(st.integers(1, 12)),
        )
        for i in range(draw(st.integers(1, 12)))
    ]
    jobs = []
    for i, n in enumerate(nodes):
        used = draw(st.integers(0, int(n.allocatable.gpu)))
        if used:
            jobs.append(
                Job(
                    "ns",
                    f"r{i}",
                    "q",
                    pods=[
                        Pod(
                            f"r{i}",
                            f"r{i}",
                            "ns",
                            f"ns/r{i}",
                            Resources(used, 1000, 1e9),
                            phase=PodPhase.RUNNING,
                            node=n.name,
                        )
                    ],
                )
            )
    gpus = float(draw(st.sampled_from([0, 1, 2, 4])))
    k = draw(st.integers(2, 10))
    pods = [Pod(f"g{j}", f"g{j}", "ns", "ns/gang", Resources(gpus, 2000, 1e9)) for j in range(k)]
    jobs.append(Job("ns", "gang", "q", min_member=k, pods=pods, created_at=99))
    return Snapshot(nodes, [Queue("q", quota=Resources(-1, -1, -1))], jobs)


@settings(max_examples=200, deadline=None)
@given(gang_on_cluster())
def test_batch_equals_sequential(snap: Snapshot) -> None:
    a, b = open_session(snap), open_session(snap)
    job_a, job_b = a.jobs[a.job_index["ns/gang"]], b.jobs[b.job_index["ns/gang"]]
    placed = place_batch(a, list(job_a.pods), None)
    seq = 0
    for p in job_b.pods:
        if not place_pod(b, p, None):
            break
        seq += 1
    if placed == len(job_a.pods):
        assert seq == placed
    else:
        assert seq >= placed  # the batch places only while every pod fits; the rest go pod by pod
    assert [a.p_node[p] for p in job_a.pods[:placed]] == [b.p_node[p] for p in job_b.pods[:placed]]
    assert np.allclose(a.free[:, :], b.free[:, :]) or placed < len(job_a.pods)

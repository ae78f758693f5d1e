"""Bad input never raises out of the core: chaotic snapshots must produce findings and reasons, never an
internal error (the cycle's last-resort catch reports one as a ``Cycle`` finding, which this test forbids)."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.snapshot import (
    Job,
    Node,
    NodeSelectorRequirement,
    Pod,
    PodPhase,
    Preemptibility,
    Queue,
    Resources,
    SchedulerConfig,
    Snapshot,
    SubGroup,
    Taint,
    Toleration,
    Topology,
    TopologyConstraint,
)

weird = st.sampled_from([0.0, 1.0, 2.0, 8.0, -1.0, -5.0, 0.5, 1e12, math.nan, math.inf])
names = st.sampled_from(["a", "b", "c", "", "a"])


@st.composite
def chaos(draw: st.DrawFn) -> Snapshot:
    nodes = [
        Node(
            draw(st.sampled_from(["n1", "n2", "n3", "n1"])),
            Resources(draw(weird), draw(weird), draw(weird)),
            max_pods=draw(st.integers(-1, 5)),
            labels={"rack": draw(st.sampled_from(["r1", "r2"]))},
            taints=[Taint("t", "v", draw(st.sampled_from(["NoSchedule", "PreferNoSchedule", "Bogus"])))]
            if draw(st.booleans())
            else [],
            gpu_memory_mib=draw(st.sampled_from([0, 40000, -3])),
            unschedulable=draw(st.booleans()),
            ready=draw(st.booleans()),
        )
        for _ in range(draw(st.integers(0, 4)))
    ]
    queues = [
        Queue(
            draw(names),
            parent=draw(st.sampled_from([None, "a", "b", "c", "zz"])),
            priority=draw(st.integers(-5, 300)),
            quota=Resources(draw(weird), draw(weird), draw(weird)),
            limit=Resources(draw(weird), draw(weird), draw(weird)),
            over_quota_weight=Resources(draw(weird), draw(weird), draw(weird)),
            preempt_min_runtime=draw(st.sampled_from([None, 0.0, 10.0, -1.0])),
            reclaim_min_runtime=draw(st.sampled_from([None, 5.0])),
        )
        for _ in range(draw(st.integers(0, 5)))
    ]
    jobs = []
    for j in range(draw(st.integers(0, 6))):
        subgroups = []
        if draw(st.booleans()):
            subgroups = [
                SubGroup(
                    draw(st.sampled_from(["s1", "s2", "s3", "s1"])),
                    min_member=draw(st.sampled_from([None, -1, 0, 1, 3])),
                    min_subgroup=draw(st.sampled_from([None, 0, 1, 5])),
                    parent=draw(st.sampled_from([None, "s1", "s2", "zz"])),
                    max_member=draw(st.sampled_from([None, 0, 2])),
                    topology=draw(
                        st.sampled_from([None, TopologyConstraint("topo", "rack"), TopologyConstraint("nope", "x")])
                    ),
                )
                for _ in range(draw(st.integers(1, 3)))
            ]
        pods = []
        for k in range(draw(st.integers(0, 4))):
            pods.append(
                Pod(
                    draw(st.sampled_from([f"p{j}-{k}", "dup"])),
                    f"p{j}-{k}",
                    "ns",
                    f"ns/j{j}",
                    Resources(draw(weird), draw(weird), draw(weird)),
                    phase=draw(st.sampled_from(list(PodPhase))),
                    node=draw(st.sampled_from([None, "n1", "n2", "ghost"])),
                    subgroup=draw(st.sampled_from([None, "s1", "s2", "zz"])),
                    task_priority=draw(st.integers(-3, 3)),
                    is_ray_head=draw(st.booleans()),
                    gpu_fraction=draw(st.sampled_from([None, 0.5, 0.0, 1.5, math.nan])),
                    gpu_memory_mib=draw(st.sampled_from([None, 20000, 0, 90000])),
                    gpu_group=draw(st.sampled_from([None, "g1"])),
                    node_selector=draw(st.sampled_from([{}, {"rack": "r1"}])),
                    required_affinity=draw(
                        st.sampled_from(
                            [
                                [],
                                [[NodeSelectorRequirement("rack", "Gt", ("x",))]],
                                [[NodeSelectorRequirement("rack", "Weird", ())]],
                            ]
                        )
                    ),
                    tolerations=draw(st.sampled_from([[], [Toleration(operator="Exists")]])),
                    start_time=draw(st.sampled_from([None, 0.0, 1e9])),
                    gated=draw(st.booleans()),
                )
            )
        jobs.append(
            Job(
                "ns",
                draw(st.sampled_from([f"j{j}", "dupjob"])),
                draw(st.sampled_from(["a", "b", "c", "missing", ""])),
                priority=draw(st.integers(-10, 200)),
                preemptibility=draw(st.sampled_from([None, *Preemptibility])),
                min_member=draw(st.integers(-2, 5)),
                min_subgroup=draw(st.sampled_from([None, 0, 2, 9])),
                subgroups=subgroups,
                max_member=draw(st.sampled_from([None, 0, 3])),
                topology=draw(
                    st.sampled_from(
                        [None, TopologyConstraint("topo", "rack", "rack"), TopologyConstraint("topo", None, "zz")]
                    )
                ),
                created_at=draw(st.sampled_from([0.0, 5.0])),
                last_start=draw(st.sampled_from([None, 1.0])),
                preemption_delay=draw(st.sampled_from([None, 0.0, 100.0])),
                staleness_grace=draw(st.sampled_from([None, -1.0, 0.0])),
                stale_since=draw(st.sampled_from([None, 0.0])),
                pods=pods,
            )
        )
    cfg = SchedulerConfig(
        placement_gpu=draw(st.sampled_from(["binpack", "spread"])),
        queue_priority_in_quota_reclaim=draw(st.booleans()),
        max_consolidation_preemptees=draw(st.sampled_from([16, 0, -1])),
    )
    return Snapshot(
        nodes,
        queues,
        jobs,
        now=draw(st.sampled_from([0.0, 100.0])),
        topologies=[Topology("topo", ["rack", "kubernetes.io/hostname"])],
        config=cfg,
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(chaos())
def test_bad_input_never_raises(snap: Snapshot) -> None:
    res = run_cycle(snap)
    internal = [f.message for f in res.findings if f.kind == "Cycle"]
    assert not internal, internal[0]
    keys = {j.key for j in snap.jobs}
    assert set(res.jobs) == keys

"""First integration check of run_cycle: gangs are placed whole and never beyond node capacity."""

from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.decisions import Reason
from kai_ray.scheduler.snapshot import Job, Node, Pod, Queue, Resources, Snapshot


def _job(i: int, queue: str, pods: int, gpus: float, min_member: int) -> Job:
    return Job(
        "ns",
        f"j{i}",
        queue,
        min_member=min_member,
        created_at=float(i),
        pods=[Pod(f"j{i}-{k}", f"j{i}-{k}", "ns", f"ns/j{i}", Resources(gpus, 1000, 1e9)) for k in range(pods)],
    )


def test_gangs_all_or_nothing() -> None:
    nodes = [Node(f"n{i}", Resources(8, 64000, 512e9)) for i in range(2)]
    queues = [Queue("q", quota=Resources(-1, -1, -1))]
    jobs = [_job(0, "q", 3, 4, 3), _job(1, "q", 2, 4, 2)]
    res = run_cycle(Snapshot(nodes, queues, jobs))
    bound = {b.job for b in res.binds}
    assert bound == {"ns/j0"}
    assert len(res.binds) == 3
    assert res.jobs["ns/j1"].reason is Reason.GANG_DOES_NOT_FIT
    assert res.jobs["ns/j1"].details["shortfall"]["gpu"] == 4.0

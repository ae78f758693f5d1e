"""Metrics on small cases worked out by hand (engine driven directly with single-pod gangs)."""

from __future__ import annotations

import pytest

from kai_ray.scheduler.snapshot import UNLIMITED, Node, Pod, Queue, Resources, SchedulerConfig
from kai_ray.sim.engine import Engine, EngineOptions
from kai_ray.sim.run_metrics import compute_metrics, nearest_rank, result_document
from kai_ray.sim.workloads import PodWorkload

UNL = Resources(UNLIMITED, UNLIMITED, UNLIMITED)


def _pod(name: str, gpus: float, fraction: float | None = None) -> Pod:
    return Pod(f"ns/{name}", name, "ns", f"ns/{name}", Resources(gpus, 1000, 1e9), gpu_fraction=fraction)


def _wl(name: str, at: float, duration: float, gpus: float, priority: int = 50, **kw: object) -> PodWorkload:
    return PodWorkload(
        key=f"ns/{name}",
        kind="Pod",
        arrive_at=at,
        duration=duration,
        restart_cost=float(kw.pop("restart_cost", 0.0)),  # type: ignore[arg-type]
        queue="q",
        priority=priority,
        priority_class="inference" if priority >= 100 else "train",
        template=_pod(name, gpus, kw.pop("fraction", None)),  # type: ignore[arg-type]
    )


def _engine(nodes: int = 1, gpus: float = 4, quota: float = UNLIMITED, **opts: float) -> Engine:
    queue = Queue("q", quota=Resources(quota, UNLIMITED, UNLIMITED), limit=UNL)
    return Engine(
        [Node(f"n{i}", Resources(gpus, 64000, 512e9)) for i in range(nodes)],
        [queue],
        SchedulerConfig(),
        EngineOptions(**opts),  # type: ignore[arg-type]
    )


def test_jct_queueing_allocation_and_fragmentation_by_hand() -> None:
    """One 4-GPU node. A (4 GPUs, 0..100) blocks B (2 GPUs, arrives 10, runs 50): B runs 100..150.

    JCT: A 100, B 140 -> avg 120, p99 (nearest rank of 2) 140. Queueing: A 0, B 90 -> 45.
    Allocation: 4 GPUs x 100 s + 2 x 50 = 500 GPU-s of 4 x 150 = 600 -> 0.8333.
    Fragmentation: 0 while full (0..100); 100..150 both free GPUs sit on a node in use -> 1; average 50/150.
    """
    eng = _engine()
    eng.add(_wl("a", 0, 100, 4))
    eng.add(_wl("b", 10, 50, 2))
    res = eng.run()
    m = compute_metrics(res)
    assert m["completed"] == 2
    assert m["avg_jct_seconds"] == 120.0
    assert m["p99_jct_seconds"] == 140.0
    assert m["avg_queueing_delay_seconds"] == 45.0
    assert m["gpu_allocation_rate"] == pytest.approx(500 / 600, abs=1e-4)
    assert m["gpu_fragmentation"] == pytest.approx(50 / 150, abs=1e-4)
    assert m["runs_stopped"] == 0 and m["wasted_gpu_hours"] == 0.0
    doc = result_document(res, "test")
    b = doc["workloads"]["ns/b"]
    assert (b["first_running_at"], b["completed_at"], b["pending_seconds"]) == (100.0, 150.0, 90.0)
    assert [e["type"] for e in doc["events"]] == ["bind", "complete", "bind", "complete"]


def test_fractional_gpus_share_one_device_and_count_as_fractions() -> None:
    """Two half-GPU pods share one GPU of a 2-GPU node for 100 s: allocation 1 of 2 GPUs -> 0.5;
    the other, idle GPU sits on a node in use -> fragmentation 1 (of 1 free GPU)."""
    eng = _engine(gpus=2)
    eng.add(_wl("x", 0, 100, 0.5, fraction=0.5))
    eng.add(_wl("y", 0, 100, 0.5, fraction=0.5))
    res = eng.run()
    m = compute_metrics(res)
    assert m["completed"] == 2 and res.errors == []
    assert m["gpu_allocation_rate"] == pytest.approx(0.5, abs=1e-4)
    assert m["gpu_fragmentation"] == pytest.approx(1.0, abs=1e-4)
    groups = {p.gpu_group for w in res.workloads if w.job for p in w.job.pods}
    assert groups == set()  # pods are gone after completion
    assert eng.cluster.allocated_gpus == pytest.approx(0.0)


def test_preemption_restart_cost_and_wasted_gpu_hours() -> None:
    """Same queue: train job L (4 GPUs, 100 s of work) from 0; inference job H (4 GPUs, 20 s) at 50 preempts it.
    L resumes at 70, pays a 10 s restart cost, finishes its remaining 50 s at 130. Wasted: 10 s x 4 GPUs."""
    eng = _engine(quota=4)
    eng.add(_wl("low", 0, 100, 4, restart_cost=10))
    eng.add(_wl("high", 50, 20, 4, priority=125))
    res = eng.run()
    doc = result_document(res, "test")
    low, high = doc["workloads"]["ns/low"], doc["workloads"]["ns/high"]
    assert high["first_running_at"] == 50.0 and high["completed_at"] == 70.0
    assert low["runs_stopped"] == 1 and low["stopped_at"] == [50.0]
    assert low["completed_at"] == 130.0 and low["restarts"] == 1
    m = doc["metrics"]
    assert m["runs_stopped"] == 1 and m["preempt_events"] == 1
    assert m["wasted_gpu_hours"] == pytest.approx(40 / 3600, abs=1e-4)
    ev = next(e for e in doc["events"] if e["type"] == "preempt")
    assert ev["workload"] == "ns/low" and ev["preemptor"] == "ns/high" and ev["reason"] == "Preempted"


def test_checkpoint_interval_loses_work_since_the_last_checkpoint() -> None:
    """As above with checkpoints every 30 s: at 50 s of work, 20 s are lost (x 4 GPUs) and redone.
    L resumes at 70 + 10 restart, needs 70 more seconds: done at 150. Wasted (40 + 80) GPU-s."""
    eng = _engine(quota=4, checkpoint_interval=30)
    eng.add(_wl("low", 0, 100, 4, restart_cost=10))
    eng.add(_wl("high", 50, 20, 4, priority=125))
    res = eng.run()
    low = next(w for w in res.workloads if w.key == "ns/low")
    assert low.completed_at == 150.0
    assert compute_metrics(res)["wasted_gpu_hours"] == pytest.approx(120 / 3600, abs=1e-4)


def test_nearest_rank_percentile() -> None:
    values = [float(v) for v in range(1, 201)]
    assert nearest_rank(values, 0.99) == 198.0
    assert nearest_rank([5.0], 0.99) == 5.0
    assert nearest_rank([], 0.99) is None


def test_the_loop_is_bounded() -> None:
    eng = _engine(max_cycles=1)
    eng.add(_wl("a", 0, 100, 4))
    eng.add(_wl("b", 10, 50, 2))
    res = eng.run()
    assert res.cycles == 1 and res.errors == ["t=10: stopped after 1 scheduling cycles (max_cycles)"]

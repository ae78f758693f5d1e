"""``kai-ray bench e2e`` on a small cluster (the real control plane and both operator processes), and its bad input."""

from __future__ import annotations

import json

import pytest

from kai_ray.cli import main


@pytest.mark.parametrize(
    "argv,flag",
    [
        (["--nodes", "0"], "--nodes"),
        (["--nodes", "2", "--pods", "17"], "--pods"),
        (["--nodes", "4", "--pods", "8", "--preemption-trials", "3"], "--preemption-trials"),
        (["--workers", "0"], "--workers"),
    ],
)
def test_bad_input_is_one_line(argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "e2e", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kai-ray: error:") and flag in err and "\n" not in err


def test_e2e_fills_the_cluster_and_preempts_without_overcommitting(capsys: pytest.CaptureFixture[str]) -> None:
    """The figures are only checked for sense (the machine is shared); what must hold exactly: every pod bound,
    every preemptor bound on a node its victims left, no node over-committed."""
    argv = ["bench", "e2e", "--nodes", "4", "--pods", "32", "--raw-pods", "20", "--workers", "4"]
    argv += ["--preemption-trials", "1", "--timeout", "300", "--json"]
    try:
        main(argv)
    except SystemExit as exc:
        assert exc.code in (0, None)
    doc = json.loads(capsys.readouterr().out)
    assert doc["bound"] == 32 and not doc["timed_out"] and doc["overcommitted_nodes"] == 0
    assert doc["grouped_seconds"] >= doc["created_seconds"] > 0
    assert doc["fill_seconds"] >= doc["first_bound_seconds"] > 0
    assert doc["binding_ratio_to_raw_concurrent"] > 0
    (trial,) = doc["preemption"]
    assert trial["seconds"] > 0 and trial["victims"] == 8
    assert trial["last_victim_gone_s"] is not None
    assert trial["cycles"] >= 1 and trial["cycle_seconds"] > 0, "the cycle that evicted, at least"
    assert isinstance(trial["bound_on_release"], bool)
    assert set(trial["phase_seconds"]) == {"snapshot", "session_open", "actions", "dispatch", "report"}
    assert trial["scheduler_cpu_seconds"] > 0
    for process in ("scheduler", "podgrouper", "kube-apiserver", "etcd", "bench"):
        assert doc["peak_rss_mib"][process] > 0, process
    assert doc["apiserver_writes_per_pod"]["POST pods/binding"] >= 1.0
    assert doc["apiserver_writes_per_pod_settled"]["POST pods/binding"] >= 1.0 and doc["settle_seconds"] >= 0
    cycles = doc["cycles"]
    assert cycles["cycles"] >= 1 and 0 < cycles["p50_seconds"] <= cycles["p99_seconds"]
    assert 0 < cycles["loop_share"] <= 1.0
    for phase in ("snapshot", "session_open", "actions", "dispatch", "report"):
        assert 0 <= cycles[f"{phase}_p50_seconds"] <= cycles[f"{phase}_p99_seconds"], phase


def test_quantile_interpolates_inside_its_bucket() -> None:
    from kai_ray.bench.e2e import quantile

    buckets = [(0.1, 0.0), (1.0, 10.0), (float("inf"), 10.0)]
    assert quantile(buckets, 0.5) == pytest.approx(0.55)
    assert quantile([(1.0, 0.0), (float("inf"), 0.0)], 0.5) is None
    assert quantile([(1.0, 1.0), (float("inf"), 4.0)], 0.99) == 1.0


class _PodsThatStay:
    """An API server on which a collection DELETE answers but the pods never go (as under heavy load)."""

    def __init__(self) -> None:
        self.deletes = 0

    def request(self, method: str, path: str, **_: object) -> dict[str, object]:
        self.deletes += method == "DELETE"
        return {}

    def get(self, path: str, **_: object) -> dict[str, object]:
        return {"items": [{"metadata": {"name": "raw-0"}}]}


def test_raw_rate_pods_that_stay_stop_the_run() -> None:
    """Leftover raw-rate pods hold GPUs, so the fill could never place its last pods: the run stops with one clear
    error naming the namespace instead of timing out later without its preemption trials."""
    from kai_ray.bench.e2e import _delete_all_pods

    kube = _PodsThatStay()
    with pytest.raises(TimeoutError, match="bench-raw"):
        _delete_all_pods(kube, "bench-raw", timeout=1.5)  # type: ignore[arg-type]
    assert kube.deletes >= 1

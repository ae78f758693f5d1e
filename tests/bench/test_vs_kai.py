"""``kai-ray bench vs-kai``: its workloads, log parsing and report, its bad-input errors, and the kai-ray side end to
end on a tiny cluster. KAI's own scheduler is never built or run here (that takes a Go build; the benchmark only)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray import constants as c
from kai_ray.bench import vs_kai as bv
from kai_ray.cli import main
from kai_ray.k8s.base.informer import UPSERT
from kai_ray.k8s.config import OperatorConfig
from kai_ray.k8s.scheduling.cache import SchedulerCache
from kai_ray.scheduler import snapshot as s
from kai_ray.testing import kai_upstream as kai
from kai_ray.testing.controlplane import build


def _run(argv: list[str]) -> None:
    try:
        main(argv)
    except SystemExit as exc:
        assert exc.code in (0, None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--scheduler", "volcano"], "--scheduler: 'volcano' is not one of both, kai-ray, them, kai"),
        (["--against", "volcano"], "--against: 'volcano' is not one of kai, kube-scheduler"),
        (["--against", "kube-scheduler", "--scheduler", "kai"], "'kai' is not one of both, kai-ray, them"),
        (["--workloads", "w1,w9"], "--workloads: w9 is not one of w1, w2, w3, w4"),
        (["--inside", "w5"], "--inside: w5 is not one of w1, w2, w3, w4"),
        (["--kai-limits", "fast"], "--kai-limits: 'fast' is not 'same' or 'shipped'"),
        (["--nodes", "0"], "--nodes: 0 must be at least 1"),
        (["--workloads", "w2", "--preemption-trials", "2"], "add w1 to --workloads"),
        (["--nodes", "1", "--preemption-trials", "1"], "preemption needs at least 16 GPUs"),
        (["--gpus-per-node", "4"], "W2's gangs of 8 need at least 8 GPUs per node"),
        (["--workloads", "w1,w4", "--gpus-per-node", "2"], "W4's gangs of 4 need at least 4 GPUs per node"),
    ],
)
def test_bad_input_is_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "vs-kai", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_workloads_fit_the_cluster() -> None:
    nodes, gpus = 10, 8
    w1 = bv.workload("w1", "ns", nodes, gpus)
    assert len(w1) == nodes * gpus and all(g.min_member == 1 and len(g.pods) == 1 for g in w1)
    w2 = bv.workload("w2", "ns", nodes, gpus)
    assert len(w2) == nodes * gpus // bv.GANG and all(g.min_member == len(g.pods) == bv.GANG for g in w2)
    w4 = bv.workload("w4", "ns", nodes, gpus)
    assert len(w4) == nodes * gpus // bv.SMALL_GANG and all(g.min_member == len(g.pods) == bv.SMALL_GANG for g in w4)
    w3 = bv.workload("w3", "ns", nodes, gpus)
    used = sum(bv._gpus(p) for g in w3 for p in g.pods)
    assert 0.8 * nodes * gpus < used <= bv.W3_FILL * nodes * gpus
    assert any(len(g.pods) > g.min_member for g in w3), "some Ray clusters have elastic extras"
    for g in w3:
        heads = [p for p in g.pods if p["metadata"]["labels"]["ray.io/node-type"] == "head"]
        assert len(heads) == 1 and bv._gpus(heads[0]) == 0
        assert {p["metadata"]["annotations"]["pod-group-name"] for p in g.pods} == {g.name}
    inference = bv.inference_gang("ns", 0)
    assert inference.priority == "inference" and inference.min_member == bv.GANG


def test_kai_config_is_a_default_binpack_shard() -> None:
    conf = yaml.safe_load(kai.SCHEDULER_CONFIG)
    assert [a.strip() for a in conf["actions"].split(",")] == [
        "allocate",
        "consolidation",
        "reclaim",
        "preempt",
        "stalegangeviction",
    ]
    plugins = {p["name"]: p.get("arguments") for p in conf["tiers"][0]["plugins"]}
    assert plugins["nodeplacement"] == {"gpu": "binpack", "cpu": "binpack"}
    assert "gpupack" in plugins and "gpusharingorder" in plugins and "proportion" in plugins


def test_kai_is_never_built_by_default() -> None:
    """``python -m kai_ray.testing.controlplane.build`` (what CI runs) builds BINARIES only; KAI is OPTIONAL."""
    assert not set(build.OPTIONAL) & set(build.BINARIES)
    assert {"kai-scheduler", "kai-binder"} <= set(build.OPTIONAL)


def test_log_times(tmp_path: Path) -> None:
    zap = tmp_path / "kai.log"
    zap.write_text(
        "# argv\n"
        "2026-01-02T03:04:05.250Z\t\x1b[34mINFO\x1b[0m\tpreempt/preempt.go:85\t[\x1b[37mab\x1b[0m] [preempt] "
        "Successfully preempted for job <w1-pre/inference-0>, preempted tasks: <[<w1-pre/p-1>]>\n"
        "2026-01-02T03:04:06.000Z\tINFO\tpreempt/preempt.go:85\t[x] Successfully preempted for job <w1-pre/inference-1>\n"
    )
    times = kai.log_times(zap, bv.KAI_DECISION.format(job="w1-pre/inference-0"))
    assert times == [pytest.approx(1767323045.25)]
    ours = tmp_path / "ours.log"
    ours.write_text(
        "2026-01-02 03:04:05,500 INFO kai_ray.k8s.scheduling.operator: evicting 8 pods for w1-pre/inference-1\n"
        "2026-01-02 03:04:07,000 INFO kai_ray.k8s.scheduling.operator: evicting 8 pods for w1-pre/inference-10\n"
    )
    found = bv._python_log_times(ours, bv.KAI_RAY_DECISION.format(job="w1-pre/inference-1"))
    assert len(found) == 1, "inference-1 must not match inference-10"


def test_klog_times(tmp_path: Path) -> None:
    log = tmp_path / "kube-scheduler-1.log"
    log.write_text(
        "# argv\n"
        'I0102 03:04:05.250000    645 executor.go:255] "Start the preemption asynchronously" '
        'preemptor="w1-pre/inference-0" node="n-1" numVictims=8\n'
        'I0102 03:04:06.000000    645 executor.go:255] "Start the preemption asynchronously" '
        'preemptor="w1-pre/inference-01" node="n-2" numVictims=8\n'
    )
    times = bv.klog_times(log, bv.KUBE_DECISION.format(job="w1-pre/inference-0"), year=2026)
    assert times == [pytest.approx(datetime(2026, 1, 2, 3, 4, 5, 250000).timestamp())]


def test_upstream_gang_objects() -> None:
    """kube-scheduler's side: the gang as a v1beta1 PodGroup, pods naming it, no KAI annotation or queue label."""
    (gang,) = bv.workload("w4", "ns", 1, 4)
    pg = bv.upstream_podgroup("ns", gang)
    assert pg["apiVersion"] == "scheduling.k8s.io/v1beta1"
    assert pg["spec"] == {"schedulingPolicy": {"gang": {"minCount": 4}}, "priorityClassName": "train"}
    pod = bv.upstream_pod(gang.pods[0], gang)
    assert pod["spec"]["schedulingGroup"] == {"podGroupName": gang.name}
    assert pod["spec"]["schedulerName"] == "default-scheduler"
    assert "annotations" not in pod["metadata"] and "kai.scheduler/queue" not in pod["metadata"]["labels"]
    (single,) = bv.workload("w1", "ns", 1, 1)
    assert "schedulingGroup" not in bv.upstream_pod(single.pods[0], single)["spec"], "a one-pod gang is a plain pod"


def _round(name: str, seconds: float, pre: float) -> dict[str, Any]:
    run = {
        "workload": "w1",
        "method": "pre-created",
        "pods": 80,
        "gangs": 80,
        "seconds": seconds,
        "pods_per_second": 80 / seconds,
        "first_bound_s": 1.0,
        "binding_pods_per_second": 100.0,
        "ratio_to_raw_sequential": 1.0,
        "ratio_to_raw_concurrent": 0.5,
        "overcommitted_nodes": 0,
        "writes_per_pod": {"POST pods/binding": 1.0},
    }
    return {
        "scheduler": name,
        "raw_bindings_per_second": {"sequential": 100.0, "concurrent": 200.0},
        "runs": [run],
        "preemption": [{"seconds": pre, "decision_s": 0.5, "gang_nodes": 1, "victims": 8}],
        "peak_rss_mib": {"scheduler": 100.0},
        "load_before": [1.0, 1.0, 1.0],
        "load_after": [2.0, 1.0, 1.0],
    }


def test_summary_and_markdown() -> None:
    rounds = [
        _round("kai-ray", 2.0, 1.0),
        _round("kai", 8.0, 4.0),
        _round("kai-ray", 4.0, 3.0),
        _round("kai", 8.0, 6.0),
    ]
    summary = bv.summarize(rounds)
    assert summary["kai-ray"]["w1/pre-created"]["seconds"] == {
        "n": 2,
        "median": 3.0,
        "min": 2.0,
        "max": 4.0,
        "q1": 2.5,
        "q3": 3.5,
    }
    assert summary["kai"]["preemption"]["seconds"]["median"] == 5.0
    table = bv.markdown(summary)
    assert "| W1 single-GPU pods | pre-created | 80 | 3.0 (2.0-4.0) | 8.0 (8.0-8.0) | 2.7x |" in table
    assert "| **all bound** | 2.00 (1.00-3.00) | 5.00 (4.00-6.00) |" in table


def test_own_stamps_are_read_but_do_not_wake_the_loop() -> None:
    """The last-start/last-eviction stamps kai-ray writes after binding or evicting would, in a burst of bindings,
    wake a cycle per second; the cache re-reads them (min-runtime uses last-start) without waking."""
    woke: list[int] = []
    cache = SchedulerCache(OperatorConfig(), on_change=lambda: woke.append(1))
    pg = {
        "metadata": {"name": "g", "namespace": "ns", "uid": "g1", "generation": 1, "annotations": {}},
        "spec": {"minMember": 1, "queue": "q"},
    }
    cache.on_podgroup(UPSERT, "ns/g", pg)
    assert len(woke) == 1
    stamped = {**pg, "metadata": {**pg["metadata"], "annotations": {c.LAST_START: "2026-01-01T00:00:00Z"}}}
    cache.on_podgroup(UPSERT, "ns/g", stamped)
    assert len(woke) == 1, "our own stamp is no reason for a cycle"
    model = cache.pgs["ns/g"].model
    assert model is not None and model.metadata.annotations[c.LAST_START] == "2026-01-01T00:00:00Z"
    delayed = {**pg, "metadata": {**pg["metadata"], "annotations": {c.PREEMPTION_DELAY: "30s"}}}
    cache.on_podgroup(UPSERT, "ns/g", delayed)
    assert len(woke) == 2, "any other annotation is"


@pytest.mark.controlplane
def test_kai_ray_side_on_a_tiny_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The whole command path for kai-ray: a fresh control plane, W1 created with the scheduler stopped, then an
    inference gang that must preempt, timed from the benchmark's watch and the scheduler's log."""
    out = tmp_path / "out"
    _run(
        [
            "bench",
            "vs-kai",
            "--scheduler",
            "kai-ray",
            "--nodes",
            "2",
            "--repeats",
            "1",
            "--workloads",
            "w1",
            "--preemption-trials",
            "1",
            "--inside",
            "none",
            "--raw-pods",
            "20",
            "--timeout",
            "300",
            "--out",
            str(out),
            "--json",
        ]
    )
    summary = json.loads(capsys.readouterr().out)["kai-ray"]
    w1 = summary["w1/pre-created"]
    assert w1["pods"] == 16 and w1["seconds"]["n"] == 1 and w1["overcommitted_nodes"] == 0
    pre = summary["preemption"]
    assert pre["seconds"]["n"] == 1 and pre["victims"]["median"] == bv.GANG
    assert pre["decision_s"]["n"] == 1, "the eviction decision is in the scheduler's log"
    assert pre["decision_s"]["median"] <= pre["last_victim_gone_s"]["median"] <= pre["seconds"]["median"]
    assert (out / "summary.md").read_text().startswith("| workload |")
    assert json.loads((out / "series.json").read_text())["rounds"][0]["scheduler"] == "kai-ray"


@pytest.mark.controlplane
def test_kube_scheduler_side_on_a_tiny_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """kube-scheduler 1.37 with the upstream gang API on: single pods, 4-pod gangs and a high-priority gang that must
    preempt, all bound with no node over-committed, and its preemption decision read from its log."""
    out = tmp_path / "out"
    _run(
        [
            "bench",
            "vs-kai",
            "--against",
            "kube-scheduler",
            "--scheduler",
            "them",
            "--nodes",
            "2",
            "--repeats",
            "1",
            "--workloads",
            "w1,w4",
            "--preemption-trials",
            "1",
            "--inside",
            "w4",
            "--raw-pods",
            "20",
            "--timeout",
            "300",
            "--out",
            str(out),
            "--json",
        ]
    )
    summary = json.loads(capsys.readouterr().out)["kube-scheduler"]
    for key, gangs in (("w1/pre-created", 16), ("w4/pre-created", 4), ("w4/inside", 4)):
        assert summary[key]["pods"] == 16 and summary[key]["gangs"] == gangs
        assert summary[key]["overcommitted_nodes"] == 0 and summary[key]["gangs_per_second"]["n"] == 1
    pre = summary["preemption"]
    assert pre["seconds"]["n"] == 1 and pre["victims"]["median"] == bv.GANG
    assert pre["decision_s"]["n"] == 1, "the preemption decision is in kube-scheduler's log"
    assert "| kube-scheduler / kai-ray |" in (out / "summary.md").read_text()


def test_rounds_hold_the_lock(tmp_path: Path) -> None:
    lock = tmp_path / "bench.lock"
    said: list[str] = []
    with bv._locked(lock, said.append), open(lock) as other:
        assert not bv._try_lock(other), "held while a round runs"
    with open(lock) as other:
        assert bv._try_lock(other), "released after it"
    assert said == []


def test_a_queued_binding_stays_assumed_until_answered() -> None:
    """In a fill of thousands of pods, bindings wait in the binder's queue for longer than the confirmation timeout;
    they must not fall back to pending (and be decided again) before the API server has even seen them."""
    cache = SchedulerCache(OperatorConfig())
    cache.on_node(UPSERT, "n1", {"metadata": {"name": "n1"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}})
    pod = {
        "metadata": {"name": "a", "namespace": "ns", "uid": "u-a", "annotations": {"pod-group-name": "g"}},
        "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "resources": {}}]},
        "status": {"phase": "Pending"},
    }
    cache.on_pod(UPSERT, "ns/a", pod)
    assert cache.assume("ns/a", "u-a", "n1")
    assert cache.assumed["ns/a"].until == float("inf"), "queued: no deadline yet"
    cache.sent("ns/a", "u-a")
    assert cache.assumed["ns/a"].until < float("inf")
    cache.assumed["ns/a"].until = 0.0  # the watch never confirmed it
    cache.build(s.SchedulerConfig())
    assert "ns/a" not in cache.assumed, "an answered binding the watch never confirmed is pending again"


def test_report_merges_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for i, r in enumerate((_round("kai-ray", 2.0, 1.0), _round("kai", 8.0, 4.0))):
        (tmp_path / f"pair{i}" / "round-00").mkdir(parents=True)
        (tmp_path / f"pair{i}" / "round-00" / "round.json").write_text(json.dumps(r))
    _run(["bench", "vs-kai-report", str(tmp_path / "pair0"), str(tmp_path / "pair1")])
    assert "| W1 single-GPU pods | pre-created | 80 | 2.0 (2.0-2.0) | 8.0 (8.0-8.0) | 4.0x |" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["bench", "vs-kai-report", str(tmp_path / "nothing")])
    assert exc.value.code == 2

"""`kai-ray demo` as a newcomer runs it: the story must hold, asserted from its JSON and its printed words.

The story, in order: training fills the cluster elastically; a RayService arriving in the training job's own queue
preempts it by priority; another team's in-quota job reclaims the training queue's over-quota GPUs across queues;
both times kai-ray shrinks the training job instead of stopping it; training grows back when serving scales down;
no GPU idles while a workload that fits waits. And kai-ray beats KAI's semantics and pod-by-pod scheduling on the
same workload in useful GPU time and in work lost to evictions.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kai_ray.sim.story import clock
from tests.sim.helpers import PYTHON, REPO, kai_ray

PNG = b"\x89PNG\r\n\x1a\n"


def _demo(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI from another directory than the checkout: the scenario must come from the package."""
    exe = str(PYTHON) if PYTHON.exists() else sys.executable
    return subprocess.run(
        [exe, "-m", "kai_ray", "demo", *args], capture_output=True, text=True, timeout=180, cwd=str(cwd)
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    cwd = tmp_path_factory.mktemp("demo-json")
    out = _demo(cwd, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout), cwd


@pytest.fixture(scope="module")
def doc(run: tuple[dict[str, Any], Path]) -> dict[str, Any]:
    return run[0]


def _key(doc: dict[str, Any], kind: str, queue: str | None = None) -> str:
    return next(k for k, w in doc["workloads"].items() if w["kind"] == kind and queue in (None, w["queue"]))


def _queue_held_before(doc: dict[str, Any], event: dict[str, Any]) -> dict[str, float]:
    """GPUs each queue held just before ``event``, replayed from the binds, evictions, scale steps, completions."""
    wl = doc["workloads"]
    changes: list[tuple[float, int, str, float]] = []
    for i, e in enumerate(doc["events"]):
        if e is event:
            break
        sign = {"bind": 1.0, "preempt": -1.0, "reclaim": -1.0, "evict": -1.0}.get(e["type"])
        if sign is not None:
            changes.append((e["t"], i, e["workload"], sign * e["gpus"]))
        elif e["type"] == "complete":
            changes.append((e["t"], i, e["workload"], float("nan")))
    for s in doc["scale_steps"]:
        if s["t"] < event["t"]:
            changes.append((s["t"], -1, s["workload"], -s["gpus_removed"]))
    held: dict[str, float] = {}
    for _, _, key, delta in sorted(changes):
        held[key] = 0.0 if delta != delta else held.get(key, 0.0) + delta
    out: dict[str, float] = {}
    for key, v in held.items():
        out[wl[key]["queue"]] = out.get(wl[key]["queue"], 0.0) + v
    return out


def test_training_fills_the_cluster_elastically(doc: dict[str, Any]) -> None:
    train = _key(doc, "RayJob", "llm")
    binds = [e for e in doc["events"] if e["type"] == "bind" and e["workload"] == train]
    first_evict = min(e["t"] for e in doc["events"] if e["type"] in ("preempt", "reclaim"))
    held = sum(e["gpus"] for e in binds if e["t"] < first_evict)
    assert binds[0]["reason"] == "Scheduled" and binds[0]["gpus"] == doc["workloads"][train]["gang_gpus"]
    assert any(e["reason"] == "ElasticScaleUp" for e in binds)
    assert held == doc["cluster"]["gpus"] > doc["cluster"]["gpu_quotas"]["llm"]


def test_service_preempts_training_by_priority_in_one_queue_and_training_shrinks(doc: dict[str, Any]) -> None:
    wl = doc["workloads"]
    train, serve = _key(doc, "RayJob", "llm"), _key(doc, "RayService")
    s, t = wl[serve], wl[train]
    assert s["queue"] == t["queue"] == "llm"
    assert (s["priority_class"], s["preemptible"]) == ("inference", False)  # kai-ray's default for a RayService
    assert s["priority"] > t["priority"] and t["preemptible"]
    pre = [e for e in doc["events"] if e["type"] == "preempt"]
    assert pre and all(e["workload"] == train and e["preemptor"] == serve for e in pre)
    assert all(e["action"] == "preempt" and e["elastic"] and not e["whole_gang"] for e in pre)
    assert {e["outcome"] for e in pre} == {"shrink"}
    assert s["queueing_delay_seconds"] == 0 and s["runs_stopped"] == 0


def test_another_team_reclaims_across_queues_in_quota_and_training_shrinks(doc: dict[str, Any]) -> None:
    wl, quotas = doc["workloads"], doc["cluster"]["gpu_quotas"]
    train = _key(doc, "RayJob", "llm")
    rec = [e for e in doc["events"] if e["type"] == "reclaim"]
    assert rec and all(e["workload"] == train and e["outcome"] == "shrink" and e["elastic"] for e in rec)
    first = rec[0]
    reclaimer = wl[first["preemptor"]]
    assert reclaimer["queue"] != wl[train]["queue"]
    assert reclaimer["gang_gpus"] <= quotas[reclaimer["queue"]]  # in quota
    before = _queue_held_before(doc, first)
    assert before["llm"] > quotas["llm"]  # the victim's queue was over its quota
    assert max(e["t"] for e in doc["events"] if e["type"] == "preempt") < first["t"]  # preempt, then reclaim


def test_training_is_never_stopped_and_grows_back_when_serving_scales_down(doc: dict[str, Any]) -> None:
    wl = doc["workloads"]
    train, serve = _key(doc, "RayJob", "llm"), _key(doc, "RayService")
    t = wl[train]
    assert t["runs_stopped"] == 0 and t["restarts"] == 0 and t["shrink_events"] >= 2
    assert t["state"] == "Completed" and t["lost_gpu_hours"] == 0
    down = next(s for s in doc["scale_steps"] if s["workload"] == serve and s["pods_removed"])
    last_shrink = max(e["t"] for e in doc["events"] if e.get("outcome") == "shrink")
    assert last_shrink < down["t"]
    regrow = [
        e
        for e in doc["events"]
        if e["type"] == "bind"
        and e["workload"] == train
        and e["reason"] == "ElasticScaleUp"
        and down["t"] <= e["t"] <= down["t"] + 30
    ]
    assert regrow and regrow[0]["gpus"] == down["gpus_removed"]
    assert {e.get("outcome") for e in doc["events"] if "outcome" in e} == {"shrink"}
    assert doc["metrics"]["runs_stopped"] == 0 and doc["errors"] == []


def test_no_gpu_idles_while_a_fitting_workload_waits(doc: dict[str, Any]) -> None:
    assert doc["metrics"]["idle_while_fitting_seconds"] == 0
    assert not any(w["fits"] for w in doc["idle_windows"])
    # the one workload that waits does so for a stated reason: its gang does not fit and its queue has no quota
    waiting = {k: w for k, w in doc["workloads"].items() if w["queueing_delay_seconds"]}
    assert list(waiting) == [_key(doc, "RayJob", "research")]
    reasons = waiting[_key(doc, "RayJob", "research")]["pending_reasons"]
    assert reasons[0]["reason"] == "GangDoesNotFit" and "fair share" in reasons[0]["message"]


def test_kai_ray_beats_both_baselines(doc: dict[str, Any]) -> None:
    rows = {r["policy"]: r for r in doc["comparison"]}
    assert list(rows) == ["kai-ray", "kai", "no-gang"]
    me = rows["kai-ray"]
    for name in ("kai", "no-gang"):
        other = rows[name]
        assert me["useful_gpu_rate"] > other["useful_gpu_rate"], name
        assert me["lost_gpu_hours"] < other["lost_gpu_hours"], name
    assert me["lost_gpu_hours"] == 0 and set(me["outcome_pods"]) == {"shrink"}
    # the rows are the baselines' own documents
    for name in ("kai", "no-gang"):
        base = doc["baselines"][name]
        assert base["policy"] == name and base["metrics"]["lost_gpu_hours"] == rows[name]["lost_gpu_hours"]
    kai, nogang = doc["baselines"]["kai"], doc["baselines"]["no-gang"]
    serve = _key(doc, "RayService")
    assert kai["workloads"][serve]["priority_class"] == "train"  # KAI's podgrouper default for every Ray kind
    assert rows["kai"]["service_serving_after_seconds"][serve] > 0
    assert {e["outcome"] for e in kai["events"] if "outcome" in e} == {"restart"}
    assert rows["no-gang"]["partial_gang_gpu_hours"] > 0 and me["partial_gang_gpu_hours"] == 0
    assert nogang["errors"] == [] and kai["errors"] == []


def test_json_writes_no_files_unless_asked(run: tuple[dict[str, Any], Path]) -> None:
    doc, cwd = run
    assert "report" not in doc
    assert list(cwd.iterdir()) == []


def test_json_with_report_writes_every_plot(tmp_path: Path) -> None:
    out = _demo(tmp_path, "--json", "--report", "plots")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    files = [tmp_path / p for p in doc["report"]["files"]]
    names = {"gpu-allocation.png", "pending-time.png", "timeline.png", "policies.png"}
    assert {p.name for p in files} == names and {p.name for p in (tmp_path / "plots").iterdir()} == names
    for p in files:
        assert p.read_bytes()[:8] == PNG and p.stat().st_size > 5000


def test_story_words_and_summary_agree_with_the_json(doc: dict[str, Any], tmp_path: Path) -> None:
    out = _demo(tmp_path, "--no-report")
    assert out.returncode == 0, out.stderr
    assert list(tmp_path.iterdir()) == []
    text = " ".join(out.stdout.split())
    m = doc["metrics"]
    assert f"average {clock(m['avg_queueing_delay_seconds'])}." in text
    assert f"Pending time including after evictions: average {clock(m['avg_pending_seconds'])}." in text
    assert "preempts llm/pretrain by priority within queue llm" in text
    assert "Queue vision reclaims GPUs from queue llm" in text
    assert "kai-ray shrinks llm/pretrain" in text and "keeps running" in text
    assert "Traffic drops" in text and "grows back" in text
    assert "No GPU sat idle while a workload that fit was waiting" in text
    assert "RECLAIMED" not in text and "PREEMPTED" not in text
    for title in ("kai-ray", "KAI semantics", "no gang scheduling"):
        assert title in text
    useful = [f"{100 * r['useful_gpu_rate']:.1f}%" for r in doc["comparison"]]
    assert re.search(r"GPUs doing useful work\s+" + r"\s+".join(map(re.escape, useful)), out.stdout)


def test_report_options_conflict(tmp_path: Path) -> None:
    out = kai_ray("demo", "--no-report", "--report", str(tmp_path / "r"))
    assert out.returncode == 2 and "--no-report" in out.stderr
    assert not (tmp_path / "r").exists()


def test_readme_shows_the_demo_s_own_table_and_figure() -> None:
    out = kai_ray("demo", "--markdown")
    assert out.returncode == 0, out.stderr
    readme = (REPO / "README.md").read_text()
    assert out.stdout.strip() in readme, "README's table differs from `kai-ray demo --markdown`: paste it again"
    assert "](docs/demo-policies.png)" in readme
    assert (REPO / "docs" / "demo-policies.png").read_bytes()[:8] == PNG


def test_evictions_are_counted_in_pods_everywhere(doc: dict[str, Any]) -> None:
    """A newcomer's report: the story said 2 + 2 workers, the table 2 + 1 evictions and "shrank 3", the pending plot
    "shrunk x3", the timeline 2 unlabelled marks, the Workloads table "preempted 0". One unit now: pods."""
    import io

    from rich.console import Console

    from kai_ray.sim.compare import run_policies
    from kai_ray.sim.report import _eviction_bursts
    from kai_ray.sim.scenario import load_scenario
    from kai_ray.sim.story import print_metrics, print_workloads

    train = _key(doc, "RayJob", "llm")
    t = doc["workloads"][train]
    assert t["evicted_pods"] == 4 and t["evicted_pods_by"] == {"preempt": 2, "reclaim": 2}
    m = doc["metrics"]
    assert (m["preempted_pods"], m["reclaimed_pods"], m["outcome_pods"]) == (2, 2, {"shrink": 4})
    me = doc["comparison"][0]
    assert (me["preempted_pods"], me["reclaimed_pods"], me["outcome_pods"]) == (2, 2, {"shrink": 4})
    out = io.StringIO()
    console = Console(file=out, width=200)
    print_workloads(doc, console)
    print_metrics(doc, console)
    text = out.getvalue()
    assert "pods evicted" in text and "preempted" not in text
    assert next(line for line in text.splitlines() if line.lstrip().startswith(train)).split()[-2:] == ["4", "0"]
    assert "pods evicted by preempt / reclaim / other               2 / 2 / 0" in text
    res = run_policies(load_scenario(REPO / "kai_ray" / "sim" / "demo" / "scenario.yaml"), "demo")[0].result
    assert [(round(t), w, k, n) for t, w, k, n in _eviction_bursts(res)] == [
        (600, train, "shrink", 2),
        (1500, train, "shrink", 2),
    ]

"""`kai-ray demo` as a newcomer runs it: the story must hold, asserted from its JSON and its printed words."""

from __future__ import annotations

from pathlib import Path

from tests.sim.helpers import kai_ray, run_json


def test_demo_inference_preempts_training_and_training_completes(tmp_path: Path) -> None:
    doc = run_json("demo", "--report", str(tmp_path / "report"))
    wl = doc["workloads"]
    train = next(k for k, w in wl.items() if w["kind"] == "RayJob")
    serve = next(k for k, w in wl.items() if w["kind"] == "RayService")
    t, s = wl[train], wl[serve]

    # the RayService runs, as inference, and is never preempted
    assert s["priority_class"] == "inference"
    assert s["first_running_at"] is not None and s["state"] == "Running"
    assert s["preemptions"] == 0
    # the RayJob ran first, was preempted when the service arrived, and completed later
    assert t["priority_class"] == "train"
    assert t["first_running_at"] is not None and t["first_running_at"] < s["arrived_at"]
    assert t["preemptions"] >= 1
    assert t["preempted_at"][0] >= s["arrived_at"]
    assert t["state"] == "Completed" and t["completed_at"] > t["preempted_at"][-1]
    assert t["restarts"] >= 1 and t["work_done_seconds"] >= t["duration_seconds"] - 1e-6

    # the eviction that ended the gang was made for the service, by the scheduler's reclaim or preempt
    gang_losses = [
        e for e in doc["events"] if e["workload"] == train and e["type"] in ("preempt", "reclaim") and not e["elastic"]
    ]
    assert gang_losses and all(e["preemptor"] == serve for e in gang_losses)
    assert {e["type"] for e in doc["events"]} <= {"bind", "evict", "preempt", "reclaim", "complete"}
    assert doc["metrics"]["preemptions"] >= 1 and doc["errors"] == []

    files = [Path(p) for p in doc["report"]["files"]]
    assert {p.name for p in files} == {"gpu-allocation.png", "pending-time.png", "timeline.png"}
    for p in files:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000


def test_demo_story_is_told_and_names_the_report(tmp_path: Path) -> None:
    out = kai_ray("demo", "--report", str(tmp_path / "r"))
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "RECLAIMED" in text or "PREEMPTED" in text
    assert "Capacity is back" in text and "completes" in text
    assert f"Report written to {tmp_path / 'r'}" in text
    assert (tmp_path / "r" / "timeline.png").exists()

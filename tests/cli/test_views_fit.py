"""Views that fit a terminal: at 80 columns ``queues``, ``pending`` and ``simulate`` print every number and name
whole (no ``…``), the descriptive text (queue display names, pending reasons) under the table; and ``queues`` counts
as pending what ``pending`` lists, elastic pods of running gangs apart."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kai_ray.cli import main

AT = "50m"  # the packaged demo then has a pending gang (research/eval) and an elastic worker of a running gang waiting


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    try:
        main(argv)
    except SystemExit as exc:
        assert not exc.code, capsys.readouterr().err
    out, err = capsys.readouterr()
    assert err == "", err
    return out


@pytest.mark.parametrize(
    ("argv", "whole"),
    [
        (["queues", "--scenario", "demo", "--at", AT], ["ml-platform", "├─ research", "ALLOC", "llm: LLM team"]),
        (["pending", "--scenario", "demo", "--at", AT], ["research/pg-eval", "train (50)", "GangDoesNotFit"]),
        (["simulate", "demo"], ["research/eval", "Completed", "1:42:22", "evicted"]),
    ],
)
def test_nothing_is_cut_at_80_columns(
    argv: list[str], whole: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out = _run(argv, capsys)
    assert "…" not in out
    too_wide = [line for line in out.splitlines() if len(line) > 80]
    assert not too_wide, too_wide
    for text in whole:
        assert text in out, (text, out)


def test_a_pipe_without_columns_keeps_the_full_table(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    out = _run(["queues", "--scenario", "demo", "--at", AT], capsys)
    assert "├─ llm (LLM team, trains and serves its model)" in out and "ALLOCATED" in out and "…" not in out


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Any:
    return json.loads(_run([*argv, "-o", "json"], capsys))


def test_queues_and_pending_count_the_same_pending(capsys: pytest.CaptureFixture[str]) -> None:
    queues = {q["name"]: q for q in _json(["queues", "--scenario", "demo", "--at", AT], capsys)["queues"]}
    pending = _json(["pending", "--scenario", "demo", "--at", AT], capsys)["pending"]
    for name in ("research", "llm", "vision"):
        listed = [p for p in pending if p["queue"] == name]
        assert queues[name]["pending_podgroups"] == len(listed)
        assert queues[name]["pending_pods"] == sum(p["pending_pods"] for p in listed)
    assert queues["vision"]["elastic_pending_pods"] == 1, "an elastic worker of a running gang, not a pending gang"
    assert queues["ml-platform"]["elastic_pending_pods"] == 1
    text = _run(["pending", "--scenario", "demo", "--at", AT], capsys)
    assert "1 pod of a running gang (an elastic worker) waits too; not listed here" in text

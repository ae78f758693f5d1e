"""Every command's ``--help`` at 80 columns: nothing cut, no value placeholder on flags, no reST markup, and each
operator lists its own options with the shared ones in their own panels."""

from __future__ import annotations

import re

import pytest
import typer.main

import kai_ray.cli.commands  # noqa: F401  (registers every command)
from kai_ray.cli import app, main


def _paths(group: object, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    commands = getattr(group, "commands", {})
    out = [prefix] if prefix else []
    for name, cmd in commands.items():
        out += _paths(cmd, (*prefix, name)) if getattr(cmd, "commands", None) else [(*prefix, name)]
    return out


PATHS = _paths(typer.main.get_command(app))


def _help(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *argv: str) -> str:
    monkeypatch.setenv("COLUMNS", "80")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--help"])
    assert not exc.value.code
    return capsys.readouterr().out


def test_every_command_is_reached() -> None:
    assert {("operator", "scheduler"), ("operator", "podgrouper"), ("bench", "replay"), ("sweep",)} <= set(PATHS)


@pytest.mark.parametrize("path", PATHS, ids=[" ".join(p) for p in PATHS])
def test_help_is_whole_at_80_columns(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, path: tuple[str, ...]
) -> None:
    text = _help(capsys, monkeypatch, *path)
    assert "…" not in text, text
    assert not re.search(r"<(str|int|float|bool|Path|list\[\w+\])>", text), "a placeholder names what to write (FILE)"
    assert "`" not in text, "no markup in help text"
    assert "../shared" not in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_podgroup_help_speaks_of_the_option_it_has(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _help(capsys, monkeypatch, "podgroup")
    assert "in FILE" not in text and "-f" in text


def _options(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", text))


def test_each_operator_lists_its_own_options(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sched = _help(capsys, monkeypatch, "operator", "scheduler")
    pg = _help(capsys, monkeypatch, "operator", "podgrouper")
    shared = _options(sched) & _options(pg)
    assert {"--kubeconfig", "--leader-elect", "--lease-duration", "--metrics-port", "--log-level"} <= shared
    assert {"--placement-strategy", "--usage-db", "--elastic-reclaim"} <= _options(sched) - _options(pg)
    assert {"--kai-coexistence", "--default-priority"} <= _options(pg) - _options(sched)
    for text in (sched, pg):
        assert "Cluster and leader election (both operators)" in text


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert not exc.value.code
    assert capsys.readouterr().out == f"kai-ray {version('kai-ray')}\n"

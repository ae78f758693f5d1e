"""The README and docs a new user reads: the test command's prerequisites next to it, the CLI list and the examples
table complete, commands that work after a wheel install, no words of this project's own process."""

from __future__ import annotations

import re
from pathlib import Path

import typer.main

import kai_ray.cli.commands  # noqa: F401  (registers every command)
from kai_ray.cli import app

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _fenced(text: str) -> list[str]:
    return re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)


def test_the_two_setup_commands_stay_first_and_the_test_one_names_its_prerequisites() -> None:
    demo, tests = _fenced(README)[:2]
    assert "kai-ray demo" in demo and "pytest" in tests
    before_tests = README[: README.index(tests)]
    prose = before_tests[before_tests.index(demo) + len(demo) :]
    assert "Go 1.26 or later" in prose and "GB of disk" in prose and re.search(r"\d+ min \d+ s", prose)


def test_the_cli_list_names_every_command() -> None:
    row = next(line for line in README.splitlines() if line.startswith("| CLI |"))
    listed = set(re.findall(r"`([a-z-]+)`", row.split("|")[3]))
    commands = set(getattr(typer.main.get_command(app), "commands", {}))
    assert commands == listed, commands ^ listed


def test_the_examples_table_names_every_example() -> None:
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        assert f"| `examples/{path.name}` |" in README, path.name


def test_commands_work_after_a_wheel_install() -> None:
    assert "--scenario kai_ray/sim/demo/scenario.yaml" not in README
    assert "kai-ray queues --scenario demo --at 45m" in README


def test_the_vs_kai_command_is_the_one_that_made_the_figures() -> None:
    bench = (ROOT / "docs" / "benchmarks.md").read_text()
    made = re.search(r"^`(kai-ray bench vs-kai [^`]+)`\non \d{4}-\d\d-\d\d", bench, flags=re.M)
    assert made is not None
    assert any(block.strip() == made.group(1) for block in _fenced(README))


def test_no_words_of_the_projects_own_process() -> None:
    for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        text = path.read_text()
        for phrase in ("the issue's", "shared README"):
            assert phrase not in text, (path.name, phrase)
    assert "../shared/data" not in README
    assert "github.com/alibaba/clusterdata" in README

"""The conformance suite: KAI Scheduler's own action tests, ported as kai-ray scenarios, must agree.

Each YAML file holds the cases of one upstream test file (``kai.file``), one document per case (``kai.case``): the
setup and the expected outcome are upstream's facts in our scenario format (``harness: kai`` applies upstream's
test-harness defaults). A case with a ``difference`` is a deliberate, documented improvement: kai-ray must meet its
own expectation there and must *not* meet upstream's, so the documentation cannot go stale. A case marked
``known_failure`` is a disagreement under work: it must fail (strict), so a fix is noticed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kai_ray.testing.cycle_fixture import CycleFixture, agrees_with_kai, load_fixtures, run_fixture

ROOT = Path(__file__).parent


def _cases() -> list[CycleFixture]:
    out: list[CycleFixture] = []
    for path in sorted(ROOT.rglob("*.yaml")):
        out.extend(load_fixtures(path))
    return out


CASES = _cases()


@pytest.mark.parametrize("sc", CASES, ids=[f"{Path(sc.path).stem}:{sc.name}" for sc in CASES])
def test_case(sc: CycleFixture) -> None:
    errors = run_fixture(sc)
    if sc.known_failure:
        if errors:
            pytest.xfail(f"known disagreement: {sc.known_failure}")
        pytest.fail(f"agrees now: drop known_failure ({sc.known_failure})")
    assert not errors, f"{sc.kai.get('file')} :: {sc.kai.get('case')}\n" + "\n".join(errors)
    if sc.difference is not None:
        assert not agrees_with_kai(sc), f"documented difference no longer differs: {sc.difference['reason']}"


def test_every_case_names_its_upstream_origin() -> None:
    for sc in CASES:
        assert sc.kai.get("file") and sc.kai.get("case"), sc.path
    names = [sc.name for sc in CASES]
    assert len(names) == len(set(names)), "case names must be unique"


def test_readme_table_is_current() -> None:
    from tests.conformance.summary import table

    text = (ROOT / "README.md").read_text()
    start = text.index("| action | cases ported")
    end = text.index("<!-- end of generated table -->")
    assert text[start:end].strip() == table().strip(), "run: python -m tests.conformance.summary"

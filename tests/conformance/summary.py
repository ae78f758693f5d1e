"""The conformance table of tests/conformance/README.md, computed from the cases (``python -m tests.conformance.summary``).

A test checks that the README's table is exactly what this prints, so the published agreement cannot go stale.
"""

from __future__ import annotations

import re
from pathlib import Path

from kai_ray.testing.cycle_fixture import agrees_with_kai, load_fixtures, run_fixture

ROOT = Path(__file__).parent
ACTIONS = ("allocate", "reclaim", "preempt", "consolidation", "stalegangeviction", "deletion")


def _skipped(action: str) -> int:
    path = ROOT / action / "SKIPPED.md"
    if not path.exists():
        return 0
    cases = re.split(r"(?i)whole files|files out of scope|out of scope \(whole files\)", path.read_text())[0]
    return sum(
        1
        for line in cases.splitlines()
        if line.startswith("|") and not line.startswith("|---") and not line.lower().startswith("| upstream")
    )


def table() -> str:
    lines = [
        "| action | cases ported | agree with KAI | documented differences | known failures | not expressible |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    tot = [0, 0, 0, 0, 0]
    for action in ACTIONS:
        n = agree = diff = fail = 0
        for path in sorted((ROOT / action).glob("*.yaml")):
            for sc in load_fixtures(path):
                n += 1
                if sc.difference is not None:
                    diff += 1
                    agree += agrees_with_kai(sc)
                elif sc.known_failure:
                    fail += 1
                else:
                    agree += not run_fixture(sc)
        row = [n, agree, diff, fail, _skipped(action)]
        tot = [a + b for a, b in zip(tot, row, strict=True)]
        lines.append(f"| {action} | " + " | ".join(str(v) for v in row) + " |")
    pct = 100.0 * tot[1] / tot[0] if tot[0] else 0.0
    lines.append(f"| **all** | **{tot[0]}** | **{tot[1]} ({pct:.1f}%)** | **{tot[2]}** | **{tot[3]}** | **{tot[4]}** |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())

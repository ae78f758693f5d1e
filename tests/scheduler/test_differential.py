"""Differential test: our fair-share division against KAI's own ``resource_division`` on random queue trees.

Slow (builds Go code on first run). Skips, with every build error, only when no KAI source can be built; see
``tests/scheduler/DIFFERENTIAL.md``.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from kai_ray.scheduler.fairshare import ShareQueue, divide_tree

from .kai_oracle import OracleUnavailable, ensure_oracle, run_oracle

N_TREES = 1200
RES = ("gpu", "cpu", "memory")


def random_tree(rnd: random.Random) -> tuple[list[float], list[dict[str, object]]]:
    """A queue forest of depth <= 3 with quotas, limits, weights, priorities, requests and creation times."""
    total = [
        float(rnd.choice([0, 7, 16, 100, 1000, rnd.randint(1, 300)])),
        float(rnd.choice([0, 64000, rnd.randint(1, 500000)])),
        float(rnd.choice([0, 512e9, float(rnd.randint(1, 10**12))])),
    ]
    queues: list[dict[str, object]] = []
    n = rnd.randint(1, 12)
    for i in range(n):
        parent = ""
        if i > 0 and rnd.random() < 0.6:
            cand = [q for q in queues if int(str(q["depth"])) < 2]
            if cand:
                p = rnd.choice(cand)
                parent = str(p["uid"])
        depth = 0 if not parent else int(str(next(q for q in queues if q["uid"] == parent)["depth"])) + 1
        share = {}
        for r, scale in zip(RES, (1.0, 1000.0, 1e9), strict=True):
            deserved = rnd.choice([0.0, 0.0, -1.0, float(rnd.randint(0, 40)), rnd.random() * 30])
            limit = rnd.choice([-1.0, -1.0, float(rnd.randint(0, 80))])
            weight = rnd.choice([0.0, 1.0, 1.0, 2.0, 3.0, float(rnd.randint(0, 10))])
            request = rnd.choice([0.0, float(rnd.randint(0, 120)), rnd.random() * 100])
            share[r] = {
                "deserved": deserved * scale if deserved != -1 else -1.0,
                "maxAllowed": limit * scale if limit != -1 else -1.0,
                "overQuotaWeight": weight,
                "request": request * scale,
            }
        queues.append(
            {
                "uid": f"q{i:02d}",
                "name": f"q{i:02d}",
                "parentQueue": parent,
                "depth": depth,
                "priority": rnd.choice([100, 100, 50, 200]),
                "created": rnd.choice([0, 10, 10, 20, 30]),
                "resourceShare": share,
            }
        )
    # requests are summed up the tree, as the proportion plugin does
    for q in sorted(queues, key=lambda q: -int(str(q["depth"]))):
        if q["parentQueue"]:
            parent_q = next(p for p in queues if p["uid"] == q["parentQueue"])
            for r in RES:
                parent_q["resourceShare"][r]["request"] += q["resourceShare"][r]["request"]  # type: ignore[index]
    return total, queues


def ours(
    total: list[float], queues: list[dict[str, object]], k: float = 1.0, usage: dict[str, list[float]] | None = None
) -> dict[str, list[float]]:
    shares: dict[str, ShareQueue] = {}
    for q in queues:
        rs = q["resourceShare"]
        shares[str(q["uid"])] = ShareQueue(
            uid=str(q["uid"]),
            priority=int(str(q["priority"])),
            created_at=float(str(q["created"])),
            deserved=[rs[r]["deserved"] for r in RES],  # type: ignore[index]
            max_allowed=[rs[r]["maxAllowed"] for r in RES],  # type: ignore[index]
            weight=[rs[r]["overQuotaWeight"] for r in RES],  # type: ignore[index]
            request=[rs[r]["request"] for r in RES],  # type: ignore[index]
            usage=list((usage or {}).get(str(q["uid"]), [0.0, 0.0, 0.0])),
        )
    roots = []
    for q in queues:
        s = shares[str(q["uid"])]
        if q["parentQueue"]:
            shares[str(q["parentQueue"])].children.append(s)
        else:
            roots.append(s)
    divide_tree(total, roots, k)
    return {uid: list(s.fair_share) for uid, s in shares.items()}


def to_oracle(
    total: list[float], queues: list[dict[str, object]], k: float = 1.0, usage: dict[str, list[float]] | None = None
) -> dict[str, object]:
    out = []
    for q in queues:
        children = [c["uid"] for c in queues if c["parentQueue"] == q["uid"]]
        ts = datetime.fromtimestamp(1_700_000_000 + int(str(q["created"])), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        out.append(
            {
                "uid": q["uid"],
                "name": q["name"],
                "parentQueue": q["parentQueue"],
                "childQueues": children,
                "creationTimestamp": ts,
                "priority": q["priority"],
                "resourceShare": q["resourceShare"],
            }
        )
    return {
        "total": dict(zip(("GPU", "CPU", "Memory"), total, strict=True)),
        "kValue": k,
        "queues": out,
        "usage": usage or {},
    }


Case = tuple[list[float], list[dict[str, object]], float, dict[str, list[float]] | None]


def differences(cases: list[Case]) -> list[tuple[object, ...]]:
    """Divide every case with ours and with KAI's code; (case, k, queue, resource, ours, KAI's) where they differ.
    Skips the test, with every build error, when KAI's code cannot be built."""
    try:
        oracle = ensure_oracle()
    except OracleUnavailable as exc:
        pytest.skip(f"KAI's fair-share code could not be built (see tests/scheduler/DIFFERENTIAL.md):\n{exc}")
    got = run_oracle(oracle, [to_oracle(t, q, k, u) for t, q, k, u in cases])
    assert len(got) == len(cases)
    mismatches: list[tuple[object, ...]] = []
    for i, ((total, queues, k, usage), kai) in enumerate(zip(cases, got, strict=True)):
        mine = ours(total, queues, k, usage)
        for uid, vals in kai.items():
            for r, (a, b) in enumerate(zip(mine[uid], vals, strict=True)):
                if abs(a - b) > 1e-6 * max(1.0, abs(b)):
                    mismatches.append((i, k, uid, RES[r], a, b))
    return mismatches


@pytest.mark.slow
def test_fair_share_matches_kai() -> None:
    rnd = random.Random(20260807)
    cases: list[Case] = [(*random_tree(rnd), 1.0, None) for _ in range(N_TREES)]
    mismatches = differences(cases)
    assert not mismatches, f"{len(mismatches)} differences, first: {mismatches[:5]}"


def random_usage(rnd: random.Random, queues: list[dict[str, object]]) -> dict[str, list[float]]:
    """Normalised usage per queue and resource: none, a little, about the weight share, or more than the cluster."""
    out = {}
    for q in queues:
        if rnd.random() < 0.25:
            continue
        out[str(q["uid"])] = [rnd.choice([0.0, rnd.random() * 0.2, rnd.random(), rnd.random() * 1.5]) for _ in RES]
    return out


@pytest.mark.slow
def test_fair_share_with_usage_matches_kai() -> None:
    """Time-based fair share: the same random forests with random historical usage and kValue."""
    rnd = random.Random(20261123)
    cases: list[Case] = []
    for _ in range(N_TREES // 2):
        total, queues = random_tree(rnd)
        cases.append((total, queues, rnd.choice([0.0, 0.5, 1.0, 2.0, 10.0]), random_usage(rnd, queues)))
    mismatches = differences(cases)
    assert not mismatches, f"{len(mismatches)} differences, first: {mismatches[:5]}"

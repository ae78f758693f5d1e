"""KAI's fair-share division (proportion plugin), resource by resource, level by level.

Why replicate it step for step instead of a cleaner water-filling: operators compare our queue status with what KAI
would report, and the differential test holds us to KAI's own ``SetResourcesShare`` on random trees. The quirks are
kept on purpose: whole-unit rounding inside over-quota rounds, remembered fractions paid one unit each
(largest first, then older queue, then uid) even when the queue needs less than a unit, a deserved phase that may
overspend an oversubscribed parent, and ``-1`` meaning "the whole parent amount" for deserved and "no cap" for limits.
Over-quota buckets (queue priorities) each run their whole-unit rounds first, highest priority first; only then are
the remembered fractions paid, bucket by bucket, so a lower bucket's rounds come before a higher bucket's fractions.

Units are whatever the caller uses (the core passes GPUs, millicores and bytes); rounding is to whole units of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

UNLIMITED = -1.0
NUM_RESOURCES = 3  # gpu, cpu, memory (Resources field order)
_MAX_ROUNDS = 100_000  # float drift guard; KAI terminates on exact arithmetic, we never loop unbounded


@dataclass(slots=True)
class ShareQueue:
    """One queue's inputs and output for the division, per resource (index 0 gpu, 1 cpu, 2 memory)."""

    uid: str
    priority: int = 100
    created_at: float = 0.0
    deserved: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    max_allowed: list[float] = field(default_factory=lambda: [UNLIMITED, UNLIMITED, UNLIMITED])
    weight: list[float] = field(default_factory=lambda: [1.0, 1.0, 1.0])
    request: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # allocated + pending, subtree sum
    usage: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # normalised historical usage (0 = none)
    fair_share: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # output
    children: list[ShareQueue] = field(default_factory=list)

    def requestable(self, r: int) -> float:
        if self.max_allowed[r] == UNLIMITED:
            return self.request[r]
        return min(self.max_allowed[r], self.request[r])

    def remaining_requested(self, r: int) -> float:
        req = self.requestable(r)
        fs = self.fair_share[r]
        return 0.0 if req < fs else req - fs

    def satisfied(self, r: int) -> bool:
        fs = self.fair_share[r]
        if self.request[r] <= fs:
            return True
        return self.max_allowed[r] != UNLIMITED and self.max_allowed[r] <= fs


def divide_tree(total: Sequence[float], roots: Sequence[ShareQueue], k_value: float = 1.0) -> None:
    """Top-down: roots split ``total``; each queue's fair share is split among its children, recursively."""
    stack: list[tuple[list[float], Sequence[ShareQueue]]] = [(list(total), roots)]
    while stack:
        amount, level = stack.pop()
        if not level:
            continue
        for r in range(NUM_RESOURCES):
            divide_level(amount[r], level, r, k_value)
        for q in level:
            if q.children:
                stack.append((list(q.fair_share), q.children))


def divide_level(total: float, queues: Sequence[ShareQueue], r: int, k_value: float = 1.0) -> float:
    """Split ``total`` of resource ``r`` among sibling ``queues``; returns what is left undivided."""
    ordered = sorted(queues, key=lambda q: q.uid)
    for q in ordered:
        q.fair_share[r] = 0.0
    remaining = _deserved_phase(total, ordered, r)
    if remaining > 0:
        return _over_quota_phase(remaining, k_value, ordered, r)
    return 0.0


def _deserved_phase(total: float, queues: Sequence[ShareQueue], r: int) -> float:
    remaining = total
    for q in queues:
        deserved = q.deserved[r]
        if deserved == UNLIMITED:
            deserved = total
        amount = min(deserved, q.requestable(r))
        q.fair_share[r] += amount
        remaining -= amount
    return remaining


def _over_quota_phase(total: float, k_value: float, queues: Sequence[ShareQueue], r: int) -> float:
    buckets: dict[int, list[ShareQueue]] = {}
    for q in queues:
        buckets.setdefault(q.priority, []).append(q)
    remaining = total
    order = sorted(buckets, reverse=True)
    fractions: dict[int, dict[str, tuple[ShareQueue, float]]] = {}
    # every bucket gets its whole-unit rounds first (highest priority first) ...
    for priority in order:
        remaining, fractions[priority] = _rounds(remaining, k_value, buckets[priority], r)
    # ... and only then are the remembered fractions paid, again highest priority first
    for priority in order:
        if remaining <= 0:
            break
        if fractions[priority]:
            remaining = _pay_fractions(remaining, fractions[priority], r)
    return remaining


def _share_weights(queues: Sequence[ShareQueue], r: int, k_value: float) -> tuple[dict[str, float], float]:
    total_weights = 0.0
    for q in queues:
        if q.remaining_requested(r) > 0:
            total_weights += q.weight[r]
    if total_weights == 0:
        return {}, 0.0
    weights: dict[str, float] = {}
    weight_sum = 0.0
    for q in queues:
        if q.satisfied(r):
            continue
        nw = q.weight[r] / total_weights
        w = max(0.0, nw + k_value * (nw - q.usage[r]))
        weights[q.uid] = w
        weight_sum += w
    return weights, weight_sum


def _rounds(
    total: float, k_value: float, queues: Sequence[ShareQueue], r: int
) -> tuple[float, dict[str, tuple[ShareQueue, float]]]:
    fractions: dict[str, tuple[ShareQueue, float]] = {}
    for _ in range(_MAX_ROUNDS):
        another_round = False
        to_give = total
        weights, weight_sum = _share_weights(queues, r, k_value)
        if weight_sum == 0:
            break
        for q in queues:
            if total == 0:
                break
            if q.satisfied(r):
                continue
            requested = q.remaining_requested(r)
            if q.weight[r] == 0:
                continue
            share = to_give * (weights[q.uid] / weight_sum)
            give = 0.0
            if requested <= share:
                give = requested
                fractions.pop(q.uid, None)
            else:
                whole = math.floor(share)
                if whole > 0:
                    give = whole
                if share - give > 0:
                    fractions[q.uid] = (q, share - give)
            if give == 0:
                continue
            q.fair_share[r] += give
            total -= give
            another_round = another_round or requested < share
        if not another_round or total == 0:
            break
    return total, fractions


def _pay_fractions(total: float, fractions: dict[str, tuple[ShareQueue, float]], r: int) -> float:
    order = sorted(fractions.values(), key=lambda e: (-e[1], e[0].created_at, e[0].uid))
    for q, _ in order:
        if total == 0:
            break
        give = min(1.0, total)
        q.fair_share[r] += give
        total -= give
    return total


def allocatable_share(deserved: float, fair_share: float, max_allowed: float) -> float:
    """KAI's GetAllocatableShare: max(deserved, fair share) capped by the limit; unlimited deserved => the limit."""
    if deserved == UNLIMITED:
        return max_allowed
    out = max(deserved, fair_share)
    if max_allowed != UNLIMITED:
        out = min(max_allowed, out)
    return out

"""The queue tree: validated once per cycle, never raising.

Why validate here and not only at the API boundary: the core is fed by several adapters (operators, simulator,
benchmarks, YAML scenarios) and must keep scheduling the healthy part of a cluster when one queue is broken. Bad
input becomes a :class:`Finding`; the queue is repaired (negative quota => 0) or cut off (unknown parent, cycle), and
jobs in a cut-off queue get a pending reason instead of crashing the cycle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kai_ray.scheduler.decisions import Finding
from kai_ray.scheduler.snapshot import UNLIMITED, Preemptibility, Queue, Resources

RES_NAMES = ("gpu", "cpu", "memory")


def res_list(r: Resources) -> list[float]:
    return [r.gpu, r.cpu, r.memory]


@dataclass(slots=True)
class QueueNode:
    idx: int
    name: str
    parent: int  # -1: top-level
    priority: int
    quota: list[float]
    limit: list[float]
    weight: list[float]
    created_at: float
    uid: str
    preempt_min_runtime: float | None
    reclaim_min_runtime: float | None
    default_preemptibility: Preemptibility | None = None
    admission_gating: bool = False  # opted in to the queue-admission gate (Queue.admission_gating)
    children: list[int] = field(default_factory=list)
    chain: list[int] = field(default_factory=list)  # self, parent, ..., top-level

    @property
    def is_leaf(self) -> bool:
        return not self.children


@dataclass(slots=True)
class QueueTree:
    nodes: list[QueueNode]
    by_name: dict[str, int]
    roots: list[int]
    invalid: dict[str, str]  # queue name -> why it is cut off from the tree
    findings: list[Finding]

    def get(self, name: str) -> QueueNode | None:
        i = self.by_name.get(name)
        return None if i is None else self.nodes[i]


def _clean(values: list[float], name: str, fld: str, floor_value: float, findings: list[Finding]) -> list[float]:
    out = []
    for res, v in zip(RES_NAMES, values, strict=True):
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            findings.append(
                Finding("Queue", name, f"{fld}.{res}", f"{fld}.{res} is not a finite number; using {floor_value}")
            )
            out.append(floor_value)
        elif v < 0 and v != UNLIMITED:
            findings.append(
                Finding(
                    "Queue",
                    name,
                    f"{fld}.{res}",
                    f"{fld}.{res}={v} is negative (only -1 is allowed); using {floor_value}",
                )
            )
            out.append(floor_value)
        else:
            out.append(float(v))
    return out


def build_queue_tree(queues: list[Queue]) -> QueueTree:
    findings: list[Finding] = []
    raw: dict[str, Queue] = {}
    for q in queues:
        if not q.name:
            findings.append(Finding("Queue", "", "name", "queue without a name ignored"))
            continue
        if q.name in raw:
            findings.append(Finding("Queue", q.name, "name", "duplicate queue name; the first definition is used"))
            continue
        raw[q.name] = q

    invalid: dict[str, str] = {}
    # unknown parents and cycles: walk each chain once
    for name, q in raw.items():
        seen = [name]
        cur = q
        while cur.parent:
            if cur.parent not in raw:
                invalid[name] = f"ancestor queue {cur.parent!r} does not exist"
                if cur is q:
                    msg = f"parent queue {cur.parent!r} does not exist"
                    findings.append(Finding("Queue", name, "parentQueue", msg))
                break
            if cur.parent in seen:
                invalid[name] = f"queue parents form a cycle through {cur.parent!r}"
                if name in seen[seen.index(cur.parent) :]:
                    findings.append(Finding("Queue", name, "parentQueue", f"cycle: {' -> '.join([*seen, cur.parent])}"))
                break
            seen.append(cur.parent)
            cur = raw[cur.parent]
        if name in invalid and not any(f.name == name and f.field == "parentQueue" for f in findings):
            findings.append(Finding("Queue", name, "parentQueue", invalid[name]))  # a descendant: unusable too

    nodes: list[QueueNode] = []
    by_name: dict[str, int] = {}
    for name in sorted(raw):
        if name in invalid:
            continue
        q = raw[name]
        quota = _clean(res_list(q.quota), name, "quota", 0.0, findings)
        limit = _clean(res_list(q.limit), name, "limit", 0.0, findings)
        raw_w = res_list(q.over_quota_weight)
        weight = [w if 0 <= w < math.inf else 0.0 for w in raw_w]
        if weight != raw_w:
            findings.append(
                Finding("Queue", name, "overQuotaWeight", "negative or non-finite overQuotaWeight; using 0")
            )
        by_name[name] = len(nodes)
        nodes.append(
            QueueNode(
                idx=len(nodes),
                name=name,
                parent=-1,
                priority=int(q.priority),
                quota=quota,
                limit=limit,
                weight=weight,
                created_at=float(q.created_at),
                uid=q.uid or name,
                preempt_min_runtime=q.preempt_min_runtime,
                reclaim_min_runtime=q.reclaim_min_runtime,
                default_preemptibility=q.default_preemptibility,
                admission_gating=bool(q.admission_gating),
            )
        )
    roots: list[int] = []
    for n in nodes:
        parent = raw[n.name].parent
        if parent:
            n.parent = by_name[parent]
            nodes[n.parent].children.append(n.idx)
        else:
            roots.append(n.idx)
    for n in nodes:
        chain = [n.idx]
        p = n.parent
        while p >= 0:
            chain.append(p)
            p = nodes[p].parent
        n.chain = chain
    return QueueTree(nodes=nodes, by_name=by_name, roots=roots, invalid=invalid, findings=findings)

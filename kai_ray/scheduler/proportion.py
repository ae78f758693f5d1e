"""Fair share of every queue for this cycle (KAI's proportion plugin session-open step).

Capacity is the allocatable of Ready nodes; requests are allocated + pending, summed up the tree (pending pods beyond
an elastic ceiling are not requested; pods held only by the queue-admission gate are: a gated backlog is demand an
autoscaler cannot see, and KAI's design counts it so the queue still gets its share); each queue's historical usage
comes with the snapshot (0 when the adapter keeps none); the division itself lives in :mod:`fairshare`.
"""

from __future__ import annotations

from kai_ray.scheduler.fairshare import ShareQueue, divide_tree
from kai_ray.scheduler.session import Session
from kai_ray.scheduler.snapshot import ZERO, Resources


def compute_fair_share(ses: Session) -> None:
    tree = ses.tree
    usage = ses.snapshot.usage or {}
    shares = [
        ShareQueue(
            uid=n.uid,
            priority=n.priority,
            created_at=n.created_at,
            deserved=list(n.quota),
            max_allowed=list(n.limit),
            weight=list(n.weight),
            request=list(ses.q_request[n.idx]),
            usage=list(_vector(usage.get(n.name, ZERO))),
        )
        for n in tree.nodes
    ]
    for n in tree.nodes:
        shares[n.idx].children = [shares[c] for c in n.children]
    divide_tree(ses.capacity, [shares[r] for r in tree.roots], ses.cfg.k_value)
    ses.q_fair = [list(s.fair_share) for s in shares]


def _vector(u: Resources) -> tuple[float, float, float]:
    return (u.gpu, u.cpu, u.memory)

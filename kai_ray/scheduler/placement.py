"""Node predicates and node scoring.

Why masks: a cycle places thousands of pods on thousands of nodes. The static predicates (ready, cordon, taints,
node selector, required affinity) depend only on the pod's scheduling signature, so they are evaluated once per
distinct signature into a boolean array and combined with the live free-resource arrays by numpy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kai_ray.scheduler.snapshot import Node, NodeSelectorRequirement, Pod, Taint, Toleration

Signature = tuple[object, ...]


def signature(pod: Pod) -> Signature:
    return (
        tuple(sorted(pod.node_selector.items())),
        tuple(tuple((r.key, r.operator, tuple(r.values)) for r in term) for term in pod.required_affinity),
        tuple((t.key, t.operator, t.value, t.effect) for t in pod.tolerations),
    )


def tolerates(tolerations: Sequence[Toleration], taint: Taint) -> bool:
    for t in tolerations:
        if t.effect and t.effect != taint.effect:
            continue
        if t.operator == "Exists":
            if not t.key or t.key == taint.key:
                return True
        elif t.key == taint.key and t.value == taint.value:
            return True
    return False


def _match_requirement(labels: dict[str, str], req: NodeSelectorRequirement) -> bool:
    op = req.operator
    present = req.key in labels
    if op == "In":
        return present and labels[req.key] in req.values
    if op == "NotIn":
        return not present or labels[req.key] not in req.values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        if not present or len(req.values) != 1:
            return False
        try:
            have, want = int(labels[req.key]), int(req.values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def node_static_fit(node: Node, pod: Pod) -> str | None:
    """None when the node passes every static predicate for the pod, else the failing predicate's name."""
    if not node.ready:
        return "NodeNotReady"
    if node.unschedulable:
        return "NodeUnschedulable"
    for taint in node.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not tolerates(pod.tolerations, taint):
            return "TaintNotTolerated"
    for k, v in pod.node_selector.items():
        if node.labels.get(k) != v:
            return "NodeSelectorMismatch"
    if pod.required_affinity and not any(
        all(_match_requirement(node.labels, r) for r in term) for term in pod.required_affinity
    ):
        return "NodeAffinityMismatch"
    return None


class StaticMasks:
    """Per-signature boolean arrays over the node list, computed lazily and cached for the cycle."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.nodes = nodes
        self._cache: dict[Signature, np.ndarray] = {}
        base = np.array([n.ready and not n.unschedulable for n in nodes], dtype=bool)
        self._untainted = base & np.array(
            [not any(t.effect in ("NoSchedule", "NoExecute") for t in n.taints) for n in nodes], dtype=bool
        )

    def mask(self, pod: Pod) -> np.ndarray:
        sig = signature(pod)
        m = self._cache.get(sig)
        if m is None:
            if sig == ((), (), ()):
                m = self._untainted
            else:
                m = np.array([node_static_fit(n, pod) is None for n in self.nodes], dtype=bool)
            self._cache[sig] = m
        return m

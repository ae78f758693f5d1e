"""What every scenario of the Karpenter lane starts with: pods kai-ray cannot place, Karpenter buying nodes for them,
kai-ray binding them there; one body, so the scenarios differ only in what they do with the nodes bought."""

from __future__ import annotations

from kai_ray.k8s.base.rest import Kube, podgroups_path, pods_path
from kai_ray.testing.controlplane.karpenter import Karpenter
from tests.k8s.helpers import bound, pod_body, podgroup_body, wait_until

BUY = 180  # seconds for Karpenter to batch, create NodeClaims, KWOK to make the nodes Ready, kai-ray to bind


def gang(kube: Kube, ns: str, name: str, queue: str, n: int, gpus: int, selector: dict[str, str]) -> list[str]:
    """A PodGroup of ``n`` pods of ``gpus`` GPUs each, every pod selecting ``selector`` (the autoscaled nodes)."""
    kube.create(podgroups_path(ns), podgroup_body(name, n, queue))
    names = []
    for i in range(n):
        body = pod_body(f"{name}-{i}", gpus, group=name)
        body["spec"]["nodeSelector"] = dict(selector)
        kube.create(pods_path(ns), body)
        names.append(f"{name}-{i}")
    return names


def bound_on_bought_nodes(
    kube: Kube, ns: str, pods: list[str], karpenter: Karpenter, created_before: int, claims: int
) -> dict[str, str]:
    """Wait until every one of ``pods`` is bound on a node Karpenter bought, and check Karpenter created exactly
    ``claims`` NodeClaims since ``created_before`` (its counter then); returns pod -> node."""
    placed = wait_until(
        f"Karpenter to buy nodes and kai-ray to bind {', '.join(pods)} on them",
        lambda: (lambda b: b if len(b) == len(pods) else None)(bound(kube, ns, pods)),
        BUY,
        interval=0.5,
    )
    bought = {n["metadata"]["name"] for n in karpenter.nodes()}
    assert set(placed.values()) <= bought, f"bound on {placed}, Karpenter's nodes {sorted(bought)}"
    assert karpenter.claims_created() - created_before == claims
    return placed


def consolidated(karpenter: Karpenter, node: str) -> None:
    """Wait until Karpenter has removed ``node`` (emptied), its NodeClaim included."""
    wait_until(
        f"Karpenter to consolidate the emptied node {node}",
        lambda: (
            node not in {n["metadata"]["name"] for n in karpenter.nodes()}
            and all((claim.get("status") or {}).get("nodeName") != node for claim in karpenter.node_claims())
        ),
        BUY,
        interval=0.5,
    )

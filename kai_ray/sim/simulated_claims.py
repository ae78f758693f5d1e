"""The DRA adapter's part in the simulated world: the claims of the pods that exist, and their allocations.

Why: a live cluster's ResourceClaims come from templates with their pods and go with them; the core reads them from
the snapshot and answers with allocations that the adapter writes back before binding. The simulator plays that
adapter here.
"""

from __future__ import annotations

from kai_ray.scheduler.decisions import Bind
from kai_ray.scheduler.device_ledger import Claim
from kai_ray.scheduler.snapshot import PodPhase
from kai_ray.sim.workloads import WorkloadBase


def live_claims(active: dict[str, WorkloadBase], claims: dict[str, Claim]) -> dict[str, Claim]:
    """The claims of the pods that exist (a claim made from a template goes with its pod, releasing its devices),
    each kept from ``claims`` with its allocation; a new pod's claims are made from its template, unallocated."""
    live: dict[str, Claim] = {}
    for w in active.values():
        if w.job is None:
            continue
        for pod in w.job.pods:
            if not pod.claims or pod.phase in (PodPhase.SUCCEEDED, PodPhase.FAILED):
                continue
            for key, requests in w.claim_requests(pod).items():
                live[key] = claims.get(key) or Claim(key=key, requests=requests)
    return live


def write_allocations(b: Bind, claims: dict[str, Claim]) -> None:
    """Write each of a bind's claim allocations onto its claim, as the adapter does before binding the pod."""
    for alloc in b.claims:
        claim = claims.get(alloc.claim)
        if claim is not None and claim.allocation is None:
            per: dict[str, tuple[str, ...]] = {}
            for req, dev in alloc.devices:
                per[req] = (*per.get(req, ()), dev)
            claim.allocation = per

"""A Queue CRD that prunes the status kai-ray writes: the reporter writes what is left instead of failing its cycle."""

from __future__ import annotations

from kai_ray.k8s.base.pruning import PruneGuard
from kai_ray.k8s.scheduling.reporting import queue_status_to_send

STATUS = {
    "allocated": {"gpu": 2},
    "conditions": [{"type": "Valid", "status": "True", "message": "", "reason": "Valid"}],
}


def _guard(pruned_status: dict[str, object]) -> PruneGuard:
    guard = PruneGuard()
    guard.check("Queue", {"status": STATUS}, pruned_status)
    return guard


def test_nothing_pruned_keeps_status_and_validity() -> None:
    sent, compare = queue_status_to_send(PruneGuard(), dict(STATUS))
    assert sent == STATUS
    assert compare == {"allocated": {"gpu": 2}, "valid": [("True", "")]}


def test_whole_status_pruned_sends_nothing() -> None:
    sent, compare = queue_status_to_send(_guard({}), dict(STATUS))
    assert sent == {}
    assert compare == {"valid": []}


def test_conditions_pruned_keeps_the_rest() -> None:
    sent, compare = queue_status_to_send(_guard({"status": {"allocated": {"gpu": 2}}}), dict(STATUS))
    assert sent == {"allocated": {"gpu": 2}}
    assert compare == {"allocated": {"gpu": 2}, "valid": []}

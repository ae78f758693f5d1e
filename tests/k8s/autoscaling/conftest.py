"""One Karpenter (its KWOK cloud provider) for the whole module: starting it costs seconds, and its nodes carry a
batch label of their own, so the scheduler under test sees exactly the nodes Karpenter bought (plus the static ones a
test gives the same label).

Each test starts with Karpenter owning no node: a test hands back the nodes it bought when it ends (their NodeClaims
deleted), and the next waits until Karpenter has removed them; a test that began while they still stood would see
Karpenter put its pending pods on them instead of buying."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from kai_ray.testing.controlplane.harness import NODE_BATCH_LABEL, ControlPlane
from kai_ray.testing.controlplane.karpenter import Karpenter
from tests.k8s.helpers import wait_until


@pytest.fixture(scope="module")
def karpenter_module(control_plane: ControlPlane) -> Iterator[Karpenter]:
    with Karpenter(control_plane, labels={NODE_BATCH_LABEL: f"karpenter-{uuid.uuid4().hex[:6]}"}) as k:
        yield k


@pytest.fixture
def karpenter(karpenter_module: Karpenter) -> Iterator[Karpenter]:
    wait_until(
        "Karpenter to remove the nodes an earlier test bought",
        lambda: not karpenter_module.node_claims() and not karpenter_module.nodes(),
        180,
        interval=0.5,
    )
    yield karpenter_module
    karpenter_module.set_gpu_limit(karpenter_module.gpu_limit)
    karpenter_module.release_nodes()

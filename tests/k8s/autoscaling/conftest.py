"""One Karpenter (its KWOK cloud provider) for the whole module: starting it costs seconds, and its nodes carry a
batch label of their own, so the scheduler under test sees exactly the nodes Karpenter bought (plus the static ones a
test gives the same label)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from kai_ray.testing.controlplane.harness import NODE_BATCH_LABEL, ControlPlane
from kai_ray.testing.controlplane.karpenter import Karpenter


@pytest.fixture(scope="module")
def karpenter(control_plane: ControlPlane) -> Iterator[Karpenter]:
    with Karpenter(control_plane, labels={NODE_BATCH_LABEL: f"karpenter-{uuid.uuid4().hex[:6]}"}) as k:
        yield k

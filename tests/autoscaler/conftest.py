"""Fixtures for the autoscaler-hook and elastic-reclaim tests: a raw-JSON client on the real test control plane, and
isolated Ray environments (token auth off, HOME and RAY_TMPDIR in a temporary directory)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kai_ray.controlplane.harness import ControlPlane
from kai_ray.k8s.rest import Kube


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane) -> Iterator[Kube]:
    k = Kube(control_plane.api_client(pool_size=8))
    yield k
    k.close()

"""pytest fixtures for the real test control plane (imported by ``tests/conftest.py``).

- ``control_plane`` (session): a started :class:`~kai_ray.testing.controlplane.harness.ControlPlane` with our
  Queue/PodGroup
  CRDs and KubeRay's CRDs installed and Established. One per pytest run: starting one costs seconds, not minutes, but
  on two cores it is still the slowest thing a test can do.
- ``kube_api`` (session): a ``kubernetes.client.ApiClient`` for it.
- ``namespace`` (function): a fresh namespace per test; its pods (grace 0) and PodGroups are deleted afterwards so
  bound pods do not keep occupying KWOK nodes.
- ``gpu_nodes`` (function): a factory ``gpu_nodes(n, **kwargs) -> list[str]`` over
  :meth:`ControlPlane.create_gpu_nodes`; the nodes are deleted after the test.

Every test that uses ``control_plane`` (directly or through another fixture) gets the ``controlplane`` marker, so
``pytest -m "not controlplane"`` runs the rest without building or starting anything. Tests marked ``realnode``
(``tests/realnode``: a real kubelet + containerd node) run last.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kai_ray.testing.controlplane.harness import ControlPlane, kuberay_crd_files, our_crd_dir


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the control plane's users ``controlplane``, and run the ``realnode`` lane after everything else: it is
    the slowest, and the KWOK tests should report first."""
    for item in items:
        if "control_plane" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.controlplane)
    items.sort(key=lambda item: item.get_closest_marker("realnode") is not None)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    plane = ControlPlane(crds=[our_crd_dir(), *kuberay_crd_files()])
    with plane:
        yield plane


@pytest.fixture(scope="session")
def kube_api(control_plane: ControlPlane) -> Iterator[Any]:
    client = control_plane.api_client()
    yield client
    client.close()


def _dns_prefix(name: str) -> str:
    cleaned = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    return (cleaned[:40].rstrip("-") or "test").removeprefix("test-") or "test"


@pytest.fixture
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    name = control_plane.new_namespace(prefix=_dns_prefix(request.node.name))
    yield name
    control_plane.clear_namespace(name)


@pytest.fixture
def gpu_nodes(control_plane: ControlPlane) -> Iterator[Callable[..., list[str]]]:
    created: list[str] = []

    def make(n: int, **kwargs: Any) -> list[str]:
        names = control_plane.create_gpu_nodes(n, **kwargs)
        created.extend(names)
        return names

    yield make
    control_plane.delete_nodes(created)

"""Fixtures for the autoscaler-hook tests (and, through tests/k8s/ray/conftest.py, the Ray-aware reclaim tests): a
raw-JSON client on the real test control plane, and isolated Ray environments (token auth off, RAY_TMPDIR in a
temporary directory)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kai_ray.k8s.base.rest import Kube
from kai_ray.testing.controlplane.harness import ControlPlane


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane) -> Iterator[Kube]:
    k = Kube(control_plane.api_client(pool_size=8))
    yield k
    k.close()


OBJECT_STORE = 80 * 1024 * 1024


def _procs_mentioning(text: str) -> list[int]:
    """Live processes whose command line mentions ``text`` (our Ray temp dir: only processes we started)."""
    found = []
    needle = text.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if needle in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


@pytest.fixture
def ray_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Environment for real Ray processes: token auth off (so nothing is written to ~/.ray), RAY_TMPDIR in a fresh
    short temp dir (Unix socket paths must stay short). HOME stays: the control plane's binary cache lives there.
    Afterwards, asserts every process started under the temp dir is gone and that ~/.ray was not created."""
    pytest.importorskip("ray")
    root = Path(tempfile.mkdtemp(prefix="kr-", dir="/tmp"))
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    home_ray = Path.home() / ".ray"
    had_home_ray = home_ray.exists()
    monkeypatch.setenv("RAY_TMPDIR", str(root))
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    yield root
    deadline = time.monotonic() + 20
    left = _procs_mentioning(str(root))
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = _procs_mentioning(str(root))
    for pid in left:  # started by this test (their command line names its temp dir); report, then clean up
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(root, ignore_errors=True)
    assert not left, f"Ray processes left running after the test: {left}"
    assert had_home_ray or not home_ray.exists(), f"Ray wrote {home_ray}"


@pytest.fixture
def ray_cluster(ray_env: Path) -> Iterator[Callable[..., Any]]:
    """``ray_cluster(**head_args)`` starts a ``ray.cluster_utils.Cluster`` (head: 0 CPUs, small object store, no
    dashboard); every cluster started is shut down afterwards, and the driver disconnected."""
    import ray
    from ray.cluster_utils import Cluster

    started: list[Any] = []

    def start(**head_args: Any) -> Any:
        args = {"num_cpus": 0, "object_store_memory": OBJECT_STORE, "include_dashboard": False, **head_args}
        cluster = Cluster(initialize_head=True, head_node_args=args)
        started.append(cluster)
        return cluster

    yield start
    ray.shutdown()
    for cluster in started:
        cluster.shutdown()

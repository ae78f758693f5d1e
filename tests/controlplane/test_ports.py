"""Ports for the loopback control plane: distinct within a process, and a start that lost its port starts again."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from kai_ray.testing.controlplane import harness
from kai_ray.testing.controlplane.harness import ControlPlane
from kai_ray.testing.controlplane.processes import free_port


def test_free_port_never_hands_the_same_port_twice() -> None:
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)


def test_etcd_taken_port_is_retried_on_fresh_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process binds etcd's chosen port before etcd does: the start picks fresh ports and comes up."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]

        def ports() -> Iterator[int]:
            yield taken
            while True:
                yield free_port()

        handed = ports()
        monkeypatch.setattr(harness, "free_port", lambda host="127.0.0.1": next(handed))
        with ControlPlane(kwok=False) as cp:
            assert cp.etcd_port != taken
            assert cp.components["etcd"].alive()
            assert cp.workdir is not None
            assert "address already in use" in (cp.workdir / "logs" / "etcd.log").read_text()

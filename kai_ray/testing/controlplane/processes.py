"""Child processes of a test control plane: starting one in its own process group, waiting for it, stopping it.

Why apart from :mod:`~kai_ray.testing.controlplane.harness`: the control plane, the real-node lane, Karpenter and the
KAI-vs-kai-ray benchmark all run binaries the same way, and none of that depends on what the binary is. Every child gets
a log file, its own session (so its whole group can be signalled) and, from the main thread, a parent-death signal so
that no orphan outlives a SIGKILLed test session.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

T = TypeVar("T")


class ControlPlaneError(RuntimeError):
    """The control plane could not start or a bounded wait ran out; the message carries the relevant log tail."""


_HANDED_OUT: collections.deque[int] = collections.deque(maxlen=1024)
_HANDED_OUT_LOCK = threading.Lock()


def free_port(host: str = "127.0.0.1") -> int:
    """A currently free TCP port on ``host`` that this process has not handed out lately.

    The OS may give a just-closed port again at once, so two calls in a row (etcd's client and peer ports) could
    return the same number and the second listener would fail to bind; remembering the last thousand ports handed out
    keeps one process's ports distinct. Another process can still take a port before it is used: callers start
    promptly, and the control plane retries a start that lost its port.
    """
    with _HANDED_OUT_LOCK:
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((host, 0))
                port = int(s.getsockname()[1])
            if port not in _HANDED_OUT:
                _HANDED_OUT.append(port)
                return port


def wait_for(
    what: str, check: Callable[[], T | None], timeout: float, interval: float = 0.1, on_timeout: str = ""
) -> T:
    """Poll ``check`` until it returns something other than None/False; raise ControlPlaneError after ``timeout``."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            result = check()
            if result is not None and result is not False:
                return result
        except ControlPlaneError:
            raise
        except Exception as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            raise ControlPlaneError(f"timed out after {timeout:.0f}s waiting for {what}{detail}{on_timeout}")
        time.sleep(interval)


def _decode_proc_addr(hex_addr: str) -> tuple[str, int]:
    host, port = hex_addr.split(":")
    raw = bytes.fromhex(host)
    # /proc/net/tcp{,6} prints each 32-bit word in host (little-endian) order.
    raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    family = socket.AF_INET if len(raw) == 4 else socket.AF_INET6
    return socket.inet_ntop(family, raw), int(port, 16)


def listening_sockets(pid: int) -> list[tuple[str, int]]:
    """(address, port) of the TCP sockets process ``pid`` listens on."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                link = os.readlink(fd)
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
    found = []
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) > 9 and parts[3] == "0A" and parts[9] in inodes:
                found.append(_decode_proc_addr(parts[1]))
    return found


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child between fork and exec: SIGKILL it if the parent (thread) dies, so no orphan survives."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class Component:
    """One child process, in its own process group, logging to a file."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError as exc:
            return f"(no log: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    def rss_bytes(self) -> int:
        """Resident set size now, from /proc (0 if gone)."""
        try:
            for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def listening(self) -> list[tuple[str, int]]:
        """(address, port) of every TCP socket this process listens on, from /proc; used to prove loopback-only."""
        return listening_sockets(self.popen.pid)

    def failure(self, what: str) -> ControlPlaneError:
        state = "running" if self.alive() else f"exited with code {self.popen.returncode}"
        return ControlPlaneError(f"{self.name} {what} ({state}); last lines of {self.log}:\n{self.tail()}")

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the process group, then SIGKILL it if the leader has not exited after ``grace`` seconds.

        The group is only signalled while its leader is unreaped, so its id cannot have been reused by anyone else.
        """
        if self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=5)


class Stoppable(Protocol):
    def stop(self) -> object: ...


class StopAtExit:
    """What is still running when the interpreter exits normally, stopped then: a test session that dies between a
    start and its fixture's teardown must not leave a control plane or a real node behind. Shared by
    :class:`ControlPlane` and the real-node lane so both keep one registry shape and one lock discipline."""

    def __init__(self) -> None:
        self._live: list[Stoppable] = []
        self._lock = threading.Lock()
        atexit.register(self.stop_all)

    def add(self, thing: Stoppable) -> None:
        with self._lock:
            if not any(t is thing for t in self._live):
                self._live.append(thing)

    def discard(self, thing: Stoppable) -> None:
        with self._lock:
            self._live = [t for t in self._live if t is not thing]

    def stop_all(self) -> None:
        with self._lock:
            live = list(reversed(self._live))
        for thing in live:
            with contextlib.suppress(Exception):
                thing.stop()


def spawn(name: str, argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> Component:
    """Start ``argv`` in its own session, logging to ``cwd/logs/<name>.log`` (the command line heads the log)."""
    log = cwd / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as fh:
        fh.write(f"# {' '.join(argv)}\n".encode())
        fh.flush()
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env or dict(os.environ),
            start_new_session=True,
            # The parent-death signal is tied to the forking thread, so only use it from the main thread.
            preexec_fn=_die_with_parent if threading.current_thread() is threading.main_thread() else None,
        )
    return Component(name, popen, log)


def await_ready(comp: Component, what: str, ready: Callable[[], bool], timeout: float) -> Component:
    """Wait for a started component's probe; one that never answers is stopped and its log's end raised."""
    try:
        wait_for(what, ready, timeout, interval=0.2)
    except ControlPlaneError as exc:
        comp.stop()
        if "last lines" in str(exc):
            raise
        raise comp.failure(f"did not become ready: {exc}") from None
    return comp

"""Start a real kube-apiserver + etcd + KWOK on loopback, for tests, benchmarks and debugging.

Why not envtest or kind: there is no Docker here and no release downloads, only the Go module proxy, so the binaries
come from :mod:`kai_ray.testing.controlplane.build`. This module owns everything around them: PKI, a token kubeconfig,
process
lifetimes (each in its own process group, killed on exit, with a parent-death signal as a last resort), bounded
readiness waits, and helpers that tests need (fake GPU nodes, CRDs, namespaces, the real KubeRay operator).

Run one by hand (``--once`` prints timings and RSS as JSON and stops)::

    python -m kai_ray.testing.controlplane.harness --nodes 3
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import ctypes
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, TypeVar

import yaml

from kai_ray.testing.controlplane import build, pki

ADMIN_USER = "admin"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_VALUE = "fake"
NODE_BATCH_LABEL = "kai-ray.test/node-batch"
GPU_RESOURCE = "nvidia.com/gpu"
FIELD_MANAGER = "kai-ray-controlplane"
SERVICE_CIDR = "10.0.0.0/24"
POD_CIDR = "10.244.0.0/16"

KWOK_STAGES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)

T = TypeVar("T")


class ControlPlaneError(RuntimeError):
    """The control plane could not start or a bounded wait ran out; the message carries the relevant log tail."""


def repo_root() -> Path:
    return Path(__file__).resolve().parents[3]


def our_crd_dir() -> Path:
    """kai-ray's CRDs (Queue, PodGroup), shipped in the Helm chart: the harness is test tooling and runs from a
    checkout (``KAI_RAY_CRD_DIR`` points elsewhere)."""
    path = Path(os.environ.get("KAI_RAY_CRD_DIR") or repo_root() / "helm" / "kai-ray" / "crds")
    if not path.is_dir():
        raise ControlPlaneError(
            f"kai-ray's CRDs are not at {path}: run from a kai-ray checkout (helm/kai-ray/crds) or set KAI_RAY_CRD_DIR"
        )
    return path


def _kai_crd(name: str) -> Path:
    path = build.module_dir(build.KAI_MODULE, build.KAI_VERSION) / "deployments" / "kai-scheduler" / "crds" / name
    if not path.is_file():
        raise ControlPlaneError(f"KAI module {build.KAI_VERSION} lacks {path}")
    return path


def kai_crd_files() -> list[Path]:
    """KAI Scheduler's own Queue and PodGroup CRDs, from its Go module (downloaded through the proxy, never built)."""
    return [_kai_crd(f"scheduling.run.ai_{plural}.yaml") for plural in ("queues", "podgroups")]


def kai_config_crd_file() -> Path:
    """KAI's operator ``Config`` CRD (``kai.scheduler/v1``), where a KAI install records its scheduler name."""
    return _kai_crd("kai.scheduler_configs.yaml")


@lru_cache(maxsize=1)
def kuberay_crd_dir() -> Path:
    """KubeRay's ``config/crd/bases`` from its Go module (downloaded through the proxy, never committed)."""
    path = build.module_dir(build.KUBERAY_MODULE, build.KUBERAY_VERSION) / "config" / "crd" / "bases"
    if not path.is_dir():
        raise ControlPlaneError(f"KubeRay module {build.KUBERAY_VERSION} has no {path}")
    return path


def kuberay_crd_files() -> list[Path]:
    """RayCluster, RayJob and RayService CRDs (not RayCronJob: alpha, off by default, and each CRD costs seconds)."""
    files = [kuberay_crd_dir() / f"ray.io_{plural}.yaml" for plural in ("rayclusters", "rayjobs", "rayservices")]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise ControlPlaneError(f"KubeRay module {build.KUBERAY_VERSION} lacks {', '.join(missing)}")
    return files


@lru_cache(maxsize=1)
def kwok_stage_files() -> list[Path]:
    """Stage files from the pinned KWOK module: v0.7 has built-in defaults, v0.8+ requires them, so always pass."""
    base = build.module_dir(build.KWOK_MODULE, build.KWOK_VERSION) / "kustomize" / "stage"
    files = [base / rel for rel in KWOK_STAGES]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise ControlPlaneError(f"KWOK {build.KWOK_VERSION} module lacks stage files: {', '.join(missing)}")
    return files


WORKDIR_PREFIX = "kai-ray-cp-"


def _sweep_stale_workdirs() -> None:
    """Remove temp dirs left by control planes whose owner was SIGKILLed (their processes died with it)."""
    for d in Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}*"):
        try:
            pid = int((d / "owner.pid").read_text())
        except (OSError, ValueError):
            continue
        if not Path(f"/proc/{pid}").exists():
            shutil.rmtree(d, ignore_errors=True)


def free_port(host: str = "127.0.0.1") -> int:
    """A currently free TCP port on ``host`` (the OS may hand it out again; callers start promptly)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


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


_LIVE = StopAtExit()


@dataclass
class Timings:
    """Seconds from the start of :meth:`ControlPlane.start`; for the report and the benchmarks."""

    pki: float = 0.0
    etcd_ready: float = 0.0
    apiserver_ready: float = 0.0
    kwok_ready: float = 0.0
    total: float = 0.0
    crds: float = 0.0  # duration of the CRD step (at start: after apiserver_ready; later: the last apply_crds)

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in self.__dict__.items()}


@dataclass(eq=False)
class ControlPlane:
    """etcd + kube-apiserver (+ KWOK) on 127.0.0.1, as a context manager.

    ``startup_timeout`` bounds each readiness wait; it is generous because a cold machine with two busy cores can take
    tens of seconds to bring the apiserver to ``/readyz``. ``keep_workdir`` keeps certs, data and logs after stop
    (also when ``KAI_RAY_KEEP_CONTROLPLANE=1``).

    ``crds`` (files or directories) are Established before :meth:`start` returns. Creating KubeRay's big CRDs costs
    the apiserver ~7 s of CPU (20-30 s of wall time on two busy cores), so by default the first start with a given
    set of CRDs builds an etcd data directory holding them, caches it under ``~/.cache/kai-ray/etcd-seed/`` keyed by
    the CRD contents and binary versions, and later starts begin from a fresh copy of it (``seed_cache=False`` or
    ``KAI_RAY_NO_ETCD_SEED=1`` creates them through the API every time).
    """

    kwok: bool = True
    host: str = "127.0.0.1"  # where the apiserver binds and advertises (a real node's bridge IP, so pods reach it)
    startup_timeout: float = 180.0
    workdir: Path | None = None
    keep_workdir: bool = field(default_factory=lambda: os.environ.get("KAI_RAY_KEEP_CONTROLPLANE") == "1")
    apiserver_extra_args: list[str] = field(default_factory=list)
    # Without a controller-manager no ServiceAccount exists, so its admission plugin is off unless a real node runs one.
    disabled_admission: tuple[str, ...] = ("ServiceAccount", "TaintNodesByCondition")
    kwok_log_level: str = field(default_factory=lambda: os.environ.get("KAI_RAY_KWOK_LOG_LEVEL", "WARN"))
    crds: Sequence[Path | str] = field(default_factory=list)
    seed_cache: bool = field(default_factory=lambda: os.environ.get("KAI_RAY_NO_ETCD_SEED") != "1")

    token: str = field(default="", init=False)
    apiserver_port: int = field(default=0, init=False)
    etcd_port: int = field(default=0, init=False)
    kwok_port: int = field(default=0, init=False)
    timings: Timings = field(default_factory=Timings, init=False)
    components: dict[str, Component] = field(default_factory=dict, init=False)
    _owns_workdir: bool = field(default=False, init=False)
    _pki: pki.Pki | None = field(default=None, init=False)
    _client: Any = field(default=None, init=False, repr=False)

    # --- lifecycle -------------------------------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        """Build (or reuse) the binaries, then start etcd, kube-apiserver and KWOK, waiting for each to be ready."""
        binaries = {name: build.ensure(name) for name in ("etcd", "kube-apiserver", *(("kwok",) if self.kwok else ()))}
        stages = kwok_stage_files() if self.kwok else []
        docs = list(_crd_documents(self.crds))
        seed = _etcd_seed(docs) if docs and self.seed_cache else None
        begin = time.monotonic()
        if self.workdir is None:
            _sweep_stale_workdirs()
            self.workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
            (self.workdir / "owner.pid").write_text(str(os.getpid()))
            self._owns_workdir = True
        self.workdir.mkdir(parents=True, exist_ok=True)
        _LIVE.add(self)
        try:
            self._pki = pki.generate(self.workdir / "pki", extra_ips=(self.host,))
            self.token = secrets.token_hex(24)
            (self.workdir / "tokens.csv").write_text(f'{self.token},{ADMIN_USER},uid-{ADMIN_USER},"system:masters"\n')
            (self.workdir / "tokens.csv").chmod(0o600)
            self.timings.pki = time.monotonic() - begin

            if seed is not None:
                shutil.copytree(seed, self.workdir / "etcd")
            self._start_etcd(binaries["etcd"])
            self.timings.etcd_ready = time.monotonic() - begin
            self._start_apiserver(binaries["kube-apiserver"])
            self.timings.apiserver_ready = time.monotonic() - begin
            self._write_kubeconfig()
            if docs:
                if seed is None:
                    self._apply_docs(docs)
                else:
                    self._wait_established([d["metadata"]["name"] for d in docs], timeout=self.startup_timeout)
                self.timings.crds = time.monotonic() - begin - self.timings.apiserver_ready
            if self.kwok:
                self._start_kwok(binaries["kwok"], stages)
            self.timings.kwok_ready = time.monotonic() - begin
            self.timings.total = time.monotonic() - begin
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every component in reverse start order (TERM, then KILL of its process group); idempotent."""
        for comp in reversed(list(self.components.values())):
            comp.stop()
        _LIVE.discard(self)
        if self._owns_workdir and self.workdir is not None and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Component:
        assert self.workdir is not None
        log = self.workdir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as fh:
            fh.write(f"# {' '.join(argv)}\n".encode())
            fh.flush()
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=env or dict(os.environ),
                start_new_session=True,
                # The parent-death signal is tied to the forking thread, so only use it from the main thread.
                preexec_fn=_die_with_parent if threading.current_thread() is threading.main_thread() else None,
            )
        comp = Component(name, popen, log)
        self.components[name] = comp
        return comp

    def _start_etcd(self, binary: Path) -> None:
        assert self.workdir is not None
        self.etcd_port = free_port()
        peer_port = free_port()
        data = self.workdir / "etcd"
        client_url = f"http://127.0.0.1:{self.etcd_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        comp = self._spawn(
            "etcd",
            [
                str(binary),
                "--name=kai-ray",
                f"--data-dir={data}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=kai-ray={peer_url}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync",
                "--log-level=warn",
                "--quota-backend-bytes=4294967296",
                "--auto-compaction-mode=periodic",
                "--auto-compaction-retention=5m",
            ],
        )

        def healthy() -> bool:
            if not comp.alive():
                raise comp.failure("exited during startup")
            with urllib.request.urlopen(f"{client_url}/health", timeout=2) as resp:
                return bool(json.loads(resp.read()).get("health") == "true")

        self._wait(comp, "to report /health", healthy)

    def _start_apiserver(self, binary: Path) -> None:
        assert self.workdir is not None and self._pki is not None
        self.apiserver_port = free_port(self.host)
        p = self._pki
        argv = [
            str(binary),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--etcd-prefix=/registry",
            f"--bind-address={self.host}",
            f"--advertise-address={self.host}",
            f"--secure-port={self.apiserver_port}",
            f"--cert-dir={self.workdir / 'pki'}",
            f"--tls-cert-file={p.serving_cert}",
            f"--tls-private-key-file={p.serving_key}",
            f"--client-ca-file={p.ca_cert}",
            f"--kubelet-client-certificate={p.kubelet_client_cert}",
            f"--kubelet-client-key={p.kubelet_client_key}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--token-auth-file={self.workdir / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={p.sa_pub}",
            f"--service-account-signing-key-file={p.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            f"--disable-admission-plugins={','.join(self.disabled_admission)}",
            "--enable-priority-and-fairness=false",
            "--max-requests-inflight=0",
            "--max-mutating-requests-inflight=0",
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            "--v=1",
            *self.apiserver_extra_args,
        ]
        comp = self._spawn("kube-apiserver", argv)
        url = f"{self.server}/readyz"
        ctx = self.ssl_context()

        def ready() -> bool:
            if not comp.alive():
                raise comp.failure("exited during startup")
            req = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.token}"})
            try:
                with urllib.request.urlopen(req, timeout=3, context=ctx) as resp:
                    return bool(resp.status == 200)
            except urllib.error.HTTPError:
                return False

        self._wait(comp, "to report /readyz", ready, interval=0.2)

    def _start_kwok(self, binary: Path, stages: list[Path]) -> None:
        self.kwok_port = free_port()
        argv = [
            str(binary),
            f"--kubeconfig={self.kubeconfig_path}",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_VALUE}",
            f"--cidr={POD_CIDR}",
            "--node-ip=10.0.0.1",
            "--node-lease-duration-seconds=40",
            f"--server-address=127.0.0.1:{self.kwok_port}",
            f"--v={self.kwok_log_level}",
        ]
        for stage in stages:
            argv.append(f"--config={stage}")
        env = dict(os.environ)
        env["KWOK_WORKDIR"] = str(self.workdir)  # keeps ~/.kwok untouched
        comp = self._spawn("kwok", argv, env=env)
        url = f"http://127.0.0.1:{self.kwok_port}/healthz"

        def healthy() -> bool:
            if not comp.alive():
                raise comp.failure("exited during startup")
            with urllib.request.urlopen(url, timeout=2) as resp:
                return bool(resp.status == 200)

        self._wait(comp, "to report /healthz", healthy)

    def start_kuberay_operator(
        self,
        batch_scheduler: str | None = "kai-scheduler",
        watch_namespace: str | None = None,
        extra_args: Iterable[str] = (),
        timeout: float = 120.0,
    ) -> Component:
        """Run the real KubeRay operator (built from its Go module) against this control plane until :meth:`stop`.

        Install the KubeRay CRDs first (:meth:`install_crds`). Leader election is off and the probe/metrics endpoints
        bind to loopback; ready once its ``/readyz`` answers.
        """
        if "kuberay-operator" in self.components and self.components["kuberay-operator"].alive():
            raise ControlPlaneError("the KubeRay operator is already running")
        binary = build.ensure("kuberay-operator")
        probe = free_port()
        argv = [
            str(binary),
            f"--kubeconfig={self.kubeconfig_path}",
            "--enable-leader-election=false",
            f"--health-probe-bind-address=127.0.0.1:{probe}",
            f"--metrics-addr=127.0.0.1:{free_port()}",
            "--qps=500",
            "--burst=1000",
        ]
        if batch_scheduler:
            argv.append(f"--batch-scheduler={batch_scheduler}")
        if watch_namespace:
            argv.append(f"--watch-namespace={watch_namespace}")
        argv.extend(extra_args)
        env = self.env()
        env.pop("ENABLE_WEBHOOKS", None)
        comp = self._spawn("kuberay-operator", argv, env=env)

        def ready() -> bool:
            if not comp.alive():
                raise comp.failure("exited during startup")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{probe}/readyz", timeout=2) as resp:
                    return bool(resp.status == 200)
            except urllib.error.HTTPError:
                return False

        return self._await_ready(comp, "kuberay-operator to report /readyz", ready, timeout)

    def start_controller_manager(
        self, controllers: Sequence[str] = ("job",), feature_gates: Sequence[str] = (), timeout: float = 120.0
    ) -> Component:
        """Run the real kube-controller-manager with only ``controllers`` (the Job controller by default) until
        :meth:`stop`, so a test sees what that controller itself creates (a Job's pods, its Workload and PodGroup
        under ``WorkloadWithJob``) instead of playing it. ``feature_gates``: ``Name=true`` entries."""
        if "kube-controller-manager" in self.components and self.components["kube-controller-manager"].alive():
            raise ControlPlaneError("kube-controller-manager is already running")
        assert self.workdir is not None and self._pki is not None
        binary = build.ensure("kube-controller-manager")
        port = free_port()
        argv = [
            str(binary),
            f"--kubeconfig={self.kubeconfig_path}",
            f"--authentication-kubeconfig={self.kubeconfig_path}",
            f"--authorization-kubeconfig={self.kubeconfig_path}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.workdir / 'kcm'}",
            f"--service-account-private-key-file={self._pki.sa_key}",
            f"--root-ca-file={self._pki.ca_cert}",
            "--use-service-account-credentials=false",
            "--leader-elect=false",
            f"--controllers={','.join(controllers)}",
            "--profiling=false",
            "--v=1",
            *([f"--feature-gates={','.join(feature_gates)}"] if feature_gates else []),
        ]
        comp = self._spawn("kube-controller-manager", argv)
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # its self-signed serving certificate

        def healthy() -> bool:
            if not comp.alive():
                raise comp.failure("exited during startup")
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=2, context=ctx) as resp:
                return bool(resp.status == 200)

        return self._await_ready(comp, "kube-controller-manager to report /healthz", healthy, timeout)

    @staticmethod
    def _await_ready(comp: Component, what: str, ready: Callable[[], bool], timeout: float) -> Component:
        """Wait for a started component's probe; one that never answers is stopped and its log's end raised."""
        try:
            wait_for(what, ready, timeout, interval=0.2)
        except ControlPlaneError as exc:
            comp.stop()
            if "last lines" in str(exc):
                raise
            raise comp.failure(f"did not become ready: {exc}") from None
        return comp

    def stop_component(self, name: str) -> None:
        """Stop one component (e.g. ``kuberay-operator``) and forget it."""
        comp = self.components.pop(name, None)
        if comp is not None:
            comp.stop()

    def _wait(self, comp: Component, what: str, check: Callable[[], bool], interval: float = 0.1) -> None:
        try:
            wait_for(f"{comp.name} {what}", check, self.startup_timeout, interval=interval)
        except ControlPlaneError as exc:
            if comp.name in str(exc) and "last lines" in str(exc):
                raise
            raise comp.failure(f"did not become ready: {exc}") from None

    # --- access ----------------------------------------------------------------------------------------------------

    @property
    def server(self) -> str:
        return f"https://{self.host}:{self.apiserver_port}"

    @property
    def ca_path(self) -> Path:
        assert self._pki is not None, "control plane not started"
        return self._pki.ca_cert

    @property
    def kubeconfig_path(self) -> Path:
        assert self.workdir is not None, "control plane not started"
        return self.workdir / "kubeconfig"

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_path))

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "kai-ray-test",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": _b64(self.ca_path.read_bytes()),
                    },
                }
            ],
            "users": [{"name": ADMIN_USER, "user": {"token": self.token}}],
            "contexts": [{"name": "kai-ray-test", "context": {"cluster": "kai-ray-test", "user": ADMIN_USER}}],
            "current-context": "kai-ray-test",
            "preferences": {},
        }
        self.kubeconfig_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.kubeconfig_path.chmod(0o600)

    def env(self) -> dict[str, str]:
        """``os.environ`` plus ``KUBECONFIG`` for subprocesses (operators, helm, the KubeRay operator)."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig_path)}

    def api_client(self, pool_size: int = 16) -> Any:
        """A fresh ``kubernetes.client.ApiClient`` for this control plane (the global default config is untouched)."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.server
        cfg.ssl_ca_cert = str(self.ca_path)
        cfg.verify_ssl = True
        cfg.api_key = {"authorization": self.token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        cfg.connection_pool_maxsize = pool_size
        return client.ApiClient(cfg)

    def request(
        self, path: str, method: str = "GET", headers: dict[str, str] | None = None, timeout: float = 10.0
    ) -> Any:
        """A raw JSON request with the admin token (for /version, /readyz, Table output...)."""
        req = urllib.request.Request(
            f"{self.server}{path}", method=method, headers={"Authorization": f"Bearer {self.token}", **(headers or {})}
        )
        with urllib.request.urlopen(req, timeout=timeout, context=self.ssl_context()) as resp:
            return json.loads(resp.read())

    def version(self) -> dict[str, Any]:
        result: dict[str, Any] = self.request("/version")
        return result

    def rss_bytes(self, component: str) -> int:
        comp = self.components.get(component)
        return comp.rss_bytes() if comp else 0

    def log_path(self, component: str) -> Path:
        return self.components[component].log

    def check_alive(self) -> None:
        """Raise with the log tail if any component has died (call it when a test sees the API misbehave)."""
        for comp in self.components.values():
            if not comp.alive():
                raise comp.failure("is not running")

    # --- helpers for tests ----------------------------------------------------------------------------------------

    def create_gpu_nodes(
        self,
        n: int,
        gpus: int = 8,
        cpu: str = "64",
        memory: str = "512Gi",
        pods: int = 110,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
        extra_resources: dict[str, str] | None = None,
        gpu_product: str = "NVIDIA-H100-80GB-HBM3",
        gpu_memory_mib: int = 81920,
        prefix: str = "kwok-gpu",
        wait: bool = True,
        timeout: float = 60.0,
    ) -> list[str]:
        """Create ``n`` KWOK-managed nodes with ``nvidia.com/gpu`` capacity and wait until they are Ready.

        Names are ``<prefix>-<batch>-<i>``; every node of the call carries label ``kai-ray.test/node-batch=<batch>``.
        The GPU Feature Discovery labels KAI reads (``nvidia.com/gpu.memory`` etc.) are set too.
        """
        from kubernetes import client

        if self.kwok is False:
            raise ControlPlaneError("create_gpu_nodes needs KWOK (ControlPlane(kwok=True))")
        batch = uuid.uuid4().hex[:6]
        resources = {"cpu": cpu, "memory": memory, "pods": str(pods), **(extra_resources or {})}
        node_labels_base = {
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
            NODE_BATCH_LABEL: batch,
        }
        if gpus:
            resources[GPU_RESOURCE] = str(gpus)
            node_labels_base.update(
                {
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.count": str(gpus),
                    "nvidia.com/gpu.product": gpu_product,
                    "nvidia.com/gpu.memory": str(gpu_memory_mib),
                }
            )
        core: Any = client.CoreV1Api(self._shared_client())
        names = []
        for i in range(n):
            name = f"{prefix}-{batch}-{i}"
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {**node_labels_base, "kubernetes.io/hostname": name, **(labels or {})},
                    "annotations": {
                        KWOK_NODE_ANNOTATION: KWOK_NODE_VALUE,
                        "node.alpha.kubernetes.io/ttl": "0",
                        **(annotations or {}),
                    },
                },
                "spec": {"taints": taints or []},
                "status": {"capacity": dict(resources), "allocatable": dict(resources)},
            }
            core.create_node(body, _preload_content=False).read()
            names.append(name)
        if wait:
            self.wait_nodes_ready(names, timeout=timeout)
        return names

    def wait_nodes_ready(self, names: Iterable[str], timeout: float = 60.0) -> None:
        """Wait until every named node has condition Ready=True (KWOK sets it)."""
        from kubernetes import client

        wanted = set(names)
        core: Any = client.CoreV1Api(self._shared_client())

        def all_ready() -> bool:
            self.check_alive()
            listing = json.loads(core.list_node(_preload_content=False).read())
            ready = {n["metadata"]["name"] for n in listing["items"] if _node_ready(n)}
            return wanted <= ready

        wait_for(f"{len(wanted)} KWOK nodes to become Ready", all_ready, timeout, interval=0.2)

    def delete_nodes(self, names: Iterable[str]) -> None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        core: Any = client.CoreV1Api(self._shared_client())
        for name in names:
            try:
                core.delete_node(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise

    def apply_crds(self, paths: Iterable[Path | str], timeout: float = 60.0) -> list[str]:
        """Create (or, if present, server-side apply) every CRD in ``paths`` (files or dirs); wait until Established."""
        return self._apply_docs(list(_crd_documents(paths)), timeout)

    def _apply_docs(self, docs: list[dict[str, Any]], timeout: float = 60.0) -> list[str]:
        """Responses are read raw: KubeRay's CRDs are ~300 KB each and typed deserialisation costs more than the
        request. The requests run in a few threads because the server, not the client, is the slow part.
        """
        from concurrent.futures import ThreadPoolExecutor

        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        begin = time.monotonic()
        api: Any = client.ApiextensionsV1Api(self._shared_client())

        def put(doc: dict[str, Any]) -> str:
            name: str = doc["metadata"]["name"]
            try:
                api.create_custom_resource_definition(doc, field_manager=FIELD_MANAGER, _preload_content=False).read()
            except ApiException as exc:
                if exc.status != 409:
                    raise ControlPlaneError(f"CRD {name} rejected: {exc.status} {exc.body}") from None
                api.patch_custom_resource_definition(
                    name,
                    doc,
                    field_manager=FIELD_MANAGER,
                    force=True,
                    _content_type="application/apply-patch+yaml",
                    _preload_content=False,
                ).read()
            return name

        with ThreadPoolExecutor(max_workers=4) as pool:
            names = list(pool.map(put, docs))
        self._wait_established(names, timeout)
        self.timings.crds = time.monotonic() - begin
        return names

    def _wait_established(self, names: list[str], timeout: float) -> None:
        from kubernetes import client

        api: Any = client.ApiextensionsV1Api(self._shared_client())

        def established() -> bool:
            for name in names:
                raw = json.loads(api.read_custom_resource_definition(name, _preload_content=False).read())
                conds = (raw.get("status") or {}).get("conditions") or []
                if not any(c.get("type") == "Established" and c.get("status") == "True" for c in conds):
                    return False
            return True

        wait_for(f"CRDs {', '.join(names)} to be Established", established, timeout, interval=0.1)

    def install_crds(self, kuberay: bool = True) -> list[str]:
        """Our Queue/PodGroup CRDs and, unless ``kuberay=False``, KubeRay's RayCluster/RayJob/RayService CRDs."""
        paths: list[Path] = [our_crd_dir()]
        if kuberay:
            paths.extend(kuberay_crd_files())
        return self.apply_crds(paths)

    def new_namespace(self, prefix: str = "test", labels: dict[str, str] | None = None) -> str:
        """Create a namespace with a unique name (no controller-manager runs, so namespaces are never reused)."""
        from kubernetes import client

        name = f"{prefix[:40].rstrip('-')}-{uuid.uuid4().hex[:8]}"
        core: Any = client.CoreV1Api(self._shared_client())
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
        return name

    def clear_namespace(self, name: str, extra: Iterable[tuple[str, str, str]] = ()) -> None:
        """Delete a namespace's pods at once (grace 0) and its PodGroups, then the namespace itself.

        Why by hand: without kube-controller-manager a deleted namespace keeps its pods forever, and bound pods would
        keep occupying KWOK nodes for later tests. ``extra`` names more custom resources ``(group, version, plural)``.
        """
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        api = self._shared_client()
        core: Any = client.CoreV1Api(api)
        custom: Any = client.CustomObjectsApi(api)
        with contextlib.suppress(ApiException):
            core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        for group, version, plural in (("scheduling.run.ai", "v2alpha2", "podgroups"), *extra):
            with contextlib.suppress(ApiException):
                custom.delete_collection_namespaced_custom_object(group, version, name, plural)
        with contextlib.suppress(ApiException):
            core.delete_namespace(name)

    def _shared_client(self) -> Any:
        if self._client is None:
            self._client = self.api_client()
        return self._client


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _node_ready(node: dict[str, Any]) -> bool:
    conds = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


SEED_KEEP = 4


def _etcd_seed(docs: list[dict[str, Any]]) -> Path:
    """An etcd data directory in which ``docs`` (CRDs) exist and are Established; built once, then cached.

    Why safe to reuse: it holds only what the apiserver bootstraps plus the CRDs (no tokens, no secrets), every
    control plane copies it before starting, and the key covers the CRD contents and the etcd/apiserver versions.
    """
    payload = json.dumps([build.K8S_VERSION, build.ETCD_VERSION, docs], sort_keys=True).encode()
    key = hashlib.sha256(payload).hexdigest()[:16]
    root = build.cache_root() / "etcd-seed"
    seed = root / key
    if (seed / "member").is_dir():
        seed.touch()
        return seed
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kai-ray-seed-") as tmp:
        work = Path(tmp) / "cp"
        with ControlPlane(kwok=False, workdir=work, keep_workdir=True, seed_cache=False) as builder:
            builder._apply_docs(docs)
        partial = root / f"{key}.partial-{os.getpid()}"
        shutil.copytree(work / "etcd", partial)
        try:
            partial.rename(seed)
        except OSError:  # another process won the race; its copy is equivalent
            shutil.rmtree(partial, ignore_errors=True)
    seeds = sorted((p for p in root.iterdir() if "." not in p.name), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in seeds[SEED_KEEP:]:
        shutil.rmtree(old, ignore_errors=True)
    return seed


_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load_yaml_docs(path: Path) -> list[Any]:
    """All documents of a YAML file, memoised as JSON in the cache (KubeRay's 1.3 MB of CRDs take seconds to parse)."""
    st = path.stat()
    key = hashlib.sha256(f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:20]
    cached = build.cache_root() / "yaml-json" / f"{key}.json"
    try:
        docs: list[Any] = json.loads(cached.read_text())
        return docs
    except (OSError, ValueError):
        pass
    docs = list(yaml.load_all(path.read_text(), Loader=_YAML_LOADER))
    with contextlib.suppress(OSError, TypeError, ValueError):  # e.g. a YAML timestamp is not JSON; just re-parse
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(docs))
        tmp.replace(cached)
    return docs


def _crd_documents(paths: Iterable[Path | str]) -> Iterator[dict[str, Any]]:
    files: list[Path] = []
    for p in map(Path, paths):
        files.extend(sorted(p.glob("*.yaml")) if p.is_dir() else [p])
    for f in files:
        for doc in _load_yaml_docs(f):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                yield doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Start the kai-ray test control plane and wait for Ctrl-C.")
    parser.add_argument("--nodes", type=int, default=0, help="KWOK GPU nodes to create")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    parser.add_argument("--no-crds", action="store_true", help="skip installing our CRDs and KubeRay's")
    parser.add_argument("--workdir", type=Path, default=None, help="keep certs, data and logs here")
    parser.add_argument("--once", action="store_true", help="print a JSON report (timings, RSS) and stop")
    args = parser.parse_args(argv)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    crds = [] if args.no_crds else [our_crd_dir(), *kuberay_crd_files()]
    plane = ControlPlane(workdir=args.workdir, keep_workdir=args.workdir is not None, crds=crds)
    with plane:
        t1 = time.monotonic()
        if args.nodes:
            plane.create_gpu_nodes(args.nodes, gpus=args.gpus, prefix="node", timeout=max(60.0, args.nodes * 0.5))
        t2 = time.monotonic()
        report = {
            "version": plane.version().get("gitVersion"),
            "server": plane.server,
            "kubeconfig": str(plane.kubeconfig_path),
            "timings_s": {**plane.timings.as_dict(), "nodes": round(t2 - t1, 3)},
            "crds": [d["metadata"]["name"] for d in _crd_documents(crds)],
            "rss_mib": {name: round(plane.rss_bytes(name) / 2**20, 1) for name in plane.components},
        }
        if args.once:
            print(json.dumps(report, indent=2))
            return 0
        print(f"kube-apiserver {report['version']} at {plane.server}")
        print(f"timings: {report['timings_s']}  rss MiB: {report['rss_mib']}")
        print(f"logs: {plane.workdir}/logs")
        print(f"export KUBECONFIG={plane.kubeconfig_path}", flush=True)
        try:
            while True:
                time.sleep(1)
                plane.check_alive()
        except KeyboardInterrupt:
            print("stopping", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

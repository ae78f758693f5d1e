"""Start a real kube-apiserver + etcd + KWOK on loopback, for tests, benchmarks and debugging.

Why not envtest or kind: there is no Docker here and no release downloads, only the Go module proxy, so the binaries
come from :mod:`kai_ray.testing.controlplane.build`. This module owns the core around them: PKI, a token
kubeconfig, etcd + kube-apiserver + KWOK started in order with bounded readiness waits, the etcd seed cache, and
helpers that tests need (fake GPU nodes, CRDs, namespaces). Child processes are :mod:`.processes`, CRD files and
applying them :mod:`.crds`, KWOK's nodes :mod:`.kwok`, and on-demand components (the real KubeRay operator,
kube-controller-manager) :mod:`.addons`.

Run one by hand (``--once`` prints timings and RSS as JSON and stops)::

    python -m kai_ray.testing.controlplane.harness --nodes 3
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import ssl
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from kai_ray.testing.controlplane import addons, build, crds, pki
from kai_ray.testing.controlplane.crds import crd_documents, kuberay_crd_files, our_crd_dir
from kai_ray.testing.controlplane.crds import kai_config_crd_file as kai_config_crd_file
from kai_ray.testing.controlplane.crds import kai_crd_files as kai_crd_files
from kai_ray.testing.controlplane.crds import kuberay_crd_dir as kuberay_crd_dir
from kai_ray.testing.controlplane.crds import repo_root as repo_root
from kai_ray.testing.controlplane.etcd_seed import etcd_seed
from kai_ray.testing.controlplane.kwok import GPU_RESOURCE as GPU_RESOURCE
from kai_ray.testing.controlplane.kwok import NODE_BATCH_LABEL as NODE_BATCH_LABEL
from kai_ray.testing.controlplane.kwok import (
    gpu_node_manifests,
    kwok_argv,
    kwok_stage_files,
    node_ready,
)
from kai_ray.testing.controlplane.processes import Component, ControlPlaneError, StopAtExit, free_port, spawn, wait_for
from kai_ray.testing.controlplane.processes import Stoppable as Stoppable
from kai_ray.testing.controlplane.processes import listening_sockets as listening_sockets

ADMIN_USER = "admin"
SERVICE_CIDR = "10.0.0.0/24"


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
        docs = list(crd_documents(self.crds))
        seed = etcd_seed(docs, _build_seed) if docs and self.seed_cache else None
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
            self._start_on_free_ports("etcd", lambda: self._start_etcd(binaries["etcd"]))
            self.timings.etcd_ready = time.monotonic() - begin
            self._start_on_free_ports("kube-apiserver", lambda: self._start_apiserver(binaries["kube-apiserver"]))
            self.timings.apiserver_ready = time.monotonic() - begin
            self._write_kubeconfig()
            if docs:
                if seed is None:
                    self._apply_docs(docs)
                else:
                    names = [d["metadata"]["name"] for d in docs]
                    crds.wait_established(self._shared_client(), names, timeout=self.startup_timeout)
                self.timings.crds = time.monotonic() - begin - self.timings.apiserver_ready
            if self.kwok:
                self._start_on_free_ports("kwok", lambda: self._start_kwok(binaries["kwok"], stages))
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
        comp = spawn(name, argv, self.workdir, env)
        self.components[name] = comp
        return comp

    def _start_on_free_ports(self, name: str, start: Callable[[], None], attempts: int = 3) -> None:
        """Start a component, again on fresh ports when another process took one between choosing and binding it."""
        for attempt in range(1, attempts + 1):
            try:
                start()
                return
            except ControlPlaneError as exc:
                if attempt == attempts or "address already in use" not in str(exc):
                    raise
                comp = self.components.pop(name, None)
                if comp is not None:
                    comp.stop()

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
        argv = kwok_argv(binary, self.kubeconfig_path, self.kwok_port, self.kwok_log_level, stages)
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
        """Run the real KubeRay operator against this control plane until :meth:`stop` (see :mod:`.addons`)."""
        return addons.start_kuberay_operator(self, batch_scheduler, watch_namespace, extra_args, timeout)

    def start_controller_manager(
        self, controllers: Sequence[str] = ("job",), feature_gates: Sequence[str] = (), timeout: float = 120.0
    ) -> Component:
        """Run the real kube-controller-manager with only ``controllers`` until :meth:`stop` (see :mod:`.addons`)."""
        return addons.start_controller_manager(self, controllers, feature_gates, timeout)

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
                        "certificate-authority-data": base64.b64encode(self.ca_path.read_bytes()).decode(),
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
        bodies = gpu_node_manifests(
            n,
            gpus,
            cpu,
            memory,
            pods,
            labels,
            annotations,
            taints,
            extra_resources,
            gpu_product,
            gpu_memory_mib,
            prefix,
        )
        core: Any = client.CoreV1Api(self._shared_client())
        names = []
        for body in bodies:
            core.create_node(body, _preload_content=False).read()
            names.append(body["metadata"]["name"])
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
            ready = {n["metadata"]["name"] for n in listing["items"] if node_ready(n)}
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
        return self._apply_docs(list(crd_documents(paths)), timeout)

    def _apply_docs(self, docs: list[dict[str, Any]], timeout: float = 60.0) -> list[str]:
        """Why the timing: the report and the benchmarks show what the CRD step costs."""
        begin = time.monotonic()
        names = crds.apply_crd_docs(self._shared_client(), docs, timeout)
        self.timings.crds = time.monotonic() - begin
        return names

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


def _build_seed(docs: list[dict[str, Any]], workdir: Path) -> None:
    """Why a throwaway plane without KWOK: the seed must hold the CRDs and nothing a test would see as its own."""
    with ControlPlane(kwok=False, workdir=workdir, keep_workdir=True, seed_cache=False) as builder:
        builder._apply_docs(docs)


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
            "crds": [d["metadata"]["name"] for d in crd_documents(crds)],
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

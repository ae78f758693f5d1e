"""A real Kubernetes node beside the test control plane: kubelet + containerd + runc + a CNI bridge, with
kube-controller-manager, kube-proxy and CoreDNS, so tests can run real containers where KWOK only pretends.

Why host processes and a private everything: the machine has no Docker engine and no registry, but it is root with
cgroups, and Debian ships containerd, runc and the CNI plugins. Every piece gets its own config, socket, state and
root under the node's work directory; the apiserver, kubelet and CoreDNS listen on the node's own bridge (``kr0``,
10.85.0.1), the rest on loopback. Pods can only reach that bridge and ClusterIPs mapped onto it: a FORWARD rule drops
whatever a pod sends out of the bridge, and the bridge does no masquerading.

What a node changes on the host (sysctls written by kubelet and the bridge plugin, iptables chains of kubelet,
kube-proxy and portmap, mounts under the work directory, ``/kubepods`` cgroups, the bridge, CNI and shim state) is
recorded by :class:`HostState` before anything starts and put back by :meth:`RealNode.stop`, which also runs at exit.
Only processes the node started are stopped, by PID.

Run one by hand (``--once`` prints timings and RSS as JSON and stops)::

    python -m kai_ray.testing.controlplane.realnode --once
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kai_ray.testing.controlplane import build
from kai_ray.testing.controlplane.harness import (
    GPU_RESOURCE,
    SERVICE_CIDR,
    Component,
    ControlPlane,
    ControlPlaneError,
    StopAtExit,
    free_port,
    wait_for,
)

BRIDGE = "kr0"
POD_SUBNET = "10.85.0.0/16"
NODE_IP = "10.85.0.1"
NODE_NAME = "kai-ray-node"
CNI_NETWORK = "kai-ray-realnode"
CLUSTER_DOMAIN = "cluster.local"
PACKAGES = {  # Debian package -> a file it installs that the node needs
    "containerd": "/usr/bin/containerd",
    "runc": "/usr/sbin/runc",
    "containernetworking-plugins": "/usr/lib/cni/bridge",
    "iptables": "/usr/sbin/iptables",
    "conntrack": "/usr/sbin/conntrack",
}
SYSCTLS = (
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "vm.overcommit_memory",
    "net.ipv4.ip_forward",
    "net.ipv4.conf.all.route_localnet",
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
)
# Host paths a node may create outside its work directory (containerd's shim sockets and network namespaces, the CNI
# result cache, kubelet's container-log links); whatever of them did not exist before is removed once empty.
HOST_PATHS = ("/run/containerd", "/run/netns", "/var/run/netns", "/var/lib/cni", "/var/log/containers")
CHAIN_PREFIXES = ("KUBE-", "CNI-HOSTPORT-")
HOST_LOCK = "/run/lock/kai-ray-realnode.lock"
ISOLATION_COMMENT = "kai-ray-realnode: pods reach only the bridge"


class NodeUnavailable(RuntimeError):
    """This host cannot run a real node (not root, no cgroups, packages missing); the message is one line."""


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def _read_sysctl(name: str) -> str | None:
    try:
        return _sysctl_path(name).read_text().strip()
    except OSError:
        return None


def _run(argv: Sequence[str], check: bool = True, timeout: float = 120.0, input: str | None = None) -> str:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, input=input)
    if check and proc.returncode != 0:
        raise ControlPlaneError(f"{' '.join(argv)} failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-2000:]}")
    return proc.stdout


def preflight() -> None:
    """Raise :class:`NodeUnavailable` with one line when this host cannot run containers; install missing packages."""
    if sys.platform != "linux":
        raise NodeUnavailable(f"a real node needs Linux, this is {sys.platform}")
    if os.geteuid() != 0:
        raise NodeUnavailable("a real node needs root (kubelet, containerd and the CNI bridge change the host)")
    if not Path("/sys/fs/cgroup/memory").is_dir() and not Path("/sys/fs/cgroup/cgroup.controllers").is_file():
        raise NodeUnavailable("a real node needs cgroups (no memory controller under /sys/fs/cgroup)")
    missing = [pkg for pkg, path in PACKAGES.items() if not Path(path).exists()]
    if missing:
        if shutil.which("apt-get") is None:
            raise NodeUnavailable(f"a real node needs Debian packages {' '.join(missing)} and there is no apt-get")
        _apt_install(missing)


def _apt_install(packages: list[str]) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=600", *packages]
    proc = subprocess.run(install, capture_output=True, text=True, env=env, timeout=1200)
    if proc.returncode != 0:
        update = ["apt-get", "update", "-q", "-o", "DPkg::Lock::Timeout=600"]
        subprocess.run(update, capture_output=True, text=True, env=env, timeout=1200)
        proc = subprocess.run(install, capture_output=True, text=True, env=env, timeout=1200)
    still = [pkg for pkg, path in PACKAGES.items() if not Path(path).exists()]
    if proc.returncode != 0 or still:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise NodeUnavailable(f"apt-get install {' '.join(packages)} failed: {last[0]}")


# --- what the node changes on the host ------------------------------------------------------------------------------


def _iptables_chains(binary: str, table: str) -> set[str]:
    out = _run([f"{binary}-save", "-t", table], check=False)
    return {line[1:].split()[0] for line in out.splitlines() if line.startswith(":")}


def _tables(binary: str) -> list[str]:
    names = Path(f"/proc/net/{'ip6' if binary == 'ip6tables' else 'ip'}_tables_names")
    found = set(names.read_text().split()) if names.is_file() else set()
    return sorted(found | {"filter", "nat", "mangle"})


def _remove_chains(binary: str, table: str, keep: set[str]) -> None:
    """Delete every rule that jumps to, and every chain named, KUBE-*/CNI-HOSTPORT-* that is not in ``keep``."""
    out = _run([f"{binary}-save", "-t", table], check=False)
    doomed = {c for c in (line[1:].split()[0] for line in out.splitlines() if line.startswith(":")) if c not in keep}
    doomed = {c for c in doomed if c.startswith(CHAIN_PREFIXES)}
    if not doomed:
        return
    script = [f"*{table}"]
    for line in out.splitlines():
        if not line.startswith("-A "):
            continue
        parts = line.split()
        chain = parts[1]
        target = next((parts[i + 1] for i, p in enumerate(parts[:-1]) if p in ("-j", "-g")), "")
        if chain not in doomed and target in doomed:
            script.append("-D " + line[3:])
    script += [f"-F {c}" for c in sorted(doomed)] + [f"-X {c}" for c in sorted(doomed)] + ["COMMIT", ""]
    _run([f"{binary}-restore", "--noflush"], check=False, input="\n".join(script))


def _mounts_under(root: Path) -> list[str]:
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point == str(root) or point.startswith(f"{root}/"):
                found.append(point)
    return found


def _cgroup_roots() -> list[Path]:
    base = Path("/sys/fs/cgroup")
    if (base / "cgroup.controllers").is_file():
        return [base]
    return [p for p in base.iterdir() if p.is_dir() and not p.is_symlink()]


@dataclass
class HostState:
    """What the host looked like before a node started; :meth:`restore` puts back what the node changed."""

    sysctls: dict[str, str] = field(default_factory=dict)
    chains: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    paths: dict[str, bool] = field(default_factory=dict)
    netns: set[str] = field(default_factory=set)
    kubepods: dict[str, bool] = field(default_factory=dict)
    bridge_existed: bool = False

    @classmethod
    def record(cls) -> HostState:
        state = cls()
        state.sysctls = {name: value for name in SYSCTLS if (value := _read_sysctl(name)) is not None}
        for binary in ("iptables", "ip6tables"):
            if shutil.which(f"{binary}-save"):
                state.chains[binary] = {t: _iptables_chains(binary, t) for t in _tables(binary)}
        state.paths = {p: Path(p).exists() for p in HOST_PATHS}
        state.netns = {str(p) for d in ("/run/netns", "/var/run/netns") if Path(d).is_dir() for p in Path(d).iterdir()}
        state.kubepods = {str(root / "kubepods"): (root / "kubepods").exists() for root in _cgroup_roots()}
        state.bridge_existed = Path(f"/sys/class/net/{BRIDGE}").exists()
        return state

    def restore(self, workdir: Path | None) -> list[str]:
        """Put the host back; returns what could not be restored (empty when all went well)."""
        problems: list[str] = []
        if workdir is not None:
            for point in sorted(_mounts_under(workdir), key=len, reverse=True):
                if subprocess.run(["umount", point], capture_output=True).returncode != 0:
                    subprocess.run(["umount", "-l", point], capture_output=True)
        for d in ("/run/netns", "/var/run/netns"):
            if Path(d).is_dir():
                for ns in Path(d).iterdir():
                    if str(ns) not in self.netns and ns.name.startswith("cni-"):
                        subprocess.run(["umount", str(ns)], capture_output=True)
                        with contextlib.suppress(OSError):
                            ns.unlink()
        for binary, tables in self.chains.items():
            for table, keep in tables.items():
                _remove_chains(binary, table, keep)
            _remove_isolation(binary)
        if not self.bridge_existed and Path(f"/sys/class/net/{BRIDGE}").exists():
            subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True)
        for cgroup, existed in self.kubepods.items():
            if not existed:
                _rmdir_tree(Path(cgroup))
        results = Path("/var/lib/cni/results")
        if results.is_dir():
            for f in results.glob(f"{CNI_NETWORK}-*"):
                with contextlib.suppress(OSError):
                    f.unlink()
        logs = Path("/var/log/containers")
        if logs.is_dir() and workdir is not None:
            for link in logs.iterdir():
                with contextlib.suppress(OSError):
                    if link.is_symlink() and os.readlink(link).startswith(str(workdir)):
                        link.unlink()
        for path, existed in self.paths.items():
            if not existed and Path(path).is_dir() and not Path(path).is_symlink():
                _rmdir_tree(Path(path))
        for name, value in self.sysctls.items():
            if _read_sysctl(name) != value:
                try:
                    _sysctl_path(name).write_text(value)
                except OSError as exc:
                    problems.append(f"sysctl {name}={value}: {exc}")
        if workdir is not None and _mounts_under(workdir):
            problems.append(f"mounts left under {workdir}: {', '.join(_mounts_under(workdir))}")
        for binary, tables in self.chains.items():
            for table, before in tables.items():
                added = {c for c in _iptables_chains(binary, table) - before if c.startswith(CHAIN_PREFIXES)}
                if added:
                    problems.append(f"{binary} -t {table} chains left: {', '.join(sorted(added))}")
        if not self.bridge_existed and Path(f"/sys/class/net/{BRIDGE}").exists():
            problems.append(f"bridge {BRIDGE} left")
        problems += [f"cgroup {c} left" for c, existed in self.kubepods.items() if not existed and Path(c).exists()]
        return problems


def _rmdir_tree(root: Path) -> None:
    """Remove empty directories bottom-up (cgroups are removed with rmdir; a non-empty one stays)."""
    if not root.is_dir():
        return
    for dirpath, _dirs, _files in sorted(os.walk(root), key=lambda t: t[0].count("/"), reverse=True):
        with contextlib.suppress(OSError):
            os.rmdir(dirpath)


def _add_isolation(binary: str, subnet: str) -> None:
    rule = ["FORWARD", "-i", BRIDGE, "!", "-o", BRIDGE, "-m", "comment", "--comment", ISOLATION_COMMENT, "-j", "DROP"]
    if binary == "iptables" and subprocess.run([binary, "-C", *rule], capture_output=True).returncode != 0:
        _run([binary, "-I", *rule])
    del subnet


def _remove_isolation(binary: str) -> None:
    rule = ["FORWARD", "-i", BRIDGE, "!", "-o", BRIDGE, "-m", "comment", "--comment", ISOLATION_COMMENT, "-j", "DROP"]
    while subprocess.run([binary, "-D", *rule], capture_output=True).returncode == 0:
        pass


# --- images ---------------------------------------------------------------------------------------------------------


def _images_module() -> Any:
    try:
        from kai_ray.testing import images
    except ImportError as exc:
        raise ControlPlaneError(f"kai_ray.testing.images is not available: {exc}") from None
    return images


# --- DNS probe ------------------------------------------------------------------------------------------------------


def dns_query(server: str, name: str, timeout: float = 2.0) -> list[str]:
    """A records for ``name`` from ``server``:53 (a bare UDP query: no resolver library, no host resolv.conf)."""
    qid = os.getpid() & 0xFFFF
    question = b"".join(bytes([len(label)]) + label.encode() for label in name.rstrip(".").split(".")) + b"\0"
    packet = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + question + struct.pack(">HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.sendto(packet, (server, 53))
        data = sock.recv(4096)
    _, flags, qd, an, _, _ = struct.unpack(">HHHHHH", data[:12])
    if flags & 0xF:
        return []
    pos = 12 + len(question) + 4
    found = []
    for _ in range(an):
        while data[pos] and data[pos] & 0xC0 != 0xC0:
            pos += data[pos] + 1
        pos += 2 if data[pos] & 0xC0 == 0xC0 else 1
        rtype, _cls, _ttl, length = struct.unpack(">HHIH", data[pos : pos + 10])
        pos += 10
        if rtype == 1 and length == 4:
            found.append(socket.inet_ntoa(data[pos : pos + 4]))
        pos += length
    del qd
    return found


# --- the node -------------------------------------------------------------------------------------------------------

_LIVE = StopAtExit()


@dataclass
class NodeTimings:
    """Seconds from the start of :meth:`RealNode.start`."""

    build: float = 0.0
    images: float = 0.0
    host_lock: float = 0.0  # waiting for another real node on this host to stop
    control_plane: float = 0.0
    containerd_ready: float = 0.0
    node_ready: float = 0.0
    total: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in self.__dict__.items()}


@dataclass(eq=False)
class RealNode:
    """A control plane (:class:`ControlPlane` bound to the bridge IP) plus one real node, as a context manager.

    ``gpus`` is advertised as ``nvidia.com/gpu`` capacity (bookkeeping only: no device is attached). ``dns`` and
    ``proxy`` start CoreDNS and kube-proxy; ``controller_manager`` starts kube-controller-manager; ``kube_scheduler``
    starts the default scheduler (for pods that name no scheduler, such as the Helm chart's operators).
    """

    gpus: int = 8
    crds: Sequence[Path | str] = field(default_factory=list)
    dns: bool = True
    proxy: bool = True
    controller_manager: bool = True
    kube_scheduler: bool = True
    host_lock_timeout: float = 1800.0
    startup_timeout: float = 240.0
    keep_workdir: bool = field(default_factory=lambda: os.environ.get("KAI_RAY_KEEP_CONTROLPLANE") == "1")

    plane: ControlPlane = field(init=False)
    workdir: Path = field(init=False)
    timings: NodeTimings = field(default_factory=NodeTimings, init=False)
    host: HostState | None = field(default=None, init=False)
    containerd_address: str = field(default="", init=False)
    pause_ref: str = field(default="", init=False)
    name: str = NODE_NAME
    node_ip: str = NODE_IP
    _started: bool = field(default=False, init=False)
    _stopped: bool = field(default=False, init=False)
    leftovers: list[str] = field(default_factory=list, init=False)

    def __enter__(self) -> RealNode:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def components(self) -> dict[str, Component]:
        return self.plane.components

    def start(self) -> RealNode:
        """Install what is missing, build or find binaries and the pause image, then start everything and wait until
        the node is Ready and advertises its GPUs. A node starts once."""
        if self._started:
            raise ControlPlaneError("this RealNode was already started; create a new one")
        self._started = True
        begin = time.monotonic()
        preflight()
        names = ("kubelet", "kube-controller-manager", "kube-proxy", "kube-scheduler")
        binaries = {name: build.ensure(name) for name in names}
        if self.dns:
            binaries["coredns"] = build.ensure("coredns")
        self.timings.build = time.monotonic() - begin
        images = _images_module()
        pause = images.ensure_image("pause")
        self.pause_ref = pause.ref
        self.timings.images = time.monotonic() - begin
        _LIVE.add(self)
        try:
            self._take_host_lock()
            self.timings.host_lock = time.monotonic() - begin - self.timings.images
            self.workdir = Path(tempfile.mkdtemp(prefix="kai-ray-node-"))
            (self.workdir / "owner.pid").write_text(str(os.getpid()))
            if Path(f"/sys/class/net/{BRIDGE}").exists():
                raise NodeUnavailable(f"bridge {BRIDGE} exists and no real node holds {HOST_LOCK}: remove it by hand")
            self.host = HostState.record()
            self._make_bridge()
            self.plane = ControlPlane(
                kwok=False,
                host=self.node_ip,
                crds=self.crds,
                workdir=self.workdir / "cp",
                keep_workdir=True,
                startup_timeout=self.startup_timeout,
                # pods get service-account tokens (the chart's operators need them) and the kubernetes Service's
                # endpoint is this apiserver on the bridge
                apiserver_extra_args=["--endpoint-reconciler-type=lease"],
                disabled_admission=("TaintNodesByCondition",),
            )
            self.plane.start()
            self.timings.control_plane = time.monotonic() - begin
            self._start_containerd(pause.ref)
            images.import_to_containerd(pause, self.containerd_address)
            self.timings.containerd_ready = time.monotonic() - begin
            if self.controller_manager:
                self._start_controller_manager(binaries["kube-controller-manager"])
            if self.kube_scheduler:
                self._start_scheduler(binaries["kube-scheduler"])
            self._start_kubelet(binaries["kubelet"])
            if self.proxy:
                self._start_proxy(binaries["kube-proxy"])
            if self.dns:
                self._start_coredns(binaries["coredns"])
            self._wait_node()
            self.timings.node_ready = time.monotonic() - begin
            self.timings.total = self.timings.node_ready
        except BaseException:
            self.stop()
            raise
        return self

    def _take_host_lock(self) -> None:
        """One real node per host (they would share ``/kubepods``, the KUBE-* chains and the bridge): wait for the
        other one to stop, for up to ``host_lock_timeout`` seconds. The lock dies with its holder, even a SIGKILLed
        one."""
        self._lock = open(HOST_LOCK, "a+")  # noqa: SIM115 - held for the node's lifetime, closed by stop()
        deadline = time.monotonic() + self.host_lock_timeout
        said = False
        while True:
            try:
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise NodeUnavailable(
                        f"another real node held {HOST_LOCK} for {self.host_lock_timeout:.0f}s"
                    ) from None
                if not said:
                    print(f"[kai-ray] waiting for another real node on this host ({HOST_LOCK})", file=sys.stderr)
                    said = True
                time.sleep(1)
        self._lock.seek(0)
        self._lock.truncate()
        self._lock.write(f"{os.getpid()}\n")
        self._lock.flush()

    # --- pieces -----------------------------------------------------------------------------------------------------

    def _make_bridge(self) -> None:
        _run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        _run(["ip", "addr", "add", f"{self.node_ip}/16", "dev", BRIDGE])
        _run(["ip", "link", "set", BRIDGE, "up"])
        _add_isolation("iptables", POD_SUBNET)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Component:
        return self.plane._spawn(name, argv, env)

    def _start_containerd(self, pause_ref: str) -> None:
        d = self.workdir / "containerd"
        (d / "cni").mkdir(parents=True)
        self.containerd_address = str(d / "containerd.sock")
        cni = {
            "cniVersion": "1.0.0",
            "name": CNI_NETWORK,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_SUBNET, "gateway": self.node_ip}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(d / "ipam"),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }
        (d / "cni" / "10-kai-ray.conflist").write_text(json.dumps(cni, indent=2))
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        config = f"""version = 2
root = "{d / "root"}"
state = "{d / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{self.containerd_address}"
[ttrpc]
  address = "{self.containerd_address}.ttrpc"
[debug]
  level = "warn"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d / "opt"}"
[{cri}]
  sandbox_image = "{pause_ref}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  tolerate_missing_hugetlb_controller = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
  [{cri}.cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d / "cni"}"
    max_conf_num = 1
"""
        (d / "config.toml").write_text(config)
        comp = self._spawn("containerd", ["containerd", f"--config={d / 'config.toml'}"])

        def ready() -> bool:
            if not comp.alive():
                raise comp.failure("exited during startup")
            out = subprocess.run(
                ["ctr", "--address", self.containerd_address, "version"], capture_output=True, timeout=10
            )
            return out.returncode == 0

        self._wait(comp, "to answer", ready)

    def _start_controller_manager(self, binary: Path) -> None:
        p = self.plane._pki
        assert p is not None
        port = free_port()
        argv = [
            str(binary),
            f"--kubeconfig={self.plane.kubeconfig_path}",
            f"--authentication-kubeconfig={self.plane.kubeconfig_path}",
            f"--authorization-kubeconfig={self.plane.kubeconfig_path}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.workdir / 'kcm'}",
            f"--service-account-private-key-file={p.sa_key}",
            f"--root-ca-file={p.ca_cert}",
            "--use-service-account-credentials=false",
            "--leader-elect=false",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--controllers=*,-nodeipam,-persistentvolume-binder,-attachdetach",  # 1.37 dropped the cloud ones
            "--concurrent-gc-syncs=5",
            "--profiling=false",
            "--v=1",
        ]
        comp = self._spawn("kube-controller-manager", argv)
        self._wait(comp, "to report /healthz", lambda: self._https_ok(comp, port, "/healthz"))

    def _start_scheduler(self, binary: Path) -> None:
        port = free_port()
        kubeconfig = self.plane.kubeconfig_path
        argv = [
            str(binary),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.workdir / 'kube-scheduler'}",
            "--leader-elect=false",
            "--profiling=false",
            "--v=1",
        ]
        comp = self._spawn("kube-scheduler", argv)
        self._wait(comp, "to report /healthz", lambda: self._https_ok(comp, port, "/healthz"))

    def _https_ok(self, comp: Component, port: int, path: str) -> bool:
        import ssl
        import urllib.request

        if not comp.alive():
            raise comp.failure("exited during startup")
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        req = urllib.request.Request(f"https://127.0.0.1:{port}{path}")
        with urllib.request.urlopen(req, timeout=3, context=ctx) as resp:
            return bool(resp.status == 200)

    def _http_ok(self, comp: Component, url: str) -> bool:
        import urllib.request

        if not comp.alive():
            raise comp.failure("exited during startup")
        with urllib.request.urlopen(url, timeout=3) as resp:
            return bool(resp.status == 200)

    def _start_kubelet(self, binary: Path) -> None:
        p = self.plane._pki
        assert p is not None
        d = self.workdir / "kubelet"
        d.mkdir()
        (d / "resolv.conf").write_text("")
        self.healthz_port = free_port()
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "cgroupDriver": "cgroupfs",
            "failCgroupV1": False,
            "failSwapOn": False,
            "protectKernelDefaults": False,
            "containerRuntimeEndpoint": f"unix://{self.containerd_address}",
            "address": self.node_ip,
            "port": free_port(self.node_ip),
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.healthz_port,
            "readOnlyPort": 0,
            "authentication": {
                "x509": {"clientCAFile": str(p.ca_cert)},
                "webhook": {"enabled": False},
                "anonymous": {"enabled": False},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "clusterDNS": [self.node_ip],
            "clusterDomain": CLUSTER_DOMAIN,
            "resolvConf": str(d / "resolv.conf"),
            "podLogsDir": str(self.workdir / "pod-logs"),
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "makeIPTablesUtilChains": False,
            "localStorageCapacityIsolation": False,
            "cgroupsPerQOS": True,
            "enforceNodeAllocatable": [],
            "maxPods": 110,
            "nodeStatusUpdateFrequency": "5s",
            "syncFrequency": "10s",
            "shutdownGracePeriod": "0s",
        }
        (d / "config.yaml").write_text(yaml.safe_dump(config))
        argv = [
            str(binary),
            f"--config={d / 'config.yaml'}",
            f"--kubeconfig={self.plane.kubeconfig_path}",
            f"--root-dir={d / 'root'}",
            f"--cert-dir={d / 'pki'}",
            f"--node-ip={self.node_ip}",
            f"--hostname-override={self.name}",
            "--v=1",
        ]
        comp = self._spawn("kubelet", argv)
        self._wait(
            comp, "to report /healthz", lambda: self._http_ok(comp, f"http://127.0.0.1:{self.healthz_port}/healthz")
        )

    def _start_proxy(self, binary: Path) -> None:
        healthz, metrics = free_port(), free_port()
        self._proxy_binary = binary
        argv = [
            str(binary),
            f"--kubeconfig={self.plane.kubeconfig_path}",
            "--proxy-mode=iptables",
            f"--cluster-cidr={POD_SUBNET}",
            f"--hostname-override={self.name}",
            "--bind-address=127.0.0.1",
            f"--healthz-bind-address=127.0.0.1:{healthz}",
            f"--metrics-bind-address=127.0.0.1:{metrics}",
            f"--nodeport-addresses={self.node_ip}/32",
            "--iptables-localhost-nodeports=false",
            "--conntrack-max-per-core=0",
            "--conntrack-tcp-timeout-established=0",
            "--conntrack-tcp-timeout-close-wait=0",
            "--masquerade-all=false",
            "--v=1",
        ]
        comp = self._spawn("kube-proxy", argv)
        self._wait(comp, "to report /healthz", lambda: self._http_ok(comp, f"http://127.0.0.1:{healthz}/healthz"))

    def _start_coredns(self, binary: Path) -> None:
        d = self.workdir / "coredns"
        d.mkdir()
        corefile = f"""{CLUSTER_DOMAIN}:53 in-addr.arpa:53 {{
    bind {self.node_ip}
    errors
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa {{
        kubeconfig {self.plane.kubeconfig_path} kai-ray-test
        pods insecure
    }}
}}
.:53 {{
    bind {self.node_ip}
    errors
}}
"""
        (d / "Corefile").write_text(corefile)
        comp = self._spawn("coredns", [str(binary), "-conf", str(d / "Corefile")])

        def answers() -> bool:
            if not comp.alive():
                raise comp.failure("exited during startup")
            return bool(dns_query(self.node_ip, f"kubernetes.default.svc.{CLUSTER_DOMAIN}"))

        self._wait(comp, "to resolve kubernetes.default", answers)

    def _wait(self, comp: Component, what: str, check: Any) -> None:
        try:
            wait_for(f"{comp.name} {what}", check, self.startup_timeout, interval=0.2)
        except ControlPlaneError as exc:
            if "last lines" in str(exc):
                raise
            raise comp.failure(f"did not become ready: {exc}") from None

    def _wait_node(self) -> None:
        from kubernetes import client

        core: Any = client.CoreV1Api(self.plane._shared_client())
        comp = self.components["kubelet"]

        def registered() -> bool:
            if not comp.alive():
                raise comp.failure("exited")
            node = json.loads(core.read_node(self.name, _preload_content=False).read())
            conds = node.get("status", {}).get("conditions") or []
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

        self._wait(comp, f"to register node {self.name} Ready", registered)
        labels = {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.count": str(self.gpus),
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.memory": "81920",
        }
        core.patch_node(self.name, {"metadata": {"labels": labels}})
        if self.gpus:
            patch = [{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": str(self.gpus)}]
            core.patch_node_status(self.name, patch, _preload_content=False).read()

            def advertised() -> bool:
                node = json.loads(core.read_node(self.name, _preload_content=False).read())
                return bool(node["status"].get("allocatable", {}).get(GPU_RESOURCE) == str(self.gpus))

            self._wait(comp, f"to advertise {self.gpus} {GPU_RESOURCE}", advertised)

    # --- stop -------------------------------------------------------------------------------------------------------

    def _ctr(self, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ctr", "--address", self.containerd_address, "-n", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def _drain_pods(self) -> None:
        """Delete every pod and wait until containerd runs no task, so kubelet tears sandboxes down (CNI DEL, netns)."""
        from kubernetes import client

        with contextlib.suppress(Exception):
            core: Any = client.CoreV1Api(self.plane._shared_client())
            for ns in json.loads(core.list_namespace(_preload_content=False).read())["items"]:
                core.delete_collection_namespaced_pod(ns["metadata"]["name"], grace_period_seconds=0)

        def idle() -> bool:
            tasks = self._ctr("tasks", "ls", "-q")
            return tasks.returncode == 0 and not tasks.stdout.strip()

        with contextlib.suppress(ControlPlaneError):
            wait_for("the node's containers to stop", idle, 60.0, interval=0.5)

    def _kill_leftovers(self) -> None:
        """Kill what kubelet did not tear down: tasks through ctr, then shims of this containerd by PID."""
        tasks = self._ctr("tasks", "ls", "-q")
        for task in tasks.stdout.split():
            self._ctr("tasks", "kill", "-s", "SIGKILL", task)
        for task in tasks.stdout.split():
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._ctr("tasks", "delete", "-f", task)
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                cmdline = (proc / "cmdline").read_bytes().split(b"\0")
                if b"containerd-shim" in cmdline[0] and self.containerd_address.encode() in cmdline:
                    os.kill(int(proc.name), signal.SIGKILL)
        for root in _cgroup_roots():
            for procs in sorted((root / "kubepods").rglob("cgroup.procs")) if (root / "kubepods").is_dir() else []:
                with contextlib.suppress(OSError, ValueError):
                    for pid in procs.read_text().split():
                        os.kill(int(pid), signal.SIGKILL)

    def stop(self) -> list[str]:
        """Stop the node's processes (pods first), then the control plane, then put the host back; idempotent.

        Returns what could not be put back (empty when the host is as it was; also kept in :attr:`leftovers`)."""
        if self._stopped:
            return self.leftovers
        self._stopped = True
        plane = getattr(self, "plane", None)
        try:
            if plane is not None:
                for name in ("kube-controller-manager", "kube-scheduler"):
                    plane.stop_component(name)
                if "kubelet" in plane.components and self.containerd_address:
                    self._drain_pods()
                for name in ("kubelet", "coredns", "kube-proxy"):
                    plane.stop_component(name)
                if self.containerd_address and "containerd" in plane.components:
                    self._kill_leftovers()
                plane.stop_component("containerd")
                proxy = getattr(self, "_proxy_binary", None)
                if proxy is not None:
                    subprocess.run([str(proxy), "--cleanup", "--proxy-mode=iptables"], capture_output=True, timeout=60)
                plane.stop()
        finally:
            problems = self.host.restore(self.workdir) if self.host is not None else []
            _LIVE.discard(self)
            lock = getattr(self, "_lock", None)
            if lock is not None:
                lock.close()
            if hasattr(self, "workdir") and not self.keep_workdir and not _mounts_under(self.workdir):
                shutil.rmtree(self.workdir, ignore_errors=True)
            self.leftovers = problems
            if problems:
                print(f"[kai-ray] real node left behind: {'; '.join(problems)}", file=sys.stderr)
        return self.leftovers

    # --- access -----------------------------------------------------------------------------------------------------

    def rss_bytes(self, component: str) -> int:
        return self.plane.rss_bytes(component)

    def load_image(self, name: str) -> str:
        """Build (or find) image ``name`` with :mod:`kai_ray.testing.images`, import it into this node's containerd and
        return the reference for pod specs (``imagePullPolicy: Never``)."""
        images = _images_module()
        image = images.ensure_image(name)
        images.import_to_containerd(image, self.containerd_address)
        return str(image.ref)

    def pod_rss_bytes(self, uid: str) -> int:
        """Summed RSS of the processes of pod ``uid`` (pause included), from its cgroup under ``/kubepods``."""
        root = next((r for r in _cgroup_roots() if r.name in ("memory", "cgroup")), None)
        if root is None or not (root / "kubepods").is_dir():
            return 0
        pids: set[str] = set()
        for procs in (root / "kubepods").rglob("cgroup.procs"):
            if f"pod{uid}" in str(procs):
                with contextlib.suppress(OSError):
                    pids.update(procs.read_text().split())
        total = 0
        for pid in pids:
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        return total

    def shim_rss_bytes(self) -> int:
        """Summed RSS of this containerd's runc shims (one per pod)."""
        total = 0
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                cmdline = (proc / "cmdline").read_bytes().split(b"\0")
                if b"containerd-shim" in cmdline[0] and self.containerd_address.encode() in cmdline:
                    for line in (proc / "status").read_text().splitlines():
                        if line.startswith("VmRSS:"):
                            total += int(line.split()[1]) * 1024
        return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Start the test control plane with one real node.")
    parser.add_argument("--once", action="store_true", help="print a JSON report (timings, RSS) and stop")
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        node = RealNode(gpus=args.gpus).start()
    except NodeUnavailable as exc:
        print(f"no real node here: {exc}", file=sys.stderr)
        return 2
    with node:
        report = {
            "server": node.plane.server,
            "kubeconfig": str(node.plane.kubeconfig_path),
            "timings_s": {**node.timings.as_dict(), **{f"cp_{k}": v for k, v in node.plane.timings.as_dict().items()}},
            "rss_mib": {name: round(node.rss_bytes(name) / 2**20, 1) for name in node.components},
        }
        if args.once:
            print(json.dumps(report, indent=2))
            return 0
        print(json.dumps(report, indent=2))
        print(f"export KUBECONFIG={node.plane.kubeconfig_path}", flush=True)
        try:
            while True:
                time.sleep(1)
                node.plane.check_alive()
        except KeyboardInterrupt:
            print("stopping", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

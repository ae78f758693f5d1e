"""Build the control-plane binaries from Go modules into a versioned cache.

Why a build and not a download: release pages are unreachable here, but the Go module proxy is. Each binary is
built once and cached under ``~/.cache/kai-ray/bin/<name>-<version>-<go>`` so that a warm run costs a stat call.

The Kubernetes components cannot be ``go install``-ed (``k8s.io/kubernetes`` maps its staging modules with
``replace``), so they are built from a small generated wrapper module whose replace list is read from upstream's go.mod
through the proxy. kube-apiserver, kubelet, kube-controller-manager, kube-proxy and kube-scheduler are ONE multi-call
binary ``kube`` (as hyperkube and k3s do): it dispatches on the name it is called by (the cache holds a symlink per
component) or on its first argument, so the packages they share are compiled and linked once and the real-node lane
adds little to the apiserver's build. etcd's server module replaces its siblings with relative paths, so it gets a
wrapper too. The rest install directly or build inside a copy of their module.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

K8S_VERSION = "v1.37.2"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
HELM_VERSION = "v4.2.4"
KUBERAY_VERSION = "v1.6.1"  # v1.7.0 is answered 403 "not available" by the module proxy here

COREDNS_VERSION = "v1.15.0"  # the module proxy's latest here (v1.14.3 .. v1.15.0 listed)
# v1.15.0 and v1.14.3 say ``go 1.26.9``/``go 1.26.10`` in go.mod and GOTOOLCHAIN=local refuses them under Go 1.26.8;
# v1.14.1 (``go 1.26.6``) is the newest the local toolchain builds unchanged.
KARPENTER_VERSION = "v1.14.1"
KAI_VERSION = "v0.12.0"  # the only KAI tag the module proxy serves here (later tags and @v/list answer 403)

KUBERAY_MODULE = "github.com/ray-project/kuberay/ray-operator"
KAI_MODULE = "github.com/NVIDIA/KAI-scheduler"
KWOK_MODULE = "sigs.k8s.io/kwok"
KARPENTER_MODULE = "sigs.k8s.io/karpenter"
# Only its CRDs are used (the chart's cert-manager mode is dry-run against them); nothing of it is built.
CERT_MANAGER_MODULE = "github.com/cert-manager/cert-manager"
CERT_MANAGER_VERSION = "v1.21.2"


def cache_root() -> Path:
    return Path(os.environ.get("KAI_RAY_CACHE", Path.home() / ".cache" / "kai-ray"))


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("CGO_ENABLED", "0")
    env.setdefault("GOTOOLCHAIN", "local")
    env.setdefault("GOFLAGS", "-trimpath -buildvcs=false")
    return env


GO_MIN = "1.26"  # k8s.io/kubernetes v1.37's go directive; GOTOOLCHAIN=local, so no automatic download


class GoMissing(RuntimeError):
    """No Go toolchain on PATH: said in one line, not as a FileNotFoundError from deep inside a fixture."""


def _require_go() -> None:
    if shutil.which("go") is None:
        raise GoMissing(
            f"'go' is not on PATH: the test control plane (kube-apiserver, etcd, KWOK, Helm, KubeRay operator) is "
            f"built from Go modules on first use; install Go >= {GO_MIN} (https://go.dev/dl/)"
        )


@lru_cache(maxsize=1)
def go_version() -> str:
    _require_go()
    out = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True, check=True, env=go_env())
    return out.stdout.strip()


@lru_cache(maxsize=1)
def go_mod_cache() -> Path:
    _require_go()
    out = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True, env=go_env())
    return Path(out.stdout.strip())


def _escape_module_path(path: str) -> str:
    """The module cache's case encoding: every upper-case letter becomes ``!`` plus its lower-case form."""
    return "".join(f"!{c.lower()}" if c.isupper() else c for c in path)


def _run(cmd: list[str], cwd: Path | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=go_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed in {cwd}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc.stdout


def module_dir(module: str, version: str) -> Path:
    """Download a module through the proxy (no build) and return its read-only source directory.

    A module already extracted in the module cache is returned without running ``go`` (tests call this at setup).
    """
    cached = go_mod_cache() / f"{_escape_module_path(module)}@{_escape_module_path(version)}"
    if (cached / "go.mod").is_file():
        return cached
    with tempfile.TemporaryDirectory() as tmp:
        _run(["go", "mod", "init", "kairay.local/probe"], cwd=Path(tmp))
        info = json.loads(_run(["go", "mod", "download", "-json", f"{module}@{version}"], cwd=Path(tmp)))
    return Path(info["Dir"])


@dataclass
class Binary:
    name: str
    version: str
    build: str  # "install", "kube", "etcd", "source"
    module: str = ""
    package: str = ""
    ldflags: list[str] = field(default_factory=list)
    commands: tuple[str, ...] = ()  # a multi-call binary's names, each a symlink beside it in the cache
    # (file, old, new): exact one-line edits to a "source" build's copy, each required to match once (see KARPENTER)
    patches: tuple[tuple[str, str, str], ...] = ()

    def key(self) -> str:
        parts: list[object] = [self.module, self.package, self.ldflags, self.build]
        if self.commands:  # a multi-call binary: its generated main too
            parts += [list(self.commands), hashlib.sha256(KUBE_MAIN.encode()).hexdigest()]
        if self.patches:
            parts += [[list(p) for p in self.patches]]
        digest = hashlib.sha256(json.dumps(parts).encode()).hexdigest()
        return f"{self.name}-{self.version}-{go_version()}-{digest[:8]}"

    def path(self) -> Path:
        return cache_root() / "bin" / self.key() / self.name


def _kube_ldflags() -> list[str]:
    major, minor = K8S_VERSION.lstrip("v").split(".")[:2]
    pkg = "k8s.io/component-base/version"
    return [
        "-s",
        "-w",
        f"-X {pkg}.gitVersion={K8S_VERSION}",
        f"-X {pkg}.gitMajor={major}",
        f"-X {pkg}.gitMinor={minor}",
        f"-X {pkg}.gitTreeState=clean",
        f"-X {pkg}.buildDate=2026-01-01T00:00:00Z",
    ]


KUBE_COMMANDS = ("kube-apiserver", "kubelet", "kube-controller-manager", "kube-proxy", "kube-scheduler")

BINARIES: dict[str, Binary] = {
    "etcd": Binary("etcd", ETCD_VERSION, "etcd", module="go.etcd.io/etcd/server/v3"),
    "kwok": Binary("kwok", KWOK_VERSION, "install", module=KWOK_MODULE, package=f"{KWOK_MODULE}/cmd/kwok"),
    "kube": Binary(
        "kube", K8S_VERSION, "kube", module="k8s.io/kubernetes", ldflags=_kube_ldflags(), commands=KUBE_COMMANDS
    ),
    "helm": Binary("helm", HELM_VERSION, "install", module="helm.sh/helm/v4", package="helm.sh/helm/v4/cmd/helm"),
    # Not "install": go install reads the module's @v/list for deprecations, which this proxy answers 403.
    "kuberay-operator": Binary("kuberay-operator", KUBERAY_VERSION, "source", module=KUBERAY_MODULE, package="."),
}

# The names the multi-call binary answers to: ``ensure("kubelet")`` builds ``kube`` and returns its kubelet link.
ALIASES: dict[str, str] = dict.fromkeys(KUBE_COMMANDS, "kube")

# The real-node lane's cluster DNS (tests/realnode): built when that lane first starts, not by default, because the
# KWOK-only path never needs it (CI runs the lane, so CI builds it there).
REALNODE: dict[str, Binary] = {
    "coredns": Binary("coredns", COREDNS_VERSION, "source", module="github.com/coredns/coredns", package="."),
}

# The node-autoscaling lane's Karpenter (its KWOK cloud provider, tests/k8s/autoscaling): built when that lane first
# starts, not by default, because no other test needs it.
# Karpenter's manager binds its metrics and health ports on every interface (``fmt.Sprintf(":%d", ...)``, no flag for
# the address); the tests listen on loopback only, so the build's copy says 127.0.0.1 there and nothing else changes.
KARPENTER_LOOPBACK = tuple(
    (
        "pkg/operator/operator.go",
        f'fmt.Sprintf(":%d", options.FromContext(ctx).{port})',
        f'fmt.Sprintf("127.0.0.1:%d", options.FromContext(ctx).{port})',
    )
    for port in ("MetricsPort", "HealthProbePort")
)
AUTOSCALING: dict[str, Binary] = {
    "karpenter-kwok": Binary(
        "karpenter-kwok",
        KARPENTER_VERSION,
        "source",
        module=KARPENTER_MODULE,
        package="./kwok",
        patches=KARPENTER_LOOPBACK,
    ),
}

# Only ``kai-ray bench vs-kai`` runs KAI's own scheduler and binder: built on its first use, never by default (CI and
# the tests never need them; a cold build takes ~15 minutes on two cores).
OPTIONAL: dict[str, Binary] = {
    "kai-scheduler": Binary("kai-scheduler", KAI_VERSION, "source", module=KAI_MODULE, package="./cmd/scheduler"),
    "kai-binder": Binary("kai-binder", KAI_VERSION, "source", module=KAI_MODULE, package="./cmd/binder"),
}

KUBE_MAIN = """package main

import (
\t"context"
\t"fmt"
\t"os"
\t"path/filepath"
\t"sort"
\t_ "time/tzdata"

\t"github.com/spf13/cobra"
\t"k8s.io/component-base/cli"
\t_ "k8s.io/component-base/logs/json/register"
\t_ "k8s.io/component-base/metrics/prometheus/clientgo"
\t_ "k8s.io/component-base/metrics/prometheus/version"
\tapiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
\tcontrollermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
\tproxy "k8s.io/kubernetes/cmd/kube-proxy/app"
\tscheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
\tkubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

var commands = map[string]func() *cobra.Command{
\t"kube-apiserver":          apiserver.NewAPIServerCommand,
\t"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
\t"kube-controller-manager": controllermanager.NewControllerManagerCommand,
\t"kube-proxy":              proxy.NewProxyCommand,
\t"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
}

func names() []string {
\tall := []string{}
\tfor name := range commands {
\t\tall = append(all, name)
\t}
\tsort.Strings(all)
\treturn all
}

func main() {
\tname := filepath.Base(os.Args[0])
\tif _, ok := commands[name]; !ok && len(os.Args) > 1 {
\t\tname, os.Args = os.Args[1], os.Args[1:]
\t}
\tnewCommand, ok := commands[name]
\tif !ok {
\t\tfmt.Fprintln(os.Stderr, "usage: kube COMMAND [flags]; a COMMAND is one of", names())
\t\tos.Exit(2)
\t}
\tos.Exit(cli.Run(newCommand()))
}
"""

ETCD_MAIN = """package main

import (
\t"os"

\t"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
\tetcdmain.Main(os.Args)
}
"""


def _wrapper(work: Path, main_src: str, require: str, version: str) -> None:
    (work / "cmd").mkdir(parents=True)
    (work / "cmd" / "main.go").write_text(main_src)
    _run(["go", "mod", "init", "kairay.local/wrapper"], cwd=work)
    _run(["go", "mod", "edit", "-go=1.26.0", f"-require={require}@{version}"], cwd=work)


def _build_kube(b: Binary, work: Path, out: Path) -> None:
    _wrapper(work, KUBE_MAIN, b.module, b.version)
    upstream = json.loads(_run(["go", "mod", "download", "-json", f"{b.module}@{b.version}"], cwd=work))
    mod = json.loads(_run(["go", "mod", "edit", "-json", upstream["GoMod"]], cwd=work))
    staging = "v0." + b.version.lstrip("v").split(".", 1)[1]
    edits = [
        f"-replace={r['Old']['Path']}={r['Old']['Path']}@{staging}"
        for r in mod.get("Replace") or []
        if r["New"]["Path"].startswith("./staging/")
    ]
    _run(["go", "mod", "edit", *edits], cwd=work)
    with open(work / "go.mod", "a") as fh:
        fh.write("\ngodebug default=go1.26\n")
    _run(["go", "mod", "tidy"], cwd=work)
    _run(["go", "build", "-p", "2", "-o", str(out), "-ldflags", " ".join(b.ldflags), "./cmd"], cwd=work)


def _build_etcd(b: Binary, work: Path, out: Path) -> None:
    _wrapper(work, ETCD_MAIN, b.module, b.version)
    _run(["go", "mod", "tidy"], cwd=work)
    _run(["go", "build", "-o", str(out), "-ldflags", "-s -w", "./cmd"], cwd=work)


def _build_install(b: Binary, work: Path, out: Path) -> None:
    env_bin = work / "gobin"
    proc = subprocess.run(
        ["go", "install", "-ldflags", "-s -w", f"{b.package}@{b.version}"],
        env={**go_env(), "GOBIN": str(env_bin)},
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"go install {b.package}@{b.version} failed:\n{proc.stderr[-4000:]}")
    built = next(env_bin.iterdir())
    shutil.move(str(built), out)


def _build_source(b: Binary, work: Path, out: Path) -> None:
    """Build inside a writable copy of the module, as the main module, with its own go.mod and go.sum."""
    src = work / "src"
    shutil.copytree(module_dir(b.module, b.version), src)
    for path in [src, *src.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | 0o200)
    for rel, old, new in b.patches:
        text = (src / rel).read_text()
        if text.count(old) != 1:
            raise RuntimeError(f"{b.name} {b.version}: {rel} does not contain {old!r} exactly once; update its patch")
        (src / rel).write_text(text.replace(old, new))
    _run(["go", "build", "-o", str(out), "-ldflags", "-s -w", b.package or "."], cwd=src)


def binary(name: str) -> Binary:
    """The recipe for ``name`` (a multi-call binary's command name resolves to that binary)."""
    name = ALIASES.get(name, name)
    for table in (BINARIES, REALNODE, AUTOSCALING, OPTIONAL):
        if name in table:
            return table[name]
    raise KeyError(name)


def ensure(name: str, log: bool = True) -> Path:
    """Return the cached binary, building it first if missing (for a command of ``kube``: its symlink)."""
    b = binary(name)
    target = b.path()
    if target.exists():
        return target.parent / name if name in b.commands else target
    target.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    if log:
        print(f"[kai-ray] building {b.name} {b.version} (cold)...", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix=f"kai-ray-{name}-") as tmp:
        work = Path(tmp)
        partial = target.with_suffix(".partial")
        {"kube": _build_kube, "etcd": _build_etcd, "install": _build_install, "source": _build_source}[b.build](
            b, work, partial
        )
        for command in b.commands:
            link = target.parent / command
            link.unlink(missing_ok=True)
            link.symlink_to(b.name)
        partial.rename(target)
    if log:
        print(f"[kai-ray] built {b.name} in {time.monotonic() - start:.0f}s -> {target}", file=sys.stderr, flush=True)
    return target.parent / name if name in b.commands else target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "names",
        nargs="*",
        default=list(BINARIES),
        help=f"binaries to build (default: all but {', '.join([*REALNODE, *AUTOSCALING, *OPTIONAL])})",
    )
    args = parser.parse_args(argv)
    known = {*BINARIES, *ALIASES, *REALNODE, *AUTOSCALING, *OPTIONAL}
    unknown = [n for n in args.names if n not in known]
    if unknown:
        parser.error(f"unknown binaries: {', '.join(unknown)}")
    try:
        for name in args.names:
            print(ensure(name))
    except GoMissing as exc:
        print(f"kai-ray: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

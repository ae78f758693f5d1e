"""Container images for the real-node lane, built with podman without a registry and cached by content hash.

Why this shape: the development and CI machines have podman and the Debian and PyPI package registries, but no Docker
engine and no image registry, so no base image can be pulled. Every image here starts FROM scratch (a static busybox)
or from a Debian bookworm root filesystem made by ``mmdebstrap`` and ``podman import``-ed. The operator image is built
from ``operators/Dockerfile`` itself (its base is the ``PYTHON_IMAGE`` build argument), so the lane proves the file
users build, not a copy of it.

Each image is keyed by a hash of everything that goes into it (the recipe, the Dockerfile, the files it copies, the
package lists and pinned versions, the hash of the image it is built on) and saved as a docker-archive under
``~/.cache/kai-ray/images/<name>-<hash12>.tar``. A warm call hashes the inputs and finds the archive: no podman, well
under a second. podman runs with a private storage under ``~/.cache/kai-ray/podman`` and a throw-away run root, so the
host's ``/var/lib/containers`` is untouched; only the images others are built on stay in that storage.

``python -m kai_ray.testing.images NAME...`` builds and prints each image's reference, size and build time.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kai_ray.testing.controlplane.build import cache_root

# Bump when a recipe changes in a way its hashed inputs do not show.
RECIPE_VERSION = "1"
SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
REPO_ROOT = Path(__file__).resolve().parents[2]
NAMES = ("pause", "busybox", "base", "operator", "ray")
IMAGE_RAY_EXTRAS = ("train",)  # the headline's Ray Train v2 job
KEEP_VERSIONS = 3  # archives kept per image (the most recently used), for checkouts at different commits

_APT_PACKAGES = {"podman": "podman", "runc": "runc", "mmdebstrap": "mmdebstrap", "ctr": "containerd"}
_BUSYBOX = Path("/bin/busybox")
_BUILD_CA = "/etc/ssl/certs/ca-certificates.crt"
_CONTAINERS_CONF = """\
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
# libpod's state database stays at its default, beside the storage: conmon starts `podman container cleanup` without
# this file, and unless the cleanup finds the container there `podman run` and `podman wait` hang 20 s.
tmp_dir = "{tmp}/tmp"
volume_path = "{tmp}/volumes"

[network]
network_config_dir = "{tmp}/networks"
"""
_PAUSE_CONTAINERFILE = """\
FROM scratch
COPY busybox /bin/busybox
ENTRYPOINT ["/bin/busybox", "sh", "-c", "trap 'exit 0' TERM INT; while :; do /bin/busybox sleep 86400 & wait $!; done"]
"""
_BUSYBOX_CONTAINERFILE = """\
FROM scratch
COPY rootfs/ /
ENV PATH=/bin
CMD ["sh"]
"""
_RAY_DEPS_CONTAINERFILE = """\
ARG BASE
FROM ${BASE}
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 VIRTUAL_ENV=/opt/ray \\
    PATH=/opt/ray/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
COPY requirements.txt /tmp/requirements.txt
RUN python3 -m venv /opt/ray \\
 && /opt/ray/bin/pip install -r /tmp/requirements.txt \\
 && rm /tmp/requirements.txt \\
 && echo 'export PATH=/opt/ray/bin:$PATH' > /etc/profile.d/ray-venv.sh
CMD ["bash"]
"""
_RAY_CONTAINERFILE = """\
ARG BASE
FROM ${BASE} AS build
COPY src /src
RUN pip wheel --no-deps -w /dist /src
FROM ${BASE}
COPY --from=build /dist /dist
RUN pip install "$(ls /dist/kai_ray-*.whl)[ray]" && rm -rf /dist
"""


class ImageBuildError(RuntimeError):
    """The host cannot build or import an image; the message is one line that says why."""


@dataclass(frozen=True)
class Image:
    """A built image: its reference in podman's and containerd's stores and its docker-archive on disk."""

    name: str
    ref: str
    archive: Path
    size_bytes: int
    build_seconds: float
    cached: bool = False


def images_dir() -> Path:
    return cache_root() / "images"


def ensure_image(name: str) -> Image:
    """Return the image ``name``, building it (and the images it is built on) when its archive is missing."""
    recipe = _recipe(name)
    archive = images_dir() / f"{name}-{recipe.digest[:12]}.tar"
    if archive.is_file():
        with contextlib.suppress(OSError):
            os.utime(archive)  # most recently used: the last to be forgotten
        return _image(recipe, archive, cached=True)
    for dependency in recipe.needs:
        ensure_image(dependency)
    _ensure_commands("podman", "runc", *recipe.commands)
    with podman_session() as podman:
        if archive.is_file():  # another process built it while this one waited
            return _image(recipe, archive, cached=True)
        for dependency in recipe.needs:
            _load(podman, _recipe(dependency))
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"kai-ray-image-{name}-") as workdir:
            recipe.build(podman, recipe, Path(workdir))
        elapsed = time.monotonic() - started
        partial = archive.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        podman("save", "--format", "docker-archive", "-o", str(partial), recipe.ref, timeout=900)
        _meta_path(archive).write_text(json.dumps({"ref": recipe.ref, "build_seconds": round(elapsed, 1)}))
        partial.rename(archive)
        _forget_older(podman, recipe, archive)
    return _image(recipe, archive, cached=False)


def import_to_containerd(image: Image, address: str, namespace: str = "k8s.io") -> None:
    """Import ``image`` into the containerd at ``address`` (a socket path) unless it already holds its reference.

    Pods then use it with ``imagePullPolicy: Never`` (or ``IfNotPresent``): nothing is pulled.
    """
    _ensure_commands("ctr")
    ctr = ["ctr", "--address", address, "-n", namespace]
    listed = _run([*ctr, "images", "ls", "-q"], timeout=120)
    if image.ref in listed.split():
        return
    _run([*ctr, "images", "import", str(image.archive)], timeout=900)
    if image.ref not in _run([*ctr, "images", "ls", "-q"], timeout=120).split():
        raise ImageBuildError(f"ctr imported {image.archive} but containerd at {address} does not list {image.ref}")


def build_host_problem() -> str | None:
    """Why this host cannot build images (one line), or None; it installs nothing."""
    if sys.platform != "linux":
        return f"building images needs Linux (podman, mmdebstrap), not {sys.platform}"
    missing = [package for command, package in _APT_PACKAGES.items() if shutil.which(command) is None]
    if not _busybox_is_static():
        missing.append("busybox-static")
    if missing and shutil.which("apt-get") is None:
        return f"building images needs the Debian packages {', '.join(missing)} and this host has no apt-get"
    if missing and os.geteuid() != 0:
        return f"building images needs the Debian packages {', '.join(missing)} (apt-get install needs root)"
    if os.geteuid() != 0:
        return "building images needs root (podman with a private storage, mmdebstrap --mode=root)"
    return None


# --- recipes -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Recipe:
    name: str
    digest: str
    build: Callable[[Podman, _Recipe, Path], None]
    needs: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    keep: bool = False  # stays in podman's storage: other images are built on it

    @property
    def ref(self) -> str:
        return f"localhost/kai-ray-{self.name}:{self.digest[:12]}"


def _recipe(name: str) -> _Recipe:
    if name == "pause":
        return _Recipe(name, _digest(name, _PAUSE_CONTAINERFILE, _file_digest(_busybox())), _build_pause)
    if name == "busybox":
        return _Recipe(name, _digest(name, _BUSYBOX_CONTAINERFILE, _file_digest(_busybox())), _build_busybox)
    if name == "base":
        return _Recipe(
            name,
            _digest(name, SUITE, *BASE_PACKAGES, *_debian_sources()),
            _build_base,
            commands=("mmdebstrap",),
            keep=True,
        )
    if name == "operator":
        dockerfile = (REPO_ROOT / "operators" / "Dockerfile").read_text()
        return _Recipe(
            name,
            _digest(name, dockerfile, _recipe("base").digest, _tree_digest(_wheel_sources(operators=True))),
            _build_operator,
            needs=("base",),
        )
    if name == "ray-deps":
        return _Recipe(
            name,
            _digest(name, _RAY_DEPS_CONTAINERFILE, _recipe("base").digest, *_ray_requirements()),
            _build_ray_deps,
            needs=("base",),
            keep=True,
        )
    if name == "ray":
        return _Recipe(
            name,
            _digest(name, _RAY_CONTAINERFILE, _recipe("ray-deps").digest, _tree_digest(_wheel_sources())),
            _build_ray,
            needs=("ray-deps",),
        )
    raise ImageBuildError(f"unknown image {name!r}: expected one of {', '.join(NAMES)}")


def _build_pause(podman: Podman, recipe: _Recipe, workdir: Path) -> None:
    shutil.copy2(_busybox(), workdir / "busybox")
    _containerfile_build(podman, recipe, workdir, _PAUSE_CONTAINERFILE)


def _build_busybox(podman: Podman, recipe: _Recipe, workdir: Path) -> None:
    rootfs = workdir / "rootfs"
    for directory in ("bin", "etc", "root", "tmp"):
        (rootfs / directory).mkdir(parents=True)
    (rootfs / "tmp").chmod(0o1777)
    shutil.copy2(_busybox(), rootfs / "bin" / "busybox")
    applets = _run([str(_busybox()), "--list"], timeout=60).split()
    for applet in applets:
        if applet != "busybox":
            (rootfs / "bin" / applet).symlink_to("busybox")
    (rootfs / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")
    (rootfs / "etc" / "group").write_text("root:x:0:\nnogroup:x:65534:\n")
    _containerfile_build(podman, recipe, workdir, _BUSYBOX_CONTAINERFILE)


def _build_base(podman: Podman, recipe: _Recipe, workdir: Path) -> None:
    tarball = workdir / "rootfs.tar"
    excluded = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*")
    _run(
        [
            "mmdebstrap", "--mode=root", "--variant=minbase", "--quiet", f"--include={','.join(BASE_PACKAGES)}",
            *(f"--dpkgopt=path-exclude={path}" for path in excluded),
            "--dpkgopt=path-include=/usr/share/doc/*/copyright",
            SUITE, str(tarball), *_debian_sources(),
        ],
        timeout=1800, log=_build_log(recipe.ref),
    )  # fmt: skip
    podman(
        "import",
        "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--change", "ENV LANG=C.UTF-8",
        "--change", 'CMD ["bash"]',
        str(tarball), recipe.ref,
        timeout=600,
    )  # fmt: skip


def _build_operator(podman: Podman, recipe: _Recipe, workdir: Path) -> None:
    context = workdir / "context"
    _copy_sources(context, _wheel_sources(operators=True))
    podman.build(context, context / "operators" / "Dockerfile", recipe.ref, {"PYTHON_IMAGE": _recipe("base").ref})


def _build_ray_deps(podman: Podman, recipe: _Recipe, workdir: Path) -> None:
    (workdir / "requirements.txt").write_text("\n".join(_ray_requirements()) + "\n")
    _containerfile_build(podman, recipe, workdir, _RAY_DEPS_CONTAINERFILE, {"BASE": _recipe("base").ref})


def _build_ray(podman: Podman, recipe: _Recipe, workdir: Path) -> None:
    _copy_sources(workdir / "src", _wheel_sources())
    _containerfile_build(podman, recipe, workdir, _RAY_CONTAINERFILE, {"BASE": _recipe("ray-deps").ref})


def _containerfile_build(
    podman: Podman, recipe: _Recipe, workdir: Path, text: str, build_args: dict[str, str] | None = None
) -> None:
    (workdir / "Containerfile").write_text(text)
    podman.build(workdir, workdir / "Containerfile", recipe.ref, build_args or {})


# --- inputs --------------------------------------------------------------------------------------------------------


def _digest(*parts: str) -> str:
    h = hashlib.sha256(RECIPE_VERSION.encode())
    for part in parts:
        h.update(b"\0" + part.encode())
    return h.hexdigest()


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tree_digest(files: dict[str, Path]) -> str:
    h = hashlib.sha256()
    for relative, path in sorted(files.items()):
        h.update(f"{relative}\0{path.stat().st_mode & 0o111:o}\0".encode())
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def _wheel_sources(operators: bool = False) -> dict[str, Path]:
    """The files kai-ray's wheel is built from (relative path -> path), plus the operators' kopf entrypoints.

    The test tooling and the benchmarks are left out: the wheel excludes them, so they cannot change an image.
    """
    files = {name: REPO_ROOT / name for name in ("pyproject.toml", "README.md", "LICENSE")}
    package = REPO_ROOT / "kai_ray"
    for path in package.rglob("*"):
        relative = path.relative_to(REPO_ROOT)
        parts = relative.parts
        if (
            path.is_file()
            and parts[1] not in ("testing", "bench")
            and "__pycache__" not in parts
            and path.suffix not in (".pyc", ".pyo")
        ):
            files[relative.as_posix()] = path
    if operators:
        for name in ("Dockerfile", "podgrouper.py", "scheduler.py"):
            files[f"operators/{name}"] = REPO_ROOT / "operators" / name
    return files


def _copy_sources(destination: Path, files: dict[str, Path]) -> None:
    for relative, path in files.items():
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)


def _ray_requirements() -> list[str]:
    """Ray at the version pyproject.toml pins, and kai-ray's own dependencies, so the wheel's layer adds only itself.

    The image adds Ray's ``train`` extra to the pin: the headline's training is a Ray Train v2 job
    (``examples/headline/train_v2.py``), and Ray Train is what a Ray image for training carries. The ``ray`` extra of
    the package keeps it out, because the autoscaler hook needs none of it.
    """
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    ray = [spec for spec in project["optional-dependencies"]["ray"] if spec.startswith("ray")]
    pin = re.fullmatch(r"ray\[([a-z,]+)\]==(\S+)", ray[0]) if ray else None
    if pin is None:
        raise ImageBuildError("pyproject.toml: [project.optional-dependencies] ray must pin ray[...]==VERSION")
    extras = sorted({*pin.group(1).split(","), *IMAGE_RAY_EXTRAS})
    return [f"ray[{','.join(extras)}]=={pin.group(2)}", *project["dependencies"]]


def _debian_sources() -> tuple[str, ...]:
    mirror = os.environ.get("KAI_RAY_DEBIAN_MIRROR", "http://deb.debian.org/debian")
    security = os.environ.get("KAI_RAY_DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security")
    return (
        f"deb {mirror} {SUITE} main",
        f"deb {mirror} {SUITE}-updates main",
        f"deb {security} {SUITE}-security main",
    )


def _busybox() -> Path:
    if not _busybox_is_static():
        _ensure_packages(["busybox-static"])
    return _BUSYBOX


def _busybox_is_static() -> bool:
    """Debian's ``busybox-static`` puts a static binary at /bin/busybox (``busybox`` a dynamic one)."""
    try:
        with _BUSYBOX.open("rb") as f:
            header = f.read(64)
            if header[:4] != b"\x7fELF" or header[4] != 2:
                return False
            phoff = int.from_bytes(header[32:40], "little")
            phentsize = int.from_bytes(header[54:56], "little")
            phnum = int.from_bytes(header[56:58], "little")
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError:
        return False
    pt_interp = 3
    return all(int.from_bytes(table[i * phentsize : i * phentsize + 4], "little") != pt_interp for i in range(phnum))


# --- host ----------------------------------------------------------------------------------------------------------


def _ensure_commands(*commands: str) -> None:
    _ensure_packages([_APT_PACKAGES[command] for command in commands if shutil.which(command) is None])


def _ensure_packages(packages: list[str]) -> None:
    """``apt-get install`` the Debian packages when missing; ``apt-get update`` first only when the lists lack them."""
    if not packages:
        return
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise ImageBuildError(f"cannot build images: Debian packages {', '.join(packages)} are missing ({_why_not()})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=600", *packages]
    done = subprocess.run(install, capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        subprocess.run(
            ["apt-get", "update", "-o", "DPkg::Lock::Timeout=600"], capture_output=True, env=env, timeout=900
        )
        done = subprocess.run(install, capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        raise ImageBuildError(f"apt-get install {' '.join(packages)} failed: {_last_line(done.stderr or done.stdout)}")


def _why_not() -> str:
    return "this host has no apt-get" if shutil.which("apt-get") is None else "apt-get install needs root"


def _run(argv: list[str], timeout: float, env: dict[str, str] | None = None, log: Path | None = None) -> str:
    """Run a command; a failure is one line (its last line of output, and where the whole output was kept)."""
    kept = f" (full output: {log})" if log else ""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        if log:
            log.write_text(f"$ {' '.join(argv)}\n{_text(e.stdout)}\n{_text(e.stderr)}")
        raise ImageBuildError(f"{' '.join(argv[:3])} ... did not finish in {timeout:.0f} s{kept}") from e
    if log:
        log.write_text(f"$ {' '.join(argv)}\n{done.stdout}\n{done.stderr}")
    if done.returncode != 0:
        raise ImageBuildError(
            f"{' '.join(argv[:3])} ... exited {done.returncode}: {_last_line(done.stderr or done.stdout)}{kept}"
        )
    return done.stdout


def _text(output: str | bytes | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One builder at a time per cache: podman's private storage and the archives are shared by every checkout."""
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class Podman:
    """podman with the lane's own storage and configuration; the run root and temporary state are throw-away."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        (tmp / "containers.conf").write_text(_CONTAINERS_CONF.format(tmp=tmp))
        (tmp / "registries.conf").write_text('unqualified-search-registries = []\nshort-name-mode = "disabled"\n')
        storage = cache_root() / "podman"
        (tmp / "storage.conf").write_text(
            f'[storage]\ndriver = "overlay"\ngraphroot = "{storage}"\nrunroot = "{tmp}/run"\n'
        )
        # pip inside a build needs the host's CA bundle (a package registry's TLS may be intercepted) and its index.
        (tmp / "pip.conf").write_text(
            "[global]\n" f"cert = {_BUILD_CA}\n" "timeout = 180\n"
            + "".join(f"{key} = {os.environ[var]}\n" for key, var in _PIP_ENV.items() if os.environ.get(var))
        )  # fmt: skip
        self.env = {
            **os.environ,
            "CONTAINERS_CONF": str(tmp / "containers.conf"),
            "CONTAINERS_REGISTRIES_CONF": str(tmp / "registries.conf"),
            "CONTAINERS_STORAGE_CONF": str(tmp / "storage.conf"),
            "TMPDIR": str(tmp),
        }

    def __call__(self, *args: str, timeout: float = 300, log: Path | None = None) -> str:
        return _run(["podman", *args], timeout=timeout, env=self.env, log=log)

    def build(self, context: Path, containerfile: Path, ref: str, build_args: dict[str, str]) -> None:
        self(
            "build", "--pull=never", "--network=host", "--layers=false", "--force-rm",
            "-v", f"{_host_ca_bundle()}:{_BUILD_CA}:ro", "-v", f"{self.tmp / 'pip.conf'}:/etc/pip.conf:ro",
            *(f"--build-arg={key}={value}" for key, value in build_args.items()),
            "-f", str(containerfile), "-t", ref, str(context),
            timeout=1800, log=_build_log(ref),
        )  # fmt: skip


_PIP_ENV = {"index-url": "PIP_INDEX_URL", "extra-index-url": "PIP_EXTRA_INDEX_URL", "trusted-host": "PIP_TRUSTED_HOST"}


def _host_ca_bundle() -> str:
    for candidate in (
        os.environ.get("PIP_CERT"),
        os.environ.get("SSL_CERT_FILE"),
        ssl.get_default_verify_paths().cafile,
    ):
        if candidate and Path(candidate).is_file():
            return candidate
    return _BUILD_CA


@contextlib.contextmanager
def podman_session() -> Iterator[Podman]:
    """podman on the lane's private storage, one session at a time (the storage and the archives are shared)."""
    images_dir().mkdir(parents=True, exist_ok=True)
    with _locked(images_dir() / ".lock"), tempfile.TemporaryDirectory(prefix="kai-ray-podman-") as tmp:
        podman = Podman(Path(tmp))
        try:
            yield podman
        finally:
            with contextlib.suppress(ImageBuildError):
                podman("image", "prune", "-f", timeout=300)


def _load(podman: Podman, recipe: _Recipe) -> None:
    """Put an image others are built on into podman's storage, from its archive when the storage lost it."""
    if subprocess.run(["podman", "image", "exists", recipe.ref], env=podman.env, capture_output=True).returncode == 0:
        return
    podman("load", "-i", str(images_dir() / f"{recipe.name}-{recipe.digest[:12]}.tar"), timeout=900)


def _forget_older(podman: Podman, recipe: _Recipe, archive: Path) -> None:
    """Keep the most recently used archives of an image, and in podman's storage only the images others are built on.

    Several, not one: checkouts at different commits share the cache, and keeping only the newest made each rebuild
    the others' images (and could delete an archive another checkout was about to import).
    """
    pattern = re.compile(rf"{re.escape(recipe.name)}-([0-9a-f]{{12}})\.tar")
    versions = [path for path in images_dir().glob(f"{recipe.name}-*.tar") if pattern.fullmatch(path.name)]
    versions.sort(key=lambda path: path.stat().st_mtime, reverse=True)
    kept = {archive, *versions[:KEEP_VERSIONS]}
    for old in versions:
        if old not in kept:
            old.unlink(missing_ok=True)
            _meta_path(old).unlink(missing_ok=True)
    kept_tags = {path.name.removesuffix(".tar").rsplit("-", 1)[1] for path in kept}
    repository = recipe.ref.rsplit(":", 1)[0]
    listed = podman("images", "--format", "{{.Repository}}:{{.Tag}}", "--filter", f"reference={repository}")
    stale = [ref for ref in listed.split() if not recipe.keep or ref.rsplit(":", 1)[1] not in kept_tags]
    if stale:
        podman("rmi", "--force", *stale)


def _build_log(ref: str) -> Path:
    """The last build's output of an image, kept beside the archives (``localhost/kai-ray-NAME:hash`` -> NAME)."""
    return images_dir() / f"{ref.rsplit('/', 1)[-1].split(':')[0].removeprefix('kai-ray-')}.build.log"


def _meta_path(archive: Path) -> Path:
    return archive.with_suffix(".json")


def _image(recipe: _Recipe, archive: Path, cached: bool) -> Image:
    try:
        build_seconds = float(json.loads(_meta_path(archive).read_text())["build_seconds"])
    except (OSError, ValueError, KeyError):
        build_seconds = 0.0
    return Image(recipe.name, recipe.ref, archive, archive.stat().st_size, build_seconds, cached)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kai_ray.testing.images", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+", metavar="NAME", choices=NAMES, help=" | ".join(NAMES))
    parser.add_argument("--containerd", metavar="ADDRESS", help="also import into the containerd at this socket")
    args = parser.parse_args(argv)
    try:
        for name in args.names:
            started = time.monotonic()
            image = ensure_image(name)
            if args.containerd:
                import_to_containerd(image, args.containerd)
            took = time.monotonic() - started
            state = "cached" if image.cached else f"built in {image.build_seconds:.0f} s"
            print(f"{image.name}\t{image.ref}\t{image.size_bytes / 2**20:.0f} MiB\t{state}\t{took:.2f} s")
    except ImageBuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

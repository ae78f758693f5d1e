"""The real-node lane's images, built with podman from Debian packages and cached by content hash.

Each image is built for real (the first run of the lane pays for it, later runs find the archive) and then run with
podman on the lane's private storage, or imported into a containerd this test starts: the operator image is
``operators/Dockerfile`` itself, so a passing run here is the proof that users' build of that file works on a Debian
Python base.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kai_ray.testing import images
from kai_ray.testing.images import Image

pytestmark = [pytest.mark.realnode, pytest.mark.slow, pytest.mark.timeout(3600)]


@pytest.fixture(scope="module", autouse=True)
def _builder_host() -> None:
    problem = images.build_host_problem()
    if problem and os.environ.get("CI") == "true":
        pytest.fail(f"the real-node lane cannot build its images on CI: {problem}", pytrace=False)
    if problem:
        pytest.skip(problem)


@pytest.fixture
def started_processes(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every process started through ``subprocess`` while the test runs (podman, ctr, apt-get: all go through it)."""
    started: list[Any] = []
    real_init = subprocess.Popen.__init__

    def spy(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        started.append(args)
        real_init(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", spy)
    return started


@pytest.mark.parametrize("name", images.NAMES)
def test_each_image_builds_once_and_a_second_call_is_a_cache_hit_without_podman(
    name: str, started_processes: list[Any]
) -> None:
    image = images.ensure_image(name)
    assert image.name == name
    assert image.ref.startswith(f"localhost/kai-ray-{name}:")
    assert image.archive.is_file() and image.archive.parent == images.images_dir()
    assert image.size_bytes == image.archive.stat().st_size > 0
    with tarfile.open(image.archive) as archive:
        manifest = json.load(archive.extractfile("manifest.json"))  # type: ignore[arg-type]
    assert manifest[0]["RepoTags"] == [image.ref]

    started_processes.clear()
    began = time.monotonic()
    again = images.ensure_image(name)
    took = time.monotonic() - began
    assert again.cached
    assert (again.ref, again.archive, again.size_bytes) == (image.ref, image.archive, image.size_bytes)
    assert started_processes == []
    assert took < 1.0, f"a warm ensure_image({name!r}) took {took:.2f} s"


@pytest.fixture
def podman() -> Iterator[images.Podman]:
    with images.podman_session() as session:
        yield session


def loaded(podman: images.Podman, image: Image) -> str:
    podman("load", "-i", str(image.archive), timeout=900)
    return image.ref


def test_the_operator_image_prints_kai_ray_help_as_65532_on_a_read_only_root() -> None:
    image = images.ensure_image("operator")
    with images.podman_session() as podman:
        ref = loaded(podman, image)
        try:
            config = json.loads(podman("image", "inspect", ref))[0]["Config"]
            assert config["User"] == "65532:65532"
            run = ["run", "--rm", "--network=none", "--read-only", ref]
            help_text = podman(*run, timeout=300)
            uid = podman(*run, "python3", "-c", "import os; print(os.getuid(), os.getgid())", timeout=300)
        finally:
            podman("rmi", "--force", ref)
    assert "Usage: kai-ray" in help_text and "operator" in help_text
    assert uid.split() == ["65532", "65532"]


def test_the_ray_image_has_the_pinned_ray_and_the_kai_ray_autoscaler_on_a_login_shells_path() -> None:
    project = tomllib.loads((images.REPO_ROOT / "pyproject.toml").read_text())["project"]
    pinned = next(
        s.split("==")[1] for s in project["optional-dependencies"]["ray"] if s.startswith("ray[") and "==" in s
    )
    image = images.ensure_image("ray")
    probe = (
        "python -c 'import ray, kai_ray.autoscaler.entrypoint, kai_ray.autoscaler.providers; print(ray.__version__)'"
        " && ray --version"
    )
    with images.podman_session() as podman:
        ref = loaded(podman, image)
        try:
            # KubeRay starts Ray containers through `/bin/bash -lc`: Debian's /etc/profile resets PATH there.
            out = podman("run", "--rm", "--network=none", ref, "bash", "-lc", probe, timeout=600)
        finally:
            podman("rmi", "--force", ref)
    assert out.split()[0] == pinned
    assert f"version {pinned}" in out


@pytest.fixture
def containerd(tmp_path: Path) -> Iterator[str]:
    """A private containerd (no CRI): root, state and socket under the test's directory; stopped by its process."""
    images._ensure_commands("ctr")
    address = str(tmp_path / "containerd.sock")
    config = tmp_path / "config.toml"
    config.write_text(
        "version = 2\n"
        f'root = "{tmp_path / "root"}"\nstate = "{tmp_path / "state"}"\n'
        'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
        f'[grpc]\naddress = "{address}"\n[ttrpc]\naddress = "{address}.ttrpc"\n'
        f'[debug]\naddress = ""\n[metrics]\naddress = ""\n'
    )
    log = (tmp_path / "containerd.log").open("w")
    process = subprocess.Popen(["containerd", "--config", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while subprocess.run(["ctr", "--address", address, "version"], capture_output=True).returncode != 0:
            assert process.poll() is None, (tmp_path / "containerd.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "containerd did not answer within 60 s"
        yield address
    finally:
        process.terminate()
        process.wait(timeout=60)
        log.close()


@pytest.mark.parametrize("name", ["pause", "operator"])
def test_an_image_imported_into_containerd_is_listed_by_its_ref_and_a_second_import_is_skipped(
    name: str, containerd: str, started_processes: list[Any]
) -> None:
    image = images.ensure_image(name)
    images.import_to_containerd(image, containerd, namespace="k8s.io")
    listed = subprocess.run(
        ["ctr", "--address", containerd, "-n", "k8s.io", "images", "ls", "-q"], capture_output=True, text=True
    ).stdout.split()
    assert image.ref in listed
    started_processes.clear()
    images.import_to_containerd(image, containerd, namespace="k8s.io")
    assert [argv[-3:] for argv in started_processes] == [["images", "ls", "-q"]]


def test_an_unknown_image_name_is_one_line() -> None:
    with pytest.raises(images.ImageBuildError, match=r"^unknown image 'nope': expected one of pause, busybox"):
        images.ensure_image("nope")
    assert os.path.isdir(images.images_dir())


def test_the_most_recently_used_archives_of_an_image_are_kept_and_no_other_images(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAI_RAY_CACHE", str(tmp_path))
    directory = images.images_dir()
    directory.mkdir(parents=True)
    recipe = images._recipe("ray")
    current = directory / f"ray-{recipe.digest[:12]}.tar"
    older = [directory / f"ray-{digit * 12}.tar" for digit in "abcd"]
    other = directory / f"ray-deps-{'e' * 12}.tar"
    for age, path in enumerate([*older, other, current]):
        path.write_bytes(b"")
        os.utime(path, (1_000_000 + age, 1_000_000 + age))
    with images.podman_session() as podman:
        images._forget_older(podman, recipe, current)
    kept = sorted(path.name for path in directory.glob("*.tar"))
    assert kept == sorted([current.name, other.name, *(path.name for path in older[1 - images.KEEP_VERSIONS :])])

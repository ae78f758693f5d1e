"""The operator image's install, without the image: the wheel plus the ``operator`` extra in a fresh venv.

There is no Docker engine here, so ``operators/Dockerfile`` is never built in CI. This test does what its build stage
does - build the wheel from the checkout, install ``kai_ray-*.whl[operator]`` into a fresh virtual environment (with
the image's Python minor version when this machine has it: ``$KAI_RAY_IMAGE_PYTHON``, ``python3.12`` on PATH or
under pyenv; else the running interpreter) - and then proves two things about that install:

- it carries exactly what the operators import: importing the operator entrypoints pulls in every direct requirement
  of the base and the ``operator`` extra, and nothing of the plotting stack, the Ray extra or the test tooling
  (matplotlib, Pillow, fontTools, pytest) is installed;
- the exact commands and arguments the Helm chart renders (``helm template``: ``kai-ray operator podgrouper|scheduler
  ...``) run from that venv against a real kube-apiserver with KWOK nodes: both become leader, sync, and schedule a
  pod, then stop cleanly on SIGTERM. Two additions only, because the operators run as processes on one loopback
  host instead of in two pods: each is rendered with its own metrics/health ports, and ``--bind-address=127.0.0.1``
  is appended (servers in tests listen on loopback); ``KUBECONFIG`` stands in for the in-cluster service account.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray.k8s.base.rest import Kube, pods_path, queues_path
from kai_ray.testing.controlplane import build
from kai_ray.testing.controlplane.harness import ControlPlane, free_port, kuberay_crd_files, our_crd_dir
from tests.k8s.helpers import bound, pod_body, queue_body, wait_until

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "kai-ray"
RELEASE_NS = "kai-system"
NOT_FOR_OPERATORS = {"matplotlib", "pillow", "fonttools", "contourpy", "kiwisolver", "ray", "pytest"}
# Requirements the operators import only when a feature is used, so importing the entrypoints does not show them.
LAZY = {"croniter": "kai_ray.scheduler.usage, for a usage window given as a cron expression"}

pytestmark = [pytest.mark.slow]


def image_python() -> str:
    """The interpreter for the venv: the operator image's Python minor version (3.12) when available."""
    for candidate in (
        os.environ.get("KAI_RAY_IMAGE_PYTHON"),
        shutil.which("python3.12"),
        str(Path.home() / ".pyenv" / "versions" / "3.12.1" / "bin" / "python3"),
    ):
        if candidate and Path(candidate).is_file():
            works = subprocess.run([candidate, "-c", "import venv, ensurepip"], capture_output=True, timeout=60)
            if works.returncode == 0:  # a pyenv shim answers 127 when that version is not selected
                return candidate
    return sys.executable


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("operator-install")
    dist = work / "dist"
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    (wheel,) = dist.glob("kai_ray-*.whl")
    env = work / "venv"
    subprocess.run([image_python(), "-m", "venv", str(env)], check=True, timeout=300)
    out = subprocess.run(
        [str(env / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", f"{wheel}[operator]"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr
    return env


PROBE = """
import importlib, importlib.metadata as md, json, re, sys
for name in ("kai_ray.cli", "kai_ray.cli.commands", "kai_ray.k8s.kopf_app", "kai_ray.k8s.podgrouping.operator",
             "kai_ray.k8s.scheduling.operator"):
    importlib.import_module(name)
by_module = md.packages_distributions()
imported = {d.lower() for m in list(sys.modules) for d in by_module.get(m.split(".")[0], [])}
installed = {d.metadata["Name"].lower() for d in md.distributions()}
direct = []
for req in md.requires("kai-ray") or []:
    name, _, marker = req.partition(";")
    if not marker.strip() or marker.strip() == 'extra == "operator"':
        direct.append(re.split(r"[<>=!~\\[ ]", name.strip())[0].lower())
print(json.dumps({"imported": sorted(imported), "installed": sorted(installed), "direct": direct,
                  "python": sys.version.split()[0]}))
"""


def test_the_operator_install_carries_exactly_what_the_operators_import(venv: Path) -> None:
    out = subprocess.run([str(venv / "bin" / "python"), "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    norm = {d.replace("_", "-") for d in found["installed"]}
    assert not NOT_FOR_OPERATORS & norm, f"the operator install carries {NOT_FOR_OPERATORS & norm}"
    imported = {d.replace("_", "-") for d in found["imported"]}
    unused = {d.replace("_", "-") for d in found["direct"]} - imported - set(LAZY)
    assert not unused, f"direct requirements the operators never import: {unused}"
    assert set(LAZY) <= norm
    for module in LAZY:
        assert subprocess.run([str(venv / "bin" / "python"), "-c", f"import {module}"], timeout=60).returncode == 0
    assert {"kopf", "prometheus-client", "kubernetes", "pydantic"} <= imported
    print(f"\noperator install: Python {found['python']}, {len(norm)} distributions")


def _render(ports: tuple[int, int]) -> dict[str, list[str]]:
    """``{operator: argv}`` of the chart's Deployments, rendered with these metrics/health ports."""
    out = subprocess.run(
        [
            str(build.ensure("helm")),
            "template",
            "rel",
            str(CHART),
            f"--kube-version={build.K8S_VERSION}",
            "--namespace",
            RELEASE_NS,
            "--set",
            f"metrics.port={ports[0]}",
            "--set",
            f"health.port={ports[1]}",
            "--set",
            "image.repository=registry.example.com/kai-ray",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    argv = {}
    for doc in yaml.safe_load_all(out.stdout):
        if doc and doc["kind"] == "Deployment":
            container = doc["spec"]["template"]["spec"]["containers"][0]
            argv[container["name"]] = [*container["command"], *container["args"]]
    return argv


def _health(port: int) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
            result: dict[str, Any] = json.loads(resp.read())
            return result
    except (OSError, urllib.error.URLError, ValueError):
        return {}


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    with ControlPlane(crds=[our_crd_dir(), *kuberay_crd_files()]) as cp:
        yield cp


@pytest.mark.controlplane
def test_the_charts_commands_run_from_the_operator_install(venv: Path, plane: ControlPlane) -> None:
    kube = Kube(plane.api_client(pool_size=4))
    kube.create("/api/v1/namespaces", {"metadata": {"name": RELEASE_NS}})
    kube.create("/api/v1/namespaces", {"metadata": {"name": "work"}})
    for name, value in {"train": 50, "inference": 125}.items():
        kube.create("/apis/scheduling.k8s.io/v1/priorityclasses", {"metadata": {"name": name}, "value": value})
    kube.create(queues_path(), queue_body("dept"))
    kube.create(queues_path(), queue_body("team", parent="dept"))
    plane.create_gpu_nodes(1, gpus=8)

    procs: dict[str, subprocess.Popen[bytes]] = {}
    health: dict[str, int] = {}
    env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig_path), "POD_NAME": "rel-kai-ray-scheduler-0"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    logs = Path(plane.workdir or ".") / "operator-logs"
    logs.mkdir(exist_ok=True)
    try:
        for kind in ("podgrouper", "scheduler"):
            ports = (free_port(), free_port())
            argv = _render(ports)[kind]
            assert argv[:3] == ["kai-ray", "operator", kind]
            health[kind] = ports[1]
            command = [str(venv / "bin" / "kai-ray"), *argv[1:], "--bind-address=127.0.0.1"]
            log = (logs / f"{kind}.log").open("wb")
            procs[kind] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd="/")
        for kind, port in health.items():
            wait_until(
                f"the chart's {kind} command to lead and sync",
                lambda port=port, kind=kind: (lambda h: h.get(kind, {}).get("leader") and h[kind].get("synced"))(
                    _health(port)
                ),
                120,
                interval=0.3,
            )
        kube.create(pods_path("work"), pod_body("solo", 1, labels={"kai.scheduler/queue": "team"}))
        wait_until("the pod to be grouped and bound", lambda: bound(kube, "work", ["solo"]), 60)
        leases = {
            lease["metadata"]["name"]
            for lease in kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{RELEASE_NS}/leases")["items"]
        }
        assert {"rel-kai-ray-podgrouper", "rel-kai-ray-scheduler"} <= leases  # named per release
    finally:
        for proc in procs.values():
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        codes = {}
        for kind, proc in procs.items():
            try:
                codes[kind] = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[kind] = proc.wait()
        kube.close()
    tails = {k: (logs / f"{k}.log").read_text()[-2000:] for k in procs}
    assert codes == {"podgrouper": 0, "scheduler": 0}, tails


def test_what_the_operator_install_lacks_is_named_in_one_line(venv: Path, tmp_path: Path) -> None:
    kai_ray = str(venv / "bin" / "kai-ray")
    demo = subprocess.run([kai_ray, "demo"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert demo.returncode == 0, demo.stderr
    assert "pip install '.[plots]'" in demo.stdout + demo.stderr, "the story is told; the plots are skipped"
    bench = subprocess.run(
        [kai_ray, "bench", "e2e", "--nodes", "1", "--pods", "1"], capture_output=True, text=True, timeout=120
    )
    assert bench.returncode == 2
    assert bench.stderr.strip().splitlines() == [
        "kai-ray: error: kai-ray bench: the benchmarks are development tooling, not in the kai-ray wheel: "
        "in a kai-ray checkout, pip install -e '.[bench]'"
    ], "one line, before anything is built or started"

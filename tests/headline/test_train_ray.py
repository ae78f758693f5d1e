"""The headline's training entrypoint (``examples/headline/train.py``) as a real Ray driver on real Ray nodes.

What is real: the script itself as a separate driver process, a Ray 2.x head and worker raylets on this machine (each
worker advertises one logical GPU, like a KubeRay worker pod with ``nvidia.com/gpu: 1``), the GCS drain kai-ray uses
(``kai_ray.k8s.ray.raygcs.drain_ray_nodes``, PREEMPTION reason), checkpoints on disk. What stands in for Kubernetes:
``Cluster.remove_node`` plays KubeRay deleting the drained pod after the shrink, ``Cluster.add_node`` plays the pod
KubeRay creates when the scheduler grows the group back, and killing the driver plays a suspended RayJob.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kai_ray.bench.headline import read_progress, read_steps
from kai_ray.k8s.ray import raygcs
from tests.autoscaler.conftest import OBJECT_STORE
from tests.headline.drivers import wait_on_driver

pytestmark = [pytest.mark.ray, pytest.mark.slow]

TRAIN = Path(__file__).resolve().parents[2] / "examples" / "headline" / "train.py"
DEADLINE = 180.0  # generous: CI's two cores are shared with everything else


def _worker(cluster: Any, pod: str) -> Any:
    return cluster.add_node(
        num_cpus=0, num_gpus=1, object_store_memory=OBJECT_STORE, env_vars={"RAY_CLOUD_INSTANCE_ID": pod}
    )


def _wait(what: str, check: Callable[[], Any], driver: subprocess.Popen[bytes], log: Path) -> Any:
    return wait_on_driver(what, check, driver, log, DEADLINE)


@pytest.fixture
def driver(ray_env: Path) -> Iterator[Callable[..., tuple[subprocess.Popen[bytes], Path]]]:
    """``driver(address, ckpt, *args)`` starts train.py as its own process (stdout to a log file); each one started
    is stopped by its PID afterwards."""
    started: list[subprocess.Popen[bytes]] = []

    def start(address: str, ckpt: Path, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = ray_env / f"driver-{len(started)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, str(TRAIN), "--address", address, "--checkpoint-dir", str(ckpt), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        started.append(proc)
        return proc, log

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)


ARGS = ("--max-workers", "3", "--min-workers", "3", "--grow-every", "2", "--checkpoint-every", "5")
ARGS += ("--compute-seconds", "0.05", "--steps", "100000")


def test_training_shrinks_on_a_drained_node_grows_back_and_resumes_from_its_checkpoint(
    ray_cluster: Callable[..., Any], driver: Callable[..., tuple[subprocess.Popen[bytes], Path]], ray_env: Path
) -> None:
    cluster = ray_cluster()
    nodes = {pod: _worker(cluster, pod) for pod in ("w-a", "w-b", "w-c")}
    cluster.wait_for_nodes()
    ckpt = ray_env / "ckpt"
    proc, log = driver(cluster.address, ckpt, *ARGS)

    def progress() -> dict[str, Any]:
        return read_progress(ckpt) or {}

    full = _wait(
        "3 workers training", lambda: (p := progress()).get("workers") == 3 and p["step"] >= 5 and p, proc, log
    )
    assert full["starts"] == 1 and full["restarts"] == 0

    # kai-ray's shrink: drain w-b's Ray node through the GCS, then KubeRay deletes the pod.
    out = raygcs.drain_ray_nodes(cluster.gcs_address, ["w-b"], "kai-ray: preempted by headline-serve", 30.0)
    assert [o.status for o in out] == [raygcs.ACCEPTED], out
    step_at_drain = progress()["step"]
    cluster.remove_node(nodes.pop("w-b"))
    shrunk = _wait("training on 2 workers", lambda: (p := progress()).get("workers") == 2 and p, proc, log)
    assert shrunk["workers_lost"] == 1
    on_two = _wait(
        "steps on 2 workers",
        lambda: (p := progress()).get("workers") == 2 and p["step"] >= shrunk["step"] + 5 and p,
        proc,
        log,
    )
    assert on_two["step"] > step_at_drain and on_two["starts"] == 1  # kept training, never restarted

    # Serving scales down: KubeRay creates a worker pod again; the loop grows back onto it.
    nodes["w-d"] = _worker(cluster, "w-d")
    grown = _wait("back to 3 workers", lambda: (p := progress()).get("workers") == 3 and p, proc, log)
    assert grown["starts"] == 1 and grown["step"] >= on_two["step"]

    steps = read_steps(log.read_text())
    assert steps == sorted(steps) and len(set(steps)) == len(steps), "the step counter went back or repeated"
    assert [n for _, n in grown["history"]][-3:] == [3, 2, 3]

    # The whole RayJob is suspended: the driver dies with its actors. Resumed, it continues from the checkpoint.
    proc.kill()
    proc.wait(30)
    before = progress()
    assert (ckpt / "checkpoint.npz").is_file()
    proc2, log2 = driver(cluster.address, ckpt, *ARGS)
    resumed = _wait(
        "the resumed run past the old step",
        lambda: (p := progress()).get("starts") == 2 and p["step"] > before["step"] and p,
        proc2,
        log2,
    )
    assert resumed["restarts"] == 1
    assert resumed["resumed_from"] is not None
    assert before["step"] - 5 <= resumed["resumed_from"] <= before["step"]  # checkpoints every 5 steps
    assert resumed["steps_lost"] == before["step"] - resumed["resumed_from"]
    steps2 = read_steps(log2.read_text())
    assert steps2[0] == resumed["resumed_from"] + 1 and steps2 == sorted(steps2)
    print(
        f"\nshrink at step {step_at_drain}, 2 workers at step {shrunk['step']}, 3 again at {grown['step']}; killed at "
        f"{before['step']}, resumed from {resumed['resumed_from']} ({resumed['steps_lost']} steps redone)"
    )


def test_training_finishes_and_says_so(
    ray_cluster: Callable[..., Any], driver: Callable[..., tuple[subprocess.Popen[bytes], Path]], ray_env: Path
) -> None:
    cluster = ray_cluster()
    _worker(cluster, "w-a")
    cluster.wait_for_nodes()
    ckpt = ray_env / "ckpt"
    proc, log = driver(cluster.address, ckpt, "--max-workers", "2", "--steps", "30", "--compute-seconds", "0")
    assert proc.wait(DEADLINE) == 0, log.read_text()[-3000:]
    done = read_progress(ckpt)
    assert done is not None and done["done"] and done["step"] == 30 and done["workers"] == 1
    assert done["loss"] < read_first_loss(log.read_text())  # it learns


def read_first_loss(text: str) -> float:
    for line in text.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            if rec.get("loss") is not None:
                return float(rec["loss"])
    raise AssertionError("no loss reported")

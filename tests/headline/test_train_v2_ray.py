"""The headline's Ray Train v2 job (``examples/headline/train_v2.py``) on real Ray nodes, drained as kai-ray drains.

What is real: the script as its own driver process, Ray Train v2 (Ray 2.60: its controller, elastic worker group,
preemption watcher and checkpoint manager), a Ray head and worker raylets on this machine (each worker advertises one
logical GPU, like a KubeRay worker pod with ``nvidia.com/gpu: 1``), kai-ray's GCS drain
(``kai_ray.k8s.ray.raygcs.drain_ray_nodes``: PREEMPTION reason, a deadline), checkpoints on disk. What stands in for
Kubernetes: ``Cluster.remove_node`` plays the pod kai-ray evicts once the drain deadline has passed,
``Cluster.add_node`` the pods KubeRay creates when the suspended RayJob resumes, killing the driver its suspend.
The grow-back is the real-node lane's (``tests/realnode/test_headline.py`` asserts it), not repeated here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kai_ray.k8s.ray import raygcs
from tests.autoscaler.conftest import OBJECT_STORE
from tests.headline.drivers import wait_on_driver

pytestmark = [pytest.mark.ray, pytest.mark.slow]

TRAIN = Path(__file__).resolve().parents[2] / "examples" / "headline" / "train_v2.py"
DEADLINE = 240.0  # generous: CI's two cores are shared with everything else
DRAIN_DEADLINE = 20.0
ARGS = ("--min-workers", "1", "--max-workers", "3", "--checkpoint-every", "5", "--step-seconds", "0.2")
ARGS += ("--resize-every", "5")


def _worker(cluster: Any, pod: str) -> Any:
    return cluster.add_node(
        num_cpus=1, num_gpus=1, object_store_memory=OBJECT_STORE, env_vars={"RAY_CLOUD_INSTANCE_ID": pod}
    )


def _progress(storage: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((storage / "progress.json").read_text()))
    except (OSError, ValueError):
        return {}


def _wait(what: str, check: Callable[[], Any], driver: subprocess.Popen[bytes], log: Path) -> Any:
    return wait_on_driver(what, check, driver, log, DEADLINE)


@pytest.fixture
def driver(ray_env: Path) -> Iterator[Callable[..., tuple[subprocess.Popen[bytes], Path]]]:
    """``driver(address, storage)`` starts train_v2.py as its own process; each one is stopped by its PID after."""
    started: list[subprocess.Popen[bytes]] = []

    def start(address: str, storage: Path) -> tuple[subprocess.Popen[bytes], Path]:
        log = ray_env / f"driver-{len(started)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, str(TRAIN), "--storage", str(storage), *ARGS],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", "RAY_ADDRESS": address},
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


def test_ray_train_v2_takes_the_preemption_notice_loses_no_step_and_resumes(
    ray_cluster: Callable[..., Any], driver: Callable[..., tuple[subprocess.Popen[bytes], Path]], ray_env: Path
) -> None:
    cluster = ray_cluster(num_cpus=1)
    nodes = {pod: _worker(cluster, pod) for pod in ("w-a", "w-b", "w-c")}
    cluster.wait_for_nodes()
    storage = ray_env / "storage"
    proc, log = driver(cluster.address, storage)

    full = _wait(
        "3 workers training",
        lambda: (p := _progress(storage)).get("workers") == 3 and p.get("step", 0) >= 6 and p,
        proc,
        log,
    )
    assert full["starts"] == 1

    # kai-ray takes w-b: drain its Ray node (PREEMPTION, a deadline); the pod goes when the deadline has passed.
    t_drain = time.monotonic()
    out = raygcs.drain_ray_nodes(cluster.gcs_address, ["w-b"], "kai-ray: preempted by headline-serve", DRAIN_DEADLINE)
    assert [o.status for o in out] == [raygcs.ACCEPTED], out
    noticed = _wait(
        "the just-in-time checkpoint", lambda: (p := _progress(storage)).get("jit_checkpoints") and p, proc, log
    )
    notice_seconds = time.monotonic() - t_drain
    assert noticed["notices"] == 1
    assert noticed["jit_committed"], "Ray Train committed the just-in-time checkpoint before the deadline"
    time.sleep(max(0.0, DRAIN_DEADLINE - (time.monotonic() - t_drain)))  # the deadline itself
    cluster.remove_node(nodes.pop("w-b"))
    shrunk = _wait(
        "training on 2 workers from the just-in-time checkpoint",
        lambda: (p := _progress(storage)).get("starts", 0) >= 2 and p.get("workers") == 2 and p,
        proc,
        log,
    )
    assert shrunk["resumed_from"] == noticed["notice_at_step"], "restarted from the just-in-time checkpoint"
    assert shrunk["steps_lost"] == 0, "no step made before the notice was redone"

    # The whole RayJob is suspended as kai-ray suspends it: every Ray node drained first (the notice), then the
    # driver dies with its workers and KubeRay deletes the pods. Resumed on new pods, it continues from the
    # just-in-time checkpoint.
    _wait("steps on 2 workers", lambda: (p := _progress(storage)).get("step", 0) >= shrunk["step"] + 3 and p, proc, log)
    seen = _progress(storage)["jit_checkpoints"]
    out = raygcs.drain_ray_nodes(cluster.gcs_address, list(nodes), "kai-ray: suspended for burst", DRAIN_DEADLINE)
    assert {o.status for o in out} == {raygcs.ACCEPTED}, out
    before = _wait(
        "the just-in-time checkpoint before the suspend",
        lambda: (p := _progress(storage)).get("jit_checkpoints", 0) > seen and p,
        proc,
        log,
    )
    proc.kill()
    proc.wait(30)
    for node in nodes.values():
        cluster.remove_node(node)
    nodes = {pod: _worker(cluster, pod) for pod in ("w-e", "w-f")}
    proc2, log2 = driver(cluster.address, storage)
    resumed = _wait(
        "the resumed run past the old step",
        lambda: (
            (p := _progress(storage)).get("starts", 0) > before["starts"] and p.get("step", 0) > before["step"] and p
        ),
        proc2,
        log2,
    )
    assert before["jit_committed"], "Ray Train committed the just-in-time checkpoint before the deadline"
    assert resumed["resumed_from"] == before["notice_at_step"], "resumed from the just-in-time checkpoint"
    redone = resumed["steps_lost"] - before["steps_lost"]
    assert redone == 0, "no step made before the notice was redone"
    print(
        f"\nnotice after {notice_seconds:.1f}s at step {noticed['notice_at_step']}; on 2 workers from "
        f"{shrunk['resumed_from']} ({shrunk['steps_lost']} lost); suspended at {before['step']} after the notice, resumed from {resumed['resumed_from']} "
        f"({redone} redone)"
    )

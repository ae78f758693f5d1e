"""Elastic data-parallel training with Ray Train v2: the headline's training as Ray users write it.

The same linear regression in numpy as ``train.py``, written for Ray Train v2 (Ray 2.60) instead of plain actors, so
that Ray Train does the restarting and kai-ray only has to tell it what is coming:

- **Elastic workers**: ``ScalingConfig(num_workers=(min, max))``, one worker per ``GPU: 1`` Ray node (KubeRay passes
  the pod's ``nvidia.com/gpu`` limit to ``ray start --num-gpus``; nothing touches a device). Ray Train starts with
  the workers it can get and grows when more nodes join.
- **The preemption notice**: kai-ray drains a Ray node with reason ``PREEMPTION`` and a deadline before it takes the
  pod. Each step asks ``ray.train.get_preemption_info()``; on a notice the workers write a just-in-time checkpoint and
  then make no more steps (a step made after it would be thrown away), until Ray Train restarts the run without the
  preempted node at the deadline, from that checkpoint: no step is lost. Rank 0 waits (until the deadline at most)
  for Ray Train's controller to commit that checkpoint, so a run killed at the deadline resumes from it too.
- **Suspend/resume**: periodic checkpoints (every ``--checkpoint-every`` steps) go to ``--storage`` (a volume that
  outlives the pods) through ``ray.train.report``; a new run of this script resumes from the latest one.

Gradients are averaged through one small named actor (:class:`Averager`); Ray Train v2's own collectives offer only
broadcast and barrier, and a numpy model needs no torch. Progress goes to ``progress.json`` in ``--storage``: the
step, the worker count and its history (``[time, workers]`` points, as ``train.py`` keeps them), how often the run
(re)started, where it resumed from, steps lost, notices and just-in-time checkpoints, so a test reads it without Ray.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import ray
import ray.train
import ray.train.collective
from ray.train import Checkpoint, CheckpointConfig, CheckpointConsistencyMode, FailureConfig, RunConfig, ScalingConfig
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

FEATURES = 16
SAMPLES = 4096
STATE = "state.npz"


@ray.remote(num_cpus=0)
class Averager:
    """Sums one gradient per rank for a step and hands every rank the mean (an all-reduce for numpy)."""

    def __init__(self) -> None:
        self.parts: dict[tuple[str, int], list[np.ndarray]] = {}
        self.done: dict[tuple[str, int], asyncio.Event] = {}

    async def allreduce(self, attempt: str, step: int, world: int, grad: np.ndarray) -> np.ndarray:
        key = (attempt, step)
        parts = self.parts.setdefault(key, [])
        event = self.done.setdefault(key, asyncio.Event())
        parts.append(grad)
        if len(parts) >= world:
            event.set()
        await event.wait()
        mean = np.mean(self.parts[key], axis=0)
        self.parts.pop((attempt, step - 2), None)
        self.done.pop((attempt, step - 2), None)
        return mean


def _data(rank: int, world: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(SAMPLES, FEATURES))
    y = x @ rng.normal(size=FEATURES) + 0.01 * rng.normal(size=SAMPLES)
    return x[rank::world], y[rank::world]


def _progress(storage: Path, update: dict[str, Any]) -> dict[str, Any]:
    path = storage / "progress.json"
    try:
        state: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        state = {"starts": 0, "steps_lost": 0, "notices": 0, "jit_checkpoints": 0, "history": []}
    state.update(update)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)
    return state


def _save(step: int, w: np.ndarray, metrics: dict[str, Any]) -> None:
    """Report a checkpoint from rank 0 (every rank must call report)."""
    if ray.train.get_context().get_world_rank() == 0:
        with tempfile.TemporaryDirectory() as tmp:
            np.savez(Path(tmp) / STATE, step=step, w=w)
            ray.train.report(metrics, checkpoint=Checkpoint.from_directory(tmp))
    else:
        ray.train.report(metrics)


def _committed(step: int, deadline_ms: int | None) -> bool:
    """Wait, at most until the preemption deadline, for Ray Train's controller to commit the just-in-time checkpoint.

    ``report`` returns once the checkpoint is uploaded; the controller registers it a moment later. A run that dies in
    between (a suspend kills the driver at the deadline) resumes from the checkpoint before it, so the notice is only
    used in full when the commit lands first; the progress file says whether it did.
    """
    timeout = 30.0 if deadline_ms is None else max(1.0, deadline_ms / 1000 - time.time())
    reported = ray.train.get_all_reported_checkpoints(
        consistency_mode=CheckpointConsistencyMode.COMMITTED, timeout_s=timeout
    )
    return any(c.metrics.get("jit") and c.metrics.get("step") == step for c in reported)


def train_loop(config: dict[str, Any]) -> None:
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    storage = Path(config["storage"])
    averager = Averager.options(name="kai-ray-averager", get_if_exists=True, lifetime="detached").remote()
    attempt = ray.train.collective.broadcast_from_rank_zero(uuid.uuid4().hex)
    step, w = 0, np.zeros(FEATURES)
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            saved = np.load(Path(d) / STATE)
            step, w = int(saved["step"]), saved["w"]
    if rank == 0:
        before = _progress(storage, {})
        reached = int(before.get("step", 0))
        history = [*before.get("history", []), [round(time.time(), 3), world]]
        _progress(
            storage,
            {
                "starts": int(before.get("starts", 0)) + 1,
                "resumed_from": step if checkpoint is not None else None,
                "steps_lost": int(before.get("steps_lost", 0)) + max(0, reached - step),
                "workers": world,
                "history": history,
            },
        )
    x, y = _data(rank, world)
    noticed = False
    while step < config["steps"]:
        info = ray.train.get_preemption_info()  # a barrier: every rank asks each step
        if info is not None:
            if not noticed:
                noticed = True
                _save(step, w, {"step": step, "jit": True})
                if rank == 0:
                    committed = _committed(step, info.deadline_ms)
                    state = _progress(storage, {})
                    _progress(
                        storage,
                        {
                            "notices": state["notices"] + 1,
                            "jit_checkpoints": state["jit_checkpoints"] + 1,
                            "jit_committed": committed,
                            "notice_at_step": step,
                            "notice_deadline_ms": info.deadline_ms,
                        },
                    )
            time.sleep(0.2)  # a step made now would be redone after the restart
            continue
        grad = 2 * x.T @ (x @ w - y) / len(y)
        w = w - 0.05 * ray.get(averager.allreduce.remote(attempt, step, world, grad))
        step += 1
        loss = float(np.mean((x @ w - y) ** 2))
        if rank == 0:
            _progress(storage, {"step": step, "loss": loss, "workers": world})
        if step % config["checkpoint_every"] == 0:
            _save(step, w, {"step": step, "loss": loss})
        time.sleep(config["step_seconds"])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--storage", default="/checkpoints", help="checkpoints and progress.json (outlives the pods)")
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--checkpoint-every", type=int, default=5)
    ap.add_argument("--step-seconds", type=float, default=0.5)
    ap.add_argument("--min-workers", type=int, default=1)
    ap.add_argument("--max-workers", type=int, default=3)
    ap.add_argument("--resize-every", type=float, default=10.0, help="seconds between Ray Train's elastic checks")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    storage = Path(args.storage)
    storage.mkdir(parents=True, exist_ok=True)
    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"))
    trainer = DataParallelTrainer(
        train_loop,
        train_loop_config={
            "storage": str(storage),
            "steps": args.steps,
            "checkpoint_every": args.checkpoint_every,
            "step_seconds": args.step_seconds,
        },
        scaling_config=ScalingConfig(
            num_workers=(args.min_workers, args.max_workers),
            use_gpu=True,  # one logical GPU per worker: Ray sets CUDA_VISIBLE_DEVICES, numpy never reads it
            resources_per_worker={"CPU": 0, "GPU": 1},
            elastic_resize_monitor_interval_s=args.resize_every,
        ),
        run_config=RunConfig(
            name="headline-v2",
            storage_path=str(storage / "ray-train"),
            failure_config=FailureConfig(max_failures=3, max_preemption_failures=-1),
            checkpoint_config=CheckpointConfig(num_to_keep=3),
        ),
    )
    trainer.fit()


if __name__ == "__main__":
    main()

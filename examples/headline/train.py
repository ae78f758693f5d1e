"""Elastic data-parallel training on plain Ray actors: the RayJob entrypoint of kai-ray's headline.

One ``Trainer`` actor per Ray worker node (each asks for ``num_gpus=1``: KubeRay passes the pod's ``nvidia.com/gpu``
limit to ``ray start --num-gpus``, so one actor lands on each GPU worker; nothing touches a device). The driver owns
the model (a linear regression in numpy), sends the weights to every live actor, averages the gradients they return
and takes a step. Why this shape, and not a restart-on-failure framework:

- **Shrink**: when kai-ray preempts a worker it drains the Ray node (PREEMPTION) and deletes the pod through
  KubeRay's ``workersToDelete``. The actor there dies; its call raises ``RayActorError``; the loop drops it and the
  same step completes on the survivors. The step counter never goes back and the job never restarts.
- **Grow**: every ``--grow-every`` steps the driver asks for actors up to ``--max-workers`` (live plus starting) and
  admits each once its ``ready()`` answers, without stopping the others. An actor that finds no free GPU stays
  pending: that pending demand is what Ray's in-tree autoscaler scales the worker group up for, and kai-ray's hook
  caps the scale-up at what the queue can get now, so no pod waits Pending while serving holds the GPU.
- **Suspend/resume**: a whole RayJob that kai-ray suspends loses its cluster. Checkpoints (step and weights) are
  written atomically to ``--checkpoint-dir`` (a hostPath volume that outlives the pods) and a new run resumes from
  the latest one, counting the steps it had to redo as ``steps_lost``.

Progress goes to stdout (one JSON line per step) and to ``progress.json`` in the checkpoint directory, so a test on
the host reads it without the Kubernetes API. The file holds the step, the worker count, every change of the worker
count (``history``), how many times the job started (``starts``), restarts and steps lost.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import ray

FEATURES = 16
CHECKPOINT = "checkpoint.npz"
PROGRESS = "progress.json"


def true_weights() -> np.ndarray:
    return np.random.default_rng(7).normal(size=FEATURES)


@ray.remote(num_cpus=0, num_gpus=1, max_restarts=0)
class Trainer:
    """Holds one shard of a synthetic regression data set and returns gradients of the mean squared error."""

    def __init__(self, shard: int, samples: int, compute_s: float) -> None:
        rng = np.random.default_rng(1000 + shard)
        self.x = rng.normal(size=(samples, FEATURES))
        self.y = self.x @ true_weights() + 0.01 * rng.normal(size=samples)
        self.compute_s = compute_s
        self.node = ray.get_runtime_context().get_node_id()

    def ready(self) -> str:
        return str(self.node)

    def grad(self, weights: np.ndarray) -> tuple[np.ndarray, float]:
        if self.compute_s:
            time.sleep(self.compute_s)  # stands in for a forward/backward pass on a real accelerator
        err = self.x @ weights - self.y
        return 2.0 * self.x.T @ err / len(err), float(np.mean(err**2))


def _atomic_write(path: Path, write: Any) -> None:
    """Write through a temporary file in the same directory, fsync, then rename: a reader never sees half a file and
    a killed driver leaves the previous version intact."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(directory: Path) -> tuple[int, np.ndarray] | None:
    path = directory / CHECKPOINT
    if not path.exists():
        return None
    with np.load(path) as data:
        return int(data["step"]), np.array(data["weights"])


def save_checkpoint(directory: Path, step: int, weights: np.ndarray) -> None:
    _atomic_write(directory / CHECKPOINT, lambda f: np.savez(f, step=np.int64(step), weights=weights))


def load_progress(directory: Path) -> dict[str, Any]:
    try:
        loaded = json.loads((directory / PROGRESS).read_text())
        return loaded if isinstance(loaded, dict) else {}
    except (OSError, ValueError):
        return {}


class Elastic:
    """The live actors, the ones still starting, and the shard numbers in use."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.live: dict[int, Any] = {}
        self.starting: dict[int, tuple[Any, Any, float]] = {}
        self.next_shard = 0
        self.lost = 0

    def count(self) -> int:
        return len(self.live)

    def _start_one(self) -> None:
        shard = self.next_shard
        self.next_shard += 1
        actor = Trainer.remote(shard, self.args.samples, self.args.compute_seconds)  # type: ignore[attr-defined]
        self.starting[shard] = (actor, actor.ready.remote(), time.monotonic())

    def grow(self) -> None:
        """Ask for actors up to ``--max-workers`` (live + starting); admit the ones that answered."""
        for _ in range(max(0, self.args.max_workers - len(self.live) - len(self.starting))):
            self._start_one()
        self.admit(0)

    def admit(self, wait_s: float) -> None:
        if not self.starting:
            return
        refs = {ref: shard for shard, (_, ref, _) in self.starting.items()}
        done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=wait_s)
        for ref in done:
            shard = refs[ref]
            actor, _, _ = self.starting.pop(shard)
            try:
                ray.get(ref)
            except ray.exceptions.RayError:
                continue
            self.live[shard] = actor
        now = time.monotonic()
        for shard, (actor, _, since) in list(self.starting.items()):
            if now - since > self.args.start_timeout:  # not placed for long: ask again (a fresh request, a fresh shard)
                ray.kill(actor)
                del self.starting[shard]

    def step(self, weights: np.ndarray) -> tuple[list[np.ndarray], list[float]]:
        """One gradient from every live actor; an actor whose node went away is dropped and the step completes on
        the others (an empty result means no actor survived)."""
        calls = {actor.grad.remote(weights): shard for shard, actor in self.live.items()}
        grads, losses = [], []
        deadline = time.monotonic() + self.args.call_timeout
        pending = list(calls)
        while pending:
            done, pending = ray.wait(pending, num_returns=len(pending), timeout=max(0.0, deadline - time.monotonic()))
            for ref in done:
                try:
                    g, loss = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    self.drop(calls[ref], exc)
                    continue
                grads.append(g)
                losses.append(loss)
            if time.monotonic() >= deadline:
                break
        for ref in pending:  # a node that stopped answering without dying: leave it behind
            self.drop(calls[ref], TimeoutError(f"no gradient in {self.args.call_timeout}s"))
        return grads, losses

    def drop(self, shard: int, why: BaseException) -> None:
        actor = self.live.pop(shard, None)
        if actor is None:
            return
        self.lost += 1
        print(json.dumps({"event": "worker-lost", "shard": shard, "why": type(why).__name__}), flush=True)
        with contextlib.suppress(Exception):  # already gone
            ray.kill(actor)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint-dir", required=True, type=Path)
    p.add_argument("--steps", type=int, default=1000, help="train until this step, then exit 0")
    p.add_argument("--min-workers", type=int, default=1, help="wait for this many workers before the first step")
    p.add_argument("--max-workers", type=int, default=3)
    p.add_argument("--grow-every", type=int, default=5, help="ask for missing workers every N steps")
    p.add_argument("--checkpoint-every", type=int, default=5)
    p.add_argument("--compute-seconds", type=float, default=0.2, help="stand-in for each worker's compute per step")
    p.add_argument("--samples", type=int, default=256, help="samples per worker shard")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--call-timeout", type=float, default=120.0)
    p.add_argument("--start-timeout", type=float, default=600.0, help="seconds before a pending actor is asked again")
    p.add_argument("--address", default=None, help="Ray address (default: the job's cluster)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ckpt_dir: Path = args.checkpoint_dir
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    previous = load_progress(ckpt_dir)
    restored = load_checkpoint(ckpt_dir)
    step, weights = restored if restored else (0, np.zeros(FEATURES))
    reported = int(previous.get("step", 0))
    progress: dict[str, Any] = {
        "step": step,
        "workers": 0,
        "max_workers": args.max_workers,
        "starts": int(previous.get("starts", 0)) + 1,
        "restarts": int(previous.get("restarts", 0)) + (1 if previous else 0),
        "resumed_from": step if restored else None,
        "steps_lost": int(previous.get("steps_lost", 0)) + max(0, reported - step),
        "workers_lost": int(previous.get("workers_lost", 0)),
        "history": list(previous.get("history", [])),
        "loss": None,
        "done": False,
    }
    print(json.dumps({"event": "start", **{k: progress[k] for k in ("step", "starts", "restarts", "steps_lost")}}))
    sys.stdout.flush()

    ray.init(address=args.address, log_to_driver=False)
    pool = Elastic(args)
    lost_before = progress["workers_lost"]

    def report(loss: float | None, event: str | None = None) -> None:
        """Update progress.json; print a step line, or an ``event`` line when no step was taken."""
        now = time.time()
        workers = pool.count()
        if not progress["history"] or progress["history"][-1][1] != workers:
            progress["history"].append([round(now, 3), workers])
        progress.update(step=step, workers=workers, time=now, loss=loss, workers_lost=lost_before + pool.lost)
        _atomic_write(ckpt_dir / PROGRESS, lambda f: f.write(json.dumps(progress).encode()))
        line = {"step": step, "workers": workers, "loss": loss, "time": round(now, 3)}
        print(json.dumps({"event": event, **line} if event else line), flush=True)

    report(None, "starting")  # a start (first or after a suspension) shows as a point with no worker in the history
    pool.grow()
    while pool.count() < min(args.min_workers, args.max_workers):
        pool.admit(1.0)
        if pool.count() + len(pool.starting) < args.max_workers:
            pool.grow()
    report(None, "ready")
    while step < args.steps:
        if step % args.grow_every == 0 or pool.count() == 0:
            pool.grow()
        if pool.count() == 0:  # every worker gone (and none placed yet): wait for room, the step stays put
            pool.admit(1.0)
            report(None, "waiting")
            continue
        grads, losses = pool.step(weights)
        if not grads:
            continue
        weights = weights - args.lr * np.mean(grads, axis=0)
        step += 1
        if step % args.checkpoint_every == 0 or step == args.steps:
            save_checkpoint(ckpt_dir, step, weights)
        report(float(np.mean(losses)))
    progress["done"] = True
    report(progress["loss"], "done")
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

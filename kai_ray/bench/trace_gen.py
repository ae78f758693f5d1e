"""Synthetic traces in the Alibaba ``cluster-trace-gpu-v2023`` CSV schema, for tests and the replay benchmark.

The real trace is not committed; this generator writes files a replay reads exactly like the real ones. Its mix
follows the published trace's shape: a heterogeneous fleet (8-GPU G2/G3/V100 servers, 2-GPU T4/P100 boxes, CPU-only
nodes), mostly single-GPU pods of which many share a GPU (``gpu_milli`` < 1000), a few multi-GPU pods, some CPU-only
pods, some GPU-model constraints (``gpu_spec``), heavy-tailed run times, and a few pods that never ran.
Deterministic for a given seed.
"""

from __future__ import annotations

import csv
import math
import random
from pathlib import Path

from kai_ray.sim.trace import NODE_COLUMNS, POD_COLUMNS

# (model, gpus, cpu_milli, memory_mib, weight)
NODE_KINDS: tuple[tuple[str, int, int, int, float], ...] = (
    ("", 0, 96000, 524288, 0.15),
    ("G2", 8, 96000, 393216, 0.45),
    ("G3", 8, 128000, 786432, 0.06),
    ("V100M32", 8, 96000, 786432, 0.05),
    ("V100M16", 4, 32000, 131072, 0.05),
    ("T4", 2, 104000, 524288, 0.18),
    ("P100", 2, 64000, 262144, 0.06),
)
MODEL_SIZE = {model: (gpus, cpu, mem) for model, gpus, cpu, mem, _ in NODE_KINDS if model}
SHARE_MILLI = (50, 110, 160, 220, 230, 320, 440, 460, 470, 480, 550, 650, 810)


def generate_nodes(n: int, seed: int = 1) -> list[dict[str, object]]:
    rng = random.Random(seed)
    weights = [k[4] for k in NODE_KINDS]
    rows = []
    for i in range(n):
        model, gpus, cpu, mem, _ = rng.choices(NODE_KINDS, weights)[0]
        rows.append({"sn": f"openb-node-{i:04d}", "cpu_milli": cpu, "memory_mib": mem, "gpu": gpus, "model": model})
    return rows


def generate_pods(
    n: int,
    seed: int = 1,
    span: float = 3_000_000.0,
    mean_run: float = 5400.0,
    gpu_spec_share: float = 0.1,
    never_scheduled_share: float = 0.02,
    long_share: float = 0.07,
    long_mean: float = 7 * 86400.0,
) -> list[dict[str, object]]:
    """``n`` pods arriving over ``span`` seconds (Poisson). Run times are log-normal with mean ``mean_run``, except a
    ``long_share`` of long-running services (mean ``long_mean``). The defaults follow the published default trace:
    about 8,000 pods over five weeks, mostly minutes-to-hours jobs plus a tail that runs for days."""
    rng = random.Random(seed)
    models = sorted(MODEL_SIZE)
    rows: list[dict[str, object]] = []
    t = 0.0
    rate = n / span
    sigma = 1.2
    mu = math.log(mean_run) - sigma * sigma / 2
    for i in range(n):
        t += rng.expovariate(rate)
        r = rng.random()
        if r < 0.10:
            num_gpu, milli = 0, 0
        elif r < 0.90:
            num_gpu = 1
            milli = 1000 if rng.random() < 0.6 else rng.choice(SHARE_MILLI)
        elif r < 0.95:
            num_gpu, milli = 2, 1000
        elif r < 0.98:
            num_gpu, milli = 4, 1000
        else:
            num_gpu, milli = 8, 1000
        cpu = rng.choice((2000, 4000, 6000, 8000, 12000, 16000)) * max(1, num_gpu)
        mem = rng.choice((8192, 16384, 24576, 32768, 65536)) * max(1, num_gpu)
        cpu, mem = min(cpu, 88000), min(mem, 327680)
        spec = ""
        if num_gpu and rng.random() < gpu_spec_share:
            fit = [m for m in models if MODEL_SIZE[m][0] >= num_gpu]
            chosen = sorted(rng.sample(fit, min(len(fit), rng.choice((1, 2, 3)))))
            spec = "|".join(chosen)
            cpu = min(cpu, max(MODEL_SIZE[m][1] for m in chosen))
            mem = min(mem, max(MODEL_SIZE[m][2] for m in chosen))
        created = int(t)
        if rng.random() < long_share:
            run = max(1, int(rng.lognormvariate(math.log(long_mean) - 0.5, 1.0)))
        else:
            run = max(1, int(rng.lognormvariate(mu, sigma)))
        scheduled: object = created + rng.choice((0, 0, 0, 1, 2, 30))
        phase = "Succeeded" if rng.random() < 0.5 else "Running"
        if rng.random() < never_scheduled_share:
            scheduled, phase = "", "Pending"
            deletion = created + rng.randint(10, 600)
        else:
            assert isinstance(scheduled, int)
            deletion = scheduled + run
        rows.append(
            {
                "name": f"openb-pod-{i:04d}",
                "cpu_milli": cpu,
                "memory_mib": mem,
                "num_gpu": num_gpu,
                "gpu_milli": milli,
                "gpu_spec": spec,
                "qos": rng.choice(("LS", "BE", "Burstable", "LS")),
                "pod_phase": phase,
                "creation_time": created,
                "deletion_time": deletion,
                "scheduled_time": scheduled,
            }
        )
    return rows


def write_csv(path: str | Path, columns: tuple[str, ...], rows: list[dict[str, object]]) -> Path:
    path = Path(path)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(columns))
        w.writeheader()
        w.writerows(rows)
    return path


def write_trace(
    directory: str | Path,
    nodes: int,
    pods: int,
    seed: int = 1,
    span: float = 3_000_000.0,
    mean_run: float = 5400.0,
) -> tuple[Path, Path]:
    """Write ``nodes.csv`` and ``pods.csv`` into ``directory``; returns their paths."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    n = write_csv(d / "nodes.csv", NODE_COLUMNS, generate_nodes(nodes, seed))
    p = write_csv(d / "pods.csv", POD_COLUMNS, generate_pods(pods, seed, span, mean_run))
    return n, p

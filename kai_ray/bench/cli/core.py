"""``kai-ray bench core``: the embedded scheduler core on synthetic clusters."""

from __future__ import annotations

import json

import typer

from kai_ray.bench.cli.group import bench
from kai_ray.cli_error import CliError


@bench.command("core")
def core(
    nodes: int = typer.Option(0, "--nodes", help="Nodes (default 5000; 500 with --preemption)."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="GPUs per node."),
    jobs: int = typer.Option(5000, "--jobs", help="Pending gangs (--consolidation: whole-node jobs, 20)."),
    gang: int = typer.Option(8, "--gang", help="Pods per gang (one GPU each)."),
    running_pods: int = typer.Option(0, "--running-pods", help="Single-GPU pods already running."),
    queues: int = typer.Option(4, "--queues", help="Leaf queues the gangs are spread over (--reclaim: 50)."),
    preemption: bool = typer.Option(False, "--preemption", help="Run the preemption benchmark instead."),
    consolidation: bool = typer.Option(
        False, "--consolidation", help="Run the consolidation benchmark (a fragmented cluster) instead."
    ),
    reclaim: bool = typer.Option(False, "--reclaim", help="Run the reclaim benchmark (many queues) instead."),
    churn: bool = typer.Option(
        False, "--churn", help="Run cycles under a steady arrival and completion stream instead (p50/p99 cycle)."
    ),
    arrivals: int = typer.Option(50, "--arrivals", help="Churn: gangs arriving (and completing) per cycle."),
    duration: float = typer.Option(60.0, "--duration", help="Churn: seconds of cycles at most."),
    cycles: int = typer.Option(100, "--cycles", help="Churn: cycles at most."),
    running_jobs: int = typer.Option(4000, "--running-jobs", help="Preemption: running single-GPU jobs."),
    gpus_per_pod: int = typer.Option(1, "--gpus-per-pod", help="Preemption: GPUs per inference pod."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Time one scheduling cycle of the core and report throughput, cycle time and peak memory."""
    if sum((preemption, consolidation, reclaim, churn)) > 1:
        raise CliError("choose one of --preemption, --consolidation, --reclaim, --churn")
    if nodes == 0:
        nodes = 500 if (preemption or consolidation or reclaim) else 5000
    from kai_ray.bench.core import (
        ChurnSpec,
        CoreBenchSpec,
        run_allocate_bench,
        run_churn_bench,
        run_consolidation_bench,
        run_preemption_bench,
        run_reclaim_bench,
    )

    for name, value in (
        ("--nodes", nodes),
        ("--gpus-per-node", gpus_per_node),
        ("--gang", gang),
        ("--queues", queues),
        ("--gpus-per-pod", gpus_per_pod),
    ):
        if value < 1:
            raise CliError(f"{name} must be at least 1, got {value}")
    for name, value in (("--jobs", jobs), ("--running-pods", running_pods), ("--running-jobs", running_jobs)):
        if value < 0:
            raise CliError(f"{name} must not be negative, got {value}")
    if arrivals < 1 or cycles < 1 or duration <= 0:
        raise CliError("--arrivals, --cycles and --duration must be positive")
    if churn:
        out = run_churn_bench(ChurnSpec(nodes, gpus_per_node, gang, arrivals, duration=duration, max_cycles=cycles))
    elif consolidation:
        out = run_consolidation_bench(nodes, gpus_per_node, jobs if jobs != 5000 else 20)
    elif reclaim:
        if queues == 4:
            queues = 50
        out = run_reclaim_bench(nodes, gpus_per_node, queues)
    elif preemption:
        if gpus_per_pod > gpus_per_node:
            raise CliError(f"--gpus-per-pod {gpus_per_pod} exceeds --gpus-per-node {gpus_per_node}")
        out = run_preemption_bench(nodes, gpus_per_node, running_jobs, gang, gpus_per_pod)
    else:
        if running_pods > nodes * gpus_per_node:
            raise CliError(f"--running-pods {running_pods} exceeds the cluster's {nodes * gpus_per_node} GPUs")
        out = run_allocate_bench(CoreBenchSpec(nodes, gpus_per_node, jobs, gang, running_pods, queues))
    if out.get("internal_errors"):
        raise CliError(f"the core reported an internal error: {out['internal_errors'][0].splitlines()[0]}")
    if as_json:
        typer.echo(json.dumps(out, sort_keys=True))
        return
    for k, v in out.items():
        if k != "internal_errors":
            typer.echo(f"{k:>26}: {v:.4g}" if isinstance(v, float) else f"{k:>26}: {v}")

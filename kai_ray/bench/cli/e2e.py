"""``kai-ray bench e2e``: the operators end to end on the test control plane, against the raw Binding API rate."""

from __future__ import annotations

from typing import Annotated

import typer

from kai_ray.bench.cli.group import bench
from kai_ray.cli_error import CliError


@bench.command("e2e")
def e2e(
    nodes: Annotated[int, typer.Option("--nodes", help="KWOK nodes")] = 500,
    pods: Annotated[int, typer.Option("--pods", help="single-GPU pods to schedule")] = 4000,
    gpus_per_node: Annotated[int, typer.Option("--gpus-per-node", help="GPUs per node")] = 8,
    raw_pods: Annotated[int, typer.Option("--raw-pods", help="bindings per raw-rate measurement")] = 1000,
    workers: Annotated[int, typer.Option("--workers", help="concurrent requests (creations; the binder's pool)")] = 32,
    timeout: Annotated[float, typer.Option("--timeout", help="seconds to wait for all pods to be bound")] = 900.0,
    preemption_trials: Annotated[
        int, typer.Option("--preemption-trials", help="whole-node inference pods preempting, one after the other")
    ] = 3,
    settle_timeout: Annotated[
        float, typer.Option("--settle-timeout", help="seconds to wait after the fill for the API server to be quiet")
    ] = 300.0,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Time P single-GPU pods from creation to all bound through both operators, and the raw Binding API rate."""
    for flag, value in (("--nodes", nodes), ("--pods", pods), ("--gpus-per-node", gpus_per_node)):
        if value < 1:
            raise CliError(f"{flag}: {value} must be at least 1")
    if raw_pods < 1 or workers < 1 or timeout <= 0 or settle_timeout < 0:
        raise CliError("--raw-pods, --workers and --timeout must be positive, --settle-timeout not negative")
    if pods > nodes * gpus_per_node:
        raise CliError(f"--pods: {pods} single-GPU pods cannot all fit on {nodes} x {gpus_per_node} GPUs")
    if preemption_trials < 0 or preemption_trials > nodes // 2:
        raise CliError(f"--preemption-trials: {preemption_trials} must be between 0 and half of --nodes")
    from kai_ray.extras import require

    require("cryptography", "kopf", "prometheus_client", purpose="kai-ray bench e2e")
    from kai_ray.bench.e2e import E2EConfig, run_e2e
    from kai_ray.k8s.base.rest import ApiError
    from kai_ray.testing.controlplane.harness import ControlPlaneError

    def progress(msg: str) -> None:  # on stderr, so --json's stdout stays one document
        typer.echo(f"[bench e2e] {msg}", err=True)

    try:
        result = run_e2e(
            E2EConfig(
                nodes=nodes,
                pods=pods,
                gpus_per_node=gpus_per_node,
                raw_pods=raw_pods,
                workers=workers,
                timeout=timeout,
                preemption_trials=preemption_trials,
                settle_timeout=settle_timeout,
            ),
            progress,
        )
    except ControlPlaneError as exc:
        raise CliError(f"control plane: {exc}", code=1) from None
    except ApiError as exc:
        raise CliError(f"API server: {exc} (the machine may be overloaded; try fewer --pods)", code=1) from None
    except TimeoutError as exc:
        raise CliError(f"timed out: {exc}", code=1) from None
    if as_json:
        typer.echo(result.to_json())
        return
    preempt = ", ".join(f"{p['seconds']}s" for p in result.preemption) or "not run"
    typer.echo(
        f"{result.bound}/{result.pods} pods bound {result.fill_seconds:.1f}s after the scheduler's start "
        f"({result.pods_per_second:.0f} pods/s), binding phase {result.binding_pods_per_second:.0f} pods/s = "
        f"{result.binding_ratio_to_raw_concurrent:.2f} of the raw concurrent rate "
        f"({result.raw_concurrent_bindings_per_second:.0f}/s; {result.raw_bindings_per_second:.0f}/s sequential); "
        f"preemption creation to bound: {preempt}; over-committed nodes: {result.overcommitted_nodes}"
    )
    cy = result.cycles
    writes = ", ".join(f"{k} {v}" for k, v in sorted(result.apiserver_writes_per_pod_settled.items()))
    typer.echo(
        f"{cy.get('cycles', 0):.0f} cycles over the fill, p50 {cy.get('p50_seconds', 0):.3f}s / p99 "
        f"{cy.get('p99_seconds', 0):.3f}s; the loop's share of the fill: "
        + ", ".join(f"{ph} {cy.get(f'{ph}_share', 0):.2f}" for ph in ("snapshot", "core", "dispatch", "report"))
        + f"; API writes per pod until quiet ({result.settle_seconds:.0f}s after the fill): {writes}"
    )

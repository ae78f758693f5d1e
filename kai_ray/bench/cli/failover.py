"""``kai-ray bench failover``: first binding after a leader change (SIGTERM, SIGKILL) and after a cold start."""

from __future__ import annotations

from typing import Annotated

import typer

from kai_ray.bench.cli.group import bench
from kai_ray.cli_error import CliError
from kai_ray.durations import flag


@bench.command("failover")
def failover(
    nodes: Annotated[int, typer.Option("--nodes", help="KWOK nodes")] = 500,
    gpus_per_node: Annotated[int, typer.Option("--gpus-per-node", help="GPUs per node")] = 16,
    running: Annotated[int, typer.Option("--running", help="single-GPU pods running before the leader changes")] = 4000,
    rate: Annotated[float, typer.Option("--rate", help="new single-GPU pods per second during the changes")] = 20.0,
    lease_duration: Annotated[str, typer.Option("--lease-duration", help="the schedulers' Lease duration")] = "15s",
    renew_deadline: Annotated[str, typer.Option("--renew-deadline", help="their renew deadline")] = "10s",
    retry_period: Annotated[str, typer.Option("--retry-period", help="their retry period")] = "2s",
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Time the first binding after the scheduler's leader is stopped (SIGTERM), killed (SIGKILL), and after a
    fresh process starts alone, with pods running and new pods arriving; check nothing was bound twice."""
    for name, value in (("--nodes", nodes), ("--gpus-per-node", gpus_per_node), ("--running", running)):
        if value < 1:
            raise CliError(f"{name}: {value} must be at least 1")
    if rate <= 0:
        raise CliError(f"--rate: {rate:g} must be positive")
    lease: list[float] = []
    for name, text in (
        ("--lease-duration", lease_duration),
        ("--renew-deadline", renew_deadline),
        ("--retry-period", retry_period),
    ):
        try:
            lease.append(flag(text))
        except ValueError as exc:
            raise CliError(f"{name}: {exc}") from None
    if not 0 < lease[2] < lease[1] < lease[0]:
        raise CliError("--retry-period < --renew-deadline < --lease-duration is required")
    headroom = nodes * gpus_per_node - running
    if headroom < rate * (lease[0] + 40):
        raise CliError(f"--running: {running} pods leave {headroom} GPUs, too few for {rate:g} arrivals/s")
    from kai_ray.extras import require

    require("cryptography", "kopf", "prometheus_client", purpose="kai-ray bench failover")
    from kai_ray.bench.failover import FailoverConfig, run_failover
    from kai_ray.k8s.base.rest import ApiError
    from kai_ray.testing.controlplane.harness import ControlPlaneError

    def progress(msg: str) -> None:
        if not as_json:
            typer.echo(f"[bench failover] {msg}", err=True)

    cfg = FailoverConfig(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        running=running,
        rate=rate,
        lease_duration=lease[0],
        renew_deadline=lease[1],
        retry_period=lease[2],
    )
    try:
        result = run_failover(cfg, progress)
    except ControlPlaneError as exc:
        raise CliError(f"control plane: {exc}", code=1) from None
    except ApiError as exc:
        raise CliError(f"API server: {exc} (the machine may be overloaded)", code=1) from None
    except TimeoutError as exc:
        raise CliError(f"failover: {exc}", code=1) from None
    if as_json:
        typer.echo(result.to_json())
        return
    typer.echo(
        f"first bind after SIGTERM {result.first_bind_after_sigterm_seconds}s, after SIGKILL "
        f"{result.first_bind_after_sigkill_seconds}s (lease {lease_duration}), after takeover "
        f"{result.first_bind_after_takeover_seconds}s, after a cold start "
        f"{result.first_bind_after_process_start_seconds}s; binding conflicts {result.binding_conflicts:g}, "
        f"over-committed nodes {result.overcommitted_nodes}"
    )

"""``kai-ray bench vs-kai``: kai-ray's scheduler against KAI's own scheduler and binder on identical control planes,
or (``--against kube-scheduler``) against kube-scheduler's own gang scheduling.

The first use with ``--scheduler kai`` or ``both`` builds KAI's scheduler and binder from the Go module (about 15
minutes on two cores) into the binary cache; later runs start at once. kube-scheduler is the test lane's own
multi-call Kubernetes binary.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

from kai_ray.bench.cli.group import bench
from kai_ray.cli_error import CliError


def _split(value: str, flag: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    items = tuple(x.strip().lower() for x in value.split(",") if x.strip())
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        raise CliError(f"{flag}: {', '.join(bad) or repr(value)} is not one of {', '.join(allowed)}")
    return items


@bench.command("vs-kai")
def vs_kai(
    scheduler: Annotated[
        str, typer.Option("--scheduler", help="both (alternating A B A B), kai-ray, or them (the --against side only)")
    ] = "both",
    against: Annotated[
        str, typer.Option("--against", help="kai (KAI's scheduler and binder) or kube-scheduler (its gang API)")
    ] = "kai",
    nodes: Annotated[int, typer.Option("--nodes", help="KWOK nodes")] = 500,
    gpus_per_node: Annotated[int, typer.Option("--gpus-per-node", help="GPUs per node")] = 8,
    repeats: Annotated[int, typer.Option("--repeats", help="rounds per scheduler (a fresh control plane each)")] = 5,
    workloads: Annotated[str, typer.Option("--workloads", help="comma-separated: w1,w2,w3,w4")] = "w1,w2,w3",
    preemption_trials: Annotated[
        int, typer.Option("--preemption-trials", help="inference gangs preempting on the full W1 cluster (0: none)")
    ] = 3,
    inside: Annotated[
        str, typer.Option("--inside", help="workloads also timed with creation inside the window, or none")
    ] = "w1,w2,w3",
    raw_pods: Annotated[int, typer.Option("--raw-pods", help="bindings per raw-rate measurement")] = 1000,
    workers: Annotated[
        int, typer.Option("--workers", help="concurrent creations, and concurrent bindings on both sides")
    ] = 32,
    kai_limits: Annotated[
        str,
        typer.Option(
            "--kai-limits",
            help="same: KAI without a client rate limit and --workers binder reconciles, like kai-ray; "
            "shipped: what KAI's operator deploys (binder 20 QPS, 10 reconciles)",
        ),
    ] = "same",
    kai_verbosity: Annotated[int, typer.Option("--kai-verbosity", help="KAI's --v (3: its production default)")] = 3,
    timeout: Annotated[float, typer.Option("--timeout", help="seconds to wait for one workload")] = 1800.0,
    lock: Annotated[
        Path | None, typer.Option("--lock", help="flock this file around each round (e.g. /tmp/kai-ray-bench.lock)")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="directory for logs and JSON (default ./bench-vs-kai-<time>)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON instead of tables")] = False,
) -> None:
    """Time W1 (single pods), W2 (gangs of 8), W3 (Ray-shaped gangs), W4 (gangs of 4) and preemption under kai-ray
    and KAI or kube-scheduler."""
    from kai_ray.bench.vs_kai import AGAINST, WORKLOADS, VsConfig, markdown, run_series
    from kai_ray.testing.controlplane.harness import ControlPlaneError

    if against not in AGAINST:
        raise CliError(f"--against: {against!r} is not one of {', '.join(AGAINST)}")
    legacy = {"kai": ("kai",)} if against == "kai" else {}
    choices = {"both": ("kai-ray", against), "kai-ray": ("kai-ray",), "them": (against,), **legacy}
    if scheduler not in choices:
        raise CliError(f"--scheduler: {scheduler!r} is not one of {', '.join(choices)}")
    out_dir = out or Path(f"bench-vs-{against}-{time.strftime('%Y%m%d-%H%M%S')}")
    cfg = VsConfig(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        repeats=repeats,
        schedulers=choices[scheduler],
        workloads=_split(workloads, "--workloads", WORKLOADS),
        preemption_trials=preemption_trials,
        inside=() if inside.strip().lower() == "none" else _split(inside, "--inside", WORKLOADS),
        raw_pods=raw_pods,
        workers=workers,
        kai_limits=kai_limits,
        kai_verbosity=kai_verbosity,
        timeout=timeout,
        out_dir=out_dir.resolve(),
        lock=lock,
    )
    try:
        cfg.validate()
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if "w1" not in cfg.workloads and preemption_trials:
        raise CliError("--preemption-trials: preemption runs on the cluster W1 fills; add w1 to --workloads or use 0")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"--out: {exc}") from None

    def say(msg: str) -> None:
        typer.echo(f"[bench vs-kai] {msg}", err=True)

    try:
        result = run_series(cfg, say)
    except ControlPlaneError as exc:
        raise CliError(f"control plane: {exc}", code=1) from None
    except (RuntimeError, TimeoutError, FileNotFoundError) as exc:
        raise CliError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, code=1) from None
    (out_dir / "series.json").write_text(json.dumps(result, indent=2))
    table = markdown(result["summary"])
    (out_dir / "summary.md").write_text(table)
    if as_json:
        typer.echo(json.dumps(result["summary"], indent=2, sort_keys=True))
        return
    typer.echo(table)
    typer.echo(f"rounds, logs and summary.md in {out_dir}", err=True)


@bench.command("vs-kai-report")
def vs_kai_report(
    dirs: Annotated[list[Path], typer.Argument(help="output directories of bench vs-kai runs (searched recursively)")],
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON instead of tables")] = False,
) -> None:
    """Summarize the rounds of one or more 'bench vs-kai' runs together (e.g. a series run in pieces)."""
    from kai_ray.bench.vs_kai import markdown, summarize

    rounds = []
    for d in dirs:
        if not d.is_dir():
            raise CliError(f"{d}: not a directory")
        for f in sorted(d.rglob("round.json")):
            try:
                rounds.append(json.loads(f.read_text()))
            except (OSError, ValueError) as exc:
                raise CliError(f"{f}: {exc}") from None
    if not rounds:
        raise CliError(f"no round.json under {', '.join(map(str, dirs))}")
    summary = summarize(rounds)
    typer.echo(json.dumps(summary, indent=2, sort_keys=True) if as_json else markdown(summary))

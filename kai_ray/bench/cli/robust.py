"""``kai-ray bench chaos`` and ``bench fuzz``: the suite's reliability runs, longer, on their own control plane."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from kai_ray.bench.cli.group import bench
from kai_ray.cli_error import CliError

PRIORITY_CLASSES = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}


@contextmanager
def _cluster(nodes: int, gpus: int, say: Callable[[str], None]) -> Iterator[dict[str, Any]]:
    """A fresh control plane with KAI's PriorityClasses, both CRD sets, a namespace and ``nodes`` KWOK GPU nodes."""
    from kai_ray.k8s.base.rest import ApiError, Kube
    from kai_ray.testing.controlplane.harness import NODE_BATCH_LABEL, ControlPlane

    with ControlPlane() as plane:
        say(f"control plane up in {plane.timings.total:.1f}s; installing CRDs")
        plane.install_crds(kuberay=True)
        kube = Kube(plane.api_client(pool_size=16))
        for name, value in PRIORITY_CLASSES.items():
            body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}}
            try:
                kube.create("/apis/scheduling.k8s.io/v1/priorityclasses", {**body, "value": value})
            except ApiError as exc:
                if not exc.conflict:
                    raise
        namespace = plane.new_namespace(prefix="bench")
        say(f"creating {nodes} KWOK nodes x {gpus} GPUs")
        names = plane.create_gpu_nodes(nodes, gpus=gpus, prefix="bench", timeout=300)
        batch = kube.get(f"/api/v1/nodes/{names[0]}")["metadata"]["labels"][NODE_BATCH_LABEL]
        yield {
            "kube": kube,
            "kubeconfig": plane.kubeconfig_path,
            "namespace": namespace,
            "selector": {NODE_BATCH_LABEL: batch},
            "capacity": {n: float(gpus) for n in names},
        }
        kube.close()


def _run(as_json: bool, body: Callable[[Callable[[str], None]], dict[str, Any]]) -> dict[str, Any]:
    from kai_ray.k8s.base.rest import ApiError
    from kai_ray.testing.controlplane.harness import ControlPlaneError

    def say(msg: str) -> None:
        if not as_json:
            typer.echo(f"[bench] {msg}", err=True)

    try:
        return body(say)
    except ControlPlaneError as exc:
        raise CliError(f"control plane: {exc}", code=1) from None
    except ApiError as exc:
        raise CliError(f"API server: {exc} (the machine may be overloaded)", code=1) from None


def _positive(**values: float) -> None:
    for flag, value in values.items():
        if value < 1:
            raise CliError(f"--{flag.replace('_', '-')}: {value} must be at least 1")


@bench.command("chaos")
def chaos(
    nodes: Annotated[int, typer.Option("--nodes", help="KWOK nodes")] = 20,
    gpus_per_node: Annotated[int, typer.Option("--gpus-per-node", help="GPUs per node")] = 8,
    replicas: Annotated[int, typer.Option("--replicas", help="processes of each operator")] = 2,
    kills: Annotated[int, typer.Option("--kills", help="operator processes SIGKILLed in all")] = 20,
    seed: Annotated[int, typer.Option("--seed", help="random seed")] = 12,
    log_dir: Annotated[Path | None, typer.Option("--log-dir", help="keep the operators' logs here")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """SIGKILL operator replicas (leaders too, the scheduler's during a preemption) and check the invariants."""
    _positive(nodes=nodes, gpus_per_node=gpus_per_node, replicas=replicas)
    if kills < 2:
        raise CliError(f"--kills: {kills} must be at least 2 (the scheduler's leader during a preemption, and last)")
    if gpus_per_node < 2 or gpus_per_node % 2:
        raise CliError(f"--gpus-per-node: {gpus_per_node} must be even (the workload's gangs use 2-GPU pods)")
    from kai_ray.bench.chaos import ChaosConfig, run_chaos

    cfg = ChaosConfig(nodes=nodes, gpus_per_node=gpus_per_node, replicas=replicas, kills=kills, seed=seed)

    def body(say: Callable[[str], None]) -> dict[str, Any]:
        with _cluster(nodes, gpus_per_node, say) as env, tempfile.TemporaryDirectory() as tmp:
            logs = log_dir or Path(tmp) / "logs"
            res = run_chaos(
                env["kube"], env["kubeconfig"], env["namespace"], env["selector"], env["capacity"], cfg, logs, say
            )
            return res.to_dict()

    out = _run(as_json, body)
    _print(out, as_json, "chaos")


@bench.command("fuzz")
def fuzz(
    objects: Annotated[int, typer.Option("--objects", help="mutated objects the API server accepts")] = 3000,
    nodes: Annotated[int, typer.Option("--nodes", help="KWOK nodes")] = 4,
    good_every: Annotated[int, typer.Option("--good-every", help="a good gang after this many objects")] = 25,
    seed: Annotated[int, typer.Option("--seed", help="random seed")] = 7,
    log_dir: Annotated[Path | None, typer.Option("--log-dir", help="keep the operators' logs here")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Send mutated Ray CRs, PodGroups, Queues and pods through the API while good gangs must keep being bound."""
    _positive(objects=objects, nodes=nodes, good_every=good_every)
    from kai_ray.bench.fuzz import FuzzConfig, run_fuzz

    cfg = FuzzConfig(objects=objects, good_every=good_every, seed=seed)

    def body(say: Callable[[str], None]) -> dict[str, Any]:
        with _cluster(nodes, 8, say) as env, tempfile.TemporaryDirectory() as tmp:
            logs = log_dir or Path(tmp) / "logs"
            return run_fuzz(env["kube"], env["kubeconfig"], env["namespace"], env["selector"], cfg, logs, say).to_dict()

    out = _run(as_json, body)
    _print(out, as_json, "fuzz")


def _print(out: dict[str, Any], as_json: bool, what: str) -> None:
    out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    out["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if as_json:
        typer.echo(json.dumps(out, indent=1, sort_keys=True))
    else:
        for key, value in out.items():
            typer.echo(f"{key:>28}: {value}")
    if not out.get("ok"):
        raise CliError(f"bench {what}: an invariant failed (see above)", code=1)

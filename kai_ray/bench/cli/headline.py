"""``kai-ray bench headline``: the headline on a real node, with kai-ray's Ray-aware evictions and with KAI's, on the
Ray Train v2 job (which takes the preemption notice) and on the hand-written loop (which does not).

Needs the real-node lane (``kai_ray.testing.controlplane.realnode``: kubelet + containerd on this host, as root) and
its Ray image; the first run builds what the lane builds.
"""

from __future__ import annotations

import importlib
import json
from typing import Annotated, Any

import typer

from kai_ray.bench.cli.group import bench
from kai_ray.cli_error import CliError

LANE = "kai_ray.testing.controlplane.realnode"


def _lane() -> Any:
    try:
        return importlib.import_module(LANE)
    except ImportError as exc:
        raise CliError(f"the real-node lane ({LANE}) is not in this checkout: {exc}", code=1) from None


@bench.command("headline")
def headline(
    semantics: Annotated[str, typer.Option("--semantics", help="both, kai-ray or kai")] = "both",
    trainer: Annotated[
        str,
        typer.Option(
            "--trainer", help="train-v2, loop, or all (train-v2 with both semantics, then loop with kai-ray's)"
        ),
    ] = "train-v2",
    workers: Annotated[int, typer.Option("--workers", help="training workers (1 GPU each)")] = 3,
    gpus: Annotated[int, typer.Option("--gpus", help="nvidia.com/gpu the node advertises")] = 8,
    timeout: Annotated[float, typer.Option("--timeout", help="seconds for each wait of the story")] = 900.0,
    no_suspend: Annotated[bool, typer.Option("--no-suspend", help="skip the whole-gang (suspend) scenario")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Training fills a real node, a RayService preempts it, training shrinks and grows back, then a whole-gang
    preemption suspends and resumes it; prints the figures for each eviction semantics."""
    chosen = {"both": ("kai-ray", "kai"), "kai-ray": ("kai-ray",), "kai": ("kai",)}.get(semantics)
    if chosen is None:
        raise CliError(f"--semantics: {semantics!r} is not one of both, kai-ray, kai")
    if trainer not in ("train-v2", "loop", "all"):
        raise CliError(f"--trainer: {trainer!r} is not one of train-v2, loop, all")
    runs = [(name, "train-v2" if trainer == "all" else trainer) for name in chosen]
    if trainer == "all" and "kai-ray" in chosen:
        runs.append(("kai-ray", "loop"))
    if workers < 1 or gpus <= workers or timeout <= 0:
        raise CliError("--workers must be at least 1, --gpus more than --workers, --timeout positive")
    lane = _lane()
    from kai_ray.bench.headline import Story, StoryConfig
    from kai_ray.k8s.base.rest import Kube

    def say(msg: str) -> None:
        if not as_json:
            typer.echo(f"[bench headline] {msg}", err=True)

    out: dict[str, Any] = {}
    try:
        with lane.RealNode(gpus=gpus) as node:
            kube = Kube(node.plane.api_client(pool_size=16))
            for name, script in runs:
                key = name if trainer != "all" else f"{name}/{script}"
                ns = node.plane.new_namespace(f"headline-{name}")
                cfg = StoryConfig(
                    semantics=name, trainer=script, workers=workers, timeout=timeout, suspend_story=not no_suspend
                )
                story = Story(node, kube, ns, cfg, say)
                try:
                    out[key] = story.run().as_dict()
                except TimeoutError as exc:
                    out[key] = {**story.fig.as_dict(), "error": str(exc)}
                finally:
                    story.close()
                    node.plane.clear_namespace(ns)
            kube.close()
    except lane.NodeUnavailable as exc:
        raise CliError(f"no real node here: {exc}", code=1) from None
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    keys = [
        k
        for k in next(iter(out.values()))
        if k not in ("semantics", "trainer", "notes", "job_states", "progress_points")
    ]
    typer.echo(f"{'':32}" + "".join(f"{n:>14}" for n in out))
    for key in keys:
        typer.echo(f"{key:32}" + "".join(f"{out[n].get(key)!s:>14}" for n in out))

"""``kai-ray explain POD-OR-PODGROUP [-n NS]``: why it is pending, where it runs, who preempted it."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from kai_ray.cli import CliError, app, output_format


def _current_namespace(kubeconfig: str | None, context: str | None) -> str:
    from kubernetes import config

    try:
        _, active = config.list_kube_config_contexts(config_file=kubeconfig)
        if context:
            contexts, _ = config.list_kube_config_contexts(config_file=kubeconfig)
            active = next((ctx for ctx in contexts if ctx.get("name") == context), active)
        return str((active or {}).get("context", {}).get("namespace") or "default")
    except Exception:
        return "default"


@app.command("explain")
def explain_cmd(
    name: Annotated[
        str, typer.Argument(help="a pod, a PodGroup, or the owner a PodGroup was made for (e.g. a RayJob)")
    ],
    namespace: Annotated[
        str | None, typer.Option("-n", "--namespace", help="namespace (default: the context's)")
    ] = None,
    kubeconfig: Annotated[str | None, typer.Option(help="kubeconfig file (default: $KUBECONFIG)")] = None,
    context: Annotated[str | None, typer.Option(help="kubeconfig context")] = None,
    output: Annotated[str, typer.Option("-o", "--output", help="text or json")] = "text",
) -> None:
    """Explain a pod's or PodGroup's scheduling state from the cluster: pending reason, placement, preemptions."""
    output = output_format(output, ("text", "json"))
    from kai_ray.cli.connection import api_problem, connect
    from kai_ray.k8s.base.rest import ApiError
    from kai_ray.k8s.scheduling.pod_explanation import ExplainError, explain_data, render

    kube = connect(kubeconfig, context, pool_size=2)
    ns = namespace or _current_namespace(kubeconfig, context)
    try:
        data = explain_data(kube, ns, name)
    except ExplainError as exc:
        raise CliError(str(exc), code=1) from None
    except ApiError as exc:
        raise api_problem(exc, f"reading {name!r} in namespace {ns}") from None
    finally:
        kube.close()
    typer.echo(json.dumps(data, indent=2, default=str) if output == "json" else render(data))

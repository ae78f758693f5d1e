"""Reaching the cluster from a CLI command, with errors that name only what the user gave.

Where the credentials came from decides the message: ``--kubeconfig FILE`` when it was passed, ``$KUBECONFIG`` when
that is set, otherwise the default ``~/.kube/config`` or the in-cluster service account. An API server that does not
answer is named by its address, never by a Python exception.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from kai_ray.cli import CliError

if TYPE_CHECKING:
    from kai_ray.k8s.base.rest import ApiError, Kube


def _source(kubeconfig: str | None) -> tuple[str, str | None]:
    """(how to name where the kubeconfig came from, its path)."""
    if kubeconfig:
        return f"--kubeconfig {kubeconfig}", kubeconfig
    env = os.environ.get("KUBECONFIG")
    if env:
        return f"$KUBECONFIG ({env})", env
    return "the default kubeconfig (~/.kube/config)", str(Path.home() / ".kube" / "config")


def credentials_problem(kubeconfig: str | None, context: str | None, exc: Exception) -> str:
    named, path = _source(kubeconfig)
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if not kubeconfig and not os.environ.get("KUBECONFIG") and os.environ.get("KUBERNETES_SERVICE_HOST"):
        return f"the pod's service account: cannot load in-cluster credentials: {detail}"
    if path is not None and not any(Path(p).is_file() for p in path.split(os.pathsep) if p):
        if kubeconfig or os.environ.get("KUBECONFIG"):
            return f"{named}: no such file"
        return (
            "no cluster credentials: $KUBECONFIG is not set, ~/.kube/config does not exist, and this is not a pod "
            "with a service account"
        )
    if context and f"name {context} " in f"{detail} ":
        return f"--context {context}: no such context in {named}"
    if detail.startswith("Invalid kube-config file. "):
        detail = detail.removeprefix("Invalid kube-config file. ")
    elif isinstance(exc, TypeError | AttributeError | KeyError):
        detail = "not a kubeconfig file"
    return f"{named}: cannot load cluster credentials: {detail}"


def connect(kubeconfig: str | None, context: str | None, pool_size: int = 4) -> Kube:
    """A client for the cluster, or a CliError saying which credentials could not be used and why."""
    from kai_ray.k8s.base.rest import Kube

    try:
        return Kube.connect(kubeconfig, context, pool_size=pool_size)
    except Exception as exc:
        raise CliError(credentials_problem(kubeconfig, context, exc)) from None


def api_problem(exc: ApiError, doing: str) -> CliError:
    """An API error while ``doing`` something, as the one line a user can act on."""
    if exc.unreachable:
        return CliError(str(exc), code=1)
    if exc.status in (401, 403):
        return CliError(f"{doing}: not allowed ({exc.status} {exc.reason}): {exc.message}", code=1)
    return CliError(f"{doing}: {exc}", code=1)

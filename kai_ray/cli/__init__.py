"""The ``kai-ray`` command line: typer commands that compose the library; no logic of their own.

Each command group lives in its own module and registers itself on ``app``; ``main`` turns every expected error
(:class:`CliError`, and a module of an extra that is not installed) into one line on stderr and a non-zero exit
instead of a traceback.
"""

from __future__ import annotations

import sys

import typer

app = typer.Typer(
    name="kai-ray",
    help="KAI Scheduler semantics for Ray on Kubernetes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class CliError(Exception):
    """An expected failure: printed as one line, exit code 2 (or ``code``)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def _register() -> None:
    from kai_ray.cli import commands  # noqa: F401  (imports every command module)


@app.callback()
def _root() -> None:
    """KAI Scheduler semantics for Ray on Kubernetes: gang PodGroups, queues, fair share, preemption."""


def main(argv: list[str] | None = None) -> None:
    _register()
    try:
        app(args=argv, prog_name="kai-ray")
    except CliError as exc:
        print(f"kai-ray: error: {exc}", file=sys.stderr)
        sys.exit(exc.code)
    except ModuleNotFoundError as exc:
        from kai_ray.extras import MissingExtra, missing_extra

        missing = exc if isinstance(exc, MissingExtra) else missing_extra(exc)
        if missing is None:
            raise
        print(f"kai-ray: error: {missing}", file=sys.stderr)
        sys.exit(2)

"""The ``kai-ray`` command line: typer commands that compose the library; no logic of their own.

Each command group lives in its own module and registers itself on ``app``; ``main`` turns every expected error
(:class:`CliError`, and a module of an extra that is not installed) into one line on stderr and a non-zero exit
instead of a traceback.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from kai_ray.cli_error import CliError

app = typer.Typer(
    name="kai-ray",
    help="KAI Scheduler semantics for Ray on Kubernetes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def warn(message: str) -> None:
    """A problem the command worked around (an unknown field, ignored): one line on stderr."""
    print(f"kai-ray: warning: {message}", file=sys.stderr)


STRICT_HINT = "--strict makes this an error"
StrictOpt = Annotated[
    bool, typer.Option("--strict", help="Warnings (unknown fields in manifests and scenarios) are errors: exit 2")
]


def warn_or_fail(message: str, strict: bool, ignored: bool = True) -> None:
    """A problem in the user's files that kai-ray can work around (an unknown field, ignored): a warning that says
    how to make it an error, or with ``--strict`` the error itself (exit 2), for CI and for output piped into jq,
    where a warning on stderr is easy to miss."""
    if strict:
        raise CliError(f"{message} (--strict)")
    warn(f"{message}; ignored ({STRICT_HINT})" if ignored else f"{message} ({STRICT_HINT})")


def output_format(value: str, allowed: tuple[str, ...]) -> str:
    """An ``-o/--output`` value in any case (``-o YAML``), lower-cased; anything else is a one-line error."""
    lowered = value.lower()
    if lowered not in allowed:
        raise CliError(f"--output: {value!r} is not one of {', '.join(allowed)}")
    return lowered


def note(message: str) -> None:
    """Something skipped on purpose (a non-Ray document): one line on stderr."""
    print(f"kai-ray: note: {message}", file=sys.stderr)


def _register(argv: list[str] | None = None) -> None:
    """Import the command modules. ``kai-ray operator ...`` (what the chart's Deployments run) imports only its own:
    the other commands' imports would add about half a second to every operator start and failover. A benchmark
    (``kai-ray bench ...``, ``kai-ray sweep``) likewise imports only the benchmark commands, whose figures (process
    CPU of ``bench replay``) would otherwise count the Ray manifest models and the CEL runtime it never uses."""
    first = (sys.argv[1:] if argv is None else argv)[:1]
    if first == ["operator"]:
        from kai_ray.cli import operator, output  # noqa: F401

        return
    if first in (["bench"], ["sweep"]):
        from kai_ray.cli import benchmarks, output  # noqa: F401

        if benchmarks.register_benchmarks():
            return
    from kai_ray.cli import commands  # noqa: F401  (imports every command module)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"kai-ray {version('kai-ray')}")
        raise typer.Exit()


@app.callback()
def _root(
    _version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """KAI Scheduler semantics for Ray on Kubernetes: gang PodGroups, queues, fair share, preemption."""


INTERNAL_ERROR = 70  # EX_SOFTWARE


def main(argv: list[str] | None = None) -> None:
    """Run a command. Expected failures are one ``kai-ray: error:`` line; anything else is a bug, reported as one line
    too (``KAI_RAY_DEBUG=1`` shows the traceback), so no command ever ends in a traceback."""
    _register(argv)
    try:
        app(args=argv, prog_name="kai-ray")
    except CliError as exc:
        print(f"kai-ray: error: {exc}", file=sys.stderr)
        sys.exit(exc.code)
    except KeyboardInterrupt:
        print("kai-ray: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:
        missing = _missing_extra(exc)
        if missing is not None:
            print(f"kai-ray: error: {missing}", file=sys.stderr)
            sys.exit(2)
        if os.environ.get("KAI_RAY_DEBUG"):
            raise
        where = "".join(str(exc).splitlines()[:1]) or type(exc).__name__
        print(
            f"kai-ray: internal error: {type(exc).__name__}: {where} (a bug: please report it; KAI_RAY_DEBUG=1 shows "
            "the traceback)",
            file=sys.stderr,
        )
        sys.exit(INTERNAL_ERROR)


def _missing_extra(exc: Exception) -> Exception | None:
    """A module of one of kai-ray's extras that is not installed, as the error that names the extra."""
    from kai_ray.extras import MissingExtra, missing_extra

    if isinstance(exc, MissingExtra):
        return exc
    return missing_extra(exc) if isinstance(exc, ModuleNotFoundError) else None

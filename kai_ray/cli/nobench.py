"""``kai-ray bench`` and ``kai-ray sweep`` where the benchmark tooling is absent (an install from the wheel).

The benchmarks and the test control plane are development tooling (``kai_ray.bench``, ``kai_ray.testing``) and are
left out of the runtime wheel, so these stand-ins answer with one line naming what to install instead.
"""

from __future__ import annotations

import typer

from kai_ray.cli import CliError, app

MISSING = (
    "the benchmarks are development tooling, not in the kai-ray wheel: in a kai-ray checkout, pip install -e '.[bench]'"
)

EXTRA_ARGS = {"allow_extra_args": True, "ignore_unknown_options": True}


@app.command("bench", context_settings=EXTRA_ARGS, add_help_option=False)
def bench(ctx: typer.Context) -> None:
    """Benchmarks (needs a checkout with the 'bench' extra)."""
    raise CliError(f"kai-ray bench: {MISSING}")


@app.command("sweep", context_settings=EXTRA_ARGS, add_help_option=False)
def sweep(ctx: typer.Context) -> None:
    """Policy x seed sweeps as Ray tasks (needs a checkout with the 'bench' extra)."""
    raise CliError(f"kai-ray sweep: {MISSING}")

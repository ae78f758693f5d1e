"""``kai-ray bench`` and ``kai-ray sweep`` where the benchmark tooling is absent (an install from the wheel).

The benchmarks and the test control plane are development tooling (``kai_ray.bench``, ``kai_ray.testing``) and are
left out of the runtime wheel, so these stand-ins answer with one line naming what to install instead.
"""

from __future__ import annotations

import typer

from kai_ray.cli import CliError, app

MISSING = (
    "the benchmarks are development tooling, not part of the kai-ray wheel: install kai-ray from a checkout "
    "with the 'bench' extra (git clone ... && pip install -e '.[bench]')"
)

bench = typer.Typer(name="bench", help="Benchmarks (needs a checkout with the 'bench' extra).")
app.add_typer(bench, name="bench")


@bench.callback(
    invoke_without_command=True, context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
def _missing(ctx: typer.Context) -> None:
    raise CliError(f"kai-ray bench: {MISSING}")


@app.command("sweep", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def sweep(ctx: typer.Context) -> None:
    """Policy x seed sweeps as Ray tasks (needs a checkout with the 'bench' extra)."""
    raise CliError(f"kai-ray sweep: {MISSING}")

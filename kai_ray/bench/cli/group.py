"""The ``kai-ray bench`` command group, which every benchmark command registers itself on."""

from __future__ import annotations

import typer

from kai_ray.cli import app

bench = typer.Typer(
    name="bench", help="Benchmarks (core: the scheduler core on synthetic clusters).", no_args_is_help=True
)
app.add_typer(bench, name="bench")

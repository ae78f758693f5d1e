"""The ``kai-ray bench`` command group, which every benchmark command registers itself on.

The CLI adds it to its app (:mod:`kai_ray.cli.commands`): the benchmark commands never import the CLI back.
"""

from __future__ import annotations

import typer

bench = typer.Typer(
    name="bench", help="Benchmarks (core: the scheduler core on synthetic clusters).", no_args_is_help=True
)

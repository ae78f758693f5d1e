"""Imports each command module so it registers itself on the app. One line per module; the benchmark commands,
which do not import the CLI, are added here.

The benchmark commands (``kai-ray bench ...``, ``kai-ray sweep``) live in :mod:`kai_ray.bench.cli`, which the
runtime wheel does not carry; without it, ``bench`` and ``sweep`` say in one line how to get them.
"""

from kai_ray.cli import app, output  # noqa: F401, I001  (help: no value placeholder on flags)
from kai_ray.cli import podgroup  # noqa: F401
from kai_ray.cli import simulate  # noqa: F401
from kai_ray.cli import demo  # noqa: F401
from kai_ray.cli import operator  # noqa: F401
from kai_ray.cli import explain  # noqa: F401
from kai_ray.cli import views  # noqa: F401

from kai_ray.cli.benchmarks import register_benchmarks

if not register_benchmarks():
    from kai_ray.cli import nobench  # noqa: F401

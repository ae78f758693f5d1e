"""The benchmark commands (``kai-ray bench ...``, ``kai-ray sweep``) added to the app when the package has them.

Why a module of its own: the full command list and ``kai-ray bench ...`` alone (which imports only these, so a
benchmark's process time is its own) add them the same way; the runtime wheel does not carry :mod:`kai_ray.bench`.
"""

from __future__ import annotations

from types import ModuleType

from kai_ray.cli import app

BENCH: ModuleType | None
try:
    from kai_ray.bench import cli as _bench_cli  # the CLI's lazy bench entry
except ModuleNotFoundError as exc:
    if exc.name not in ("kai_ray.bench", "kai_ray.testing"):
        raise
    BENCH = None
else:
    BENCH = _bench_cli

_added = False


def register_benchmarks() -> bool:
    """Add ``bench`` and ``sweep`` to the app (once); False when the benchmark package is not installed."""
    global _added
    if BENCH is None:
        return False
    if not _added:
        app.add_typer(BENCH.bench, name="bench")
        app.command("sweep")(BENCH.sweep)
        _added = True
    return True

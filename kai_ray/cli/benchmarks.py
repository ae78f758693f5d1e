"""The benchmark commands (``kai-ray bench ...``, ``kai-ray sweep``) added to the app when the package has them.

Why a module of its own: the full command list and ``kai-ray bench ...`` alone (which imports only these, so a
benchmark's process time is its own) add them the same way; the runtime wheel does not carry :mod:`kai_ray.bench`.
"""

from __future__ import annotations

from kai_ray.cli import app

_added: bool | None = None  # None until the first call: whether the benchmark commands are on the app


def register_benchmarks() -> bool:
    """Add ``bench`` and ``sweep`` to the app (once); False when the benchmark package is not installed."""
    global _added
    if _added is not None:
        return _added
    try:
        from kai_ray.bench import cli as bench_cli  # the CLI's lazy bench entry
    except ModuleNotFoundError as exc:
        if exc.name not in ("kai_ray.bench", "kai_ray.testing"):
            raise
        _added = False
        return False
    app.add_typer(bench_cli.bench, name="bench")
    app.command("sweep")(bench_cli.sweep)
    _added = True
    return True

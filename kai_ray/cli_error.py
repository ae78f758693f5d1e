"""The one exception a command raises for an expected failure: ``kai-ray`` prints it as one line, never a traceback.

Why outside :mod:`kai_ray.cli`: the benchmark commands (:mod:`kai_ray.bench.cli`) raise it too, and the CLI imports
them, so they must not import the CLI back.
"""

from __future__ import annotations


class CliError(Exception):
    """An expected failure: printed as one line, exit code 2 (or ``code``)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code

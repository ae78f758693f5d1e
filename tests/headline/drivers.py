"""Waiting on a Ray driver run as its own process: the condition, or the driver's own output when it exits first."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def wait_on_driver(
    what: str, check: Callable[[], Any], driver: subprocess.Popen[bytes], log: Path, timeout: float
) -> Any:
    """Poll ``check`` until it returns something truthy; fail with the driver's last output if it exits first or
    ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        if driver.poll() is not None:
            pytest.fail(f"the driver exited ({driver.returncode}) while waiting for {what}:\n{log.read_text()[-4000:]}")
        time.sleep(0.2)
    pytest.fail(f"{what}: not within {timeout:.0f} s; driver output:\n{log.read_text()[-4000:]}")

"""A machine without Go: building the control plane says so in one line (it was a FileNotFoundError)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kai_ray.testing.controlplane import build


def test_no_go_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("KAI_RAY_CACHE", str(tmp_path / "cache"))
    build.go_version.cache_clear()
    build.go_mod_cache.cache_clear()
    try:
        with pytest.raises(build.GoMissing, match=r"^'go' is not on PATH: .* install Go >= 1\.26"):
            build.ensure("etcd", log=False)
        with pytest.raises(build.GoMissing):
            build.module_dir(build.KWOK_MODULE, build.KWOK_VERSION)
    finally:
        build.go_version.cache_clear()
        build.go_mod_cache.cache_clear()


def test_the_build_command_without_go_exits_2_with_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kai_ray.testing.controlplane.build", "etcd"],
        env={"PATH": str(tmp_path), "KAI_RAY_CACHE": str(tmp_path / "cache"), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("kai-ray: error: 'go' is not on PATH")

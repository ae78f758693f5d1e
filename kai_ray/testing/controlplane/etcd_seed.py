"""The etcd seed cache: an etcd data directory that already holds a set of CRDs, so a control plane starts with them.

Why: creating KubeRay's big CRDs costs the apiserver ~7 s of CPU (20-30 s of wall time on two busy cores), so the
first start with a given set builds the directory once, keeps it under ``~/.cache/kai-ray/etcd-seed/`` and later starts
copy it. Building it needs a control plane, which the caller passes in, so this module does not import the harness.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kai_ray.testing.controlplane import build

SEED_KEEP = 4


def etcd_seed(docs: list[dict[str, Any]], build_into: Callable[[list[dict[str, Any]], Path], None]) -> Path:
    """An etcd data directory in which ``docs`` (CRDs) exist and are Established; built once, then cached.

    Why safe to reuse: it holds only what the apiserver bootstraps plus the CRDs (no tokens, no secrets), every
    control plane copies it before starting, and the key covers the CRD contents and the etcd/apiserver versions.
    ``build_into(docs, workdir)`` runs a control plane in ``workdir`` that creates ``docs``; its ``workdir/etcd``
    becomes the seed.
    """
    payload = json.dumps([build.K8S_VERSION, build.ETCD_VERSION, docs], sort_keys=True).encode()
    key = hashlib.sha256(payload).hexdigest()[:16]
    root = build.cache_root() / "etcd-seed"
    seed = root / key
    if (seed / "member").is_dir():
        seed.touch()
        return seed
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kai-ray-seed-") as tmp:
        work = Path(tmp) / "cp"
        build_into(docs, work)
        partial = root / f"{key}.partial-{os.getpid()}"
        shutil.copytree(work / "etcd", partial)
        try:
            partial.rename(seed)
        except OSError:  # another process won the race; its copy is equivalent
            shutil.rmtree(partial, ignore_errors=True)
    seeds = sorted((p for p in root.iterdir() if "." not in p.name), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in seeds[SEED_KEEP:]:
        shutil.rmtree(old, ignore_errors=True)
    return seed

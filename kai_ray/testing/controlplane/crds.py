"""CustomResourceDefinitions for a test control plane: where each project's CRDs live, and applying them.

Why apart: finding kai-ray's, KAI's and KubeRay's CRD files (a checkout, Go modules fetched through the proxy) and
getting them Established is its own job, shared by control-plane start, the etcd seed cache and tests that apply CRDs
later; the apiserver is the slow part, so the YAML parse is memoised and the requests run in a few threads.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from kai_ray.testing.controlplane import build
from kai_ray.testing.controlplane.processes import ControlPlaneError, wait_for

FIELD_MANAGER = "kai-ray-controlplane"


def repo_root() -> Path:
    return Path(__file__).resolve().parents[3]


def our_crd_dir() -> Path:
    """kai-ray's CRDs (Queue, PodGroup), shipped in the Helm chart: the harness is test tooling and runs from a
    checkout (``KAI_RAY_CRD_DIR`` points elsewhere)."""
    path = Path(os.environ.get("KAI_RAY_CRD_DIR") or repo_root() / "helm" / "kai-ray" / "crds")
    if not path.is_dir():
        raise ControlPlaneError(
            f"kai-ray's CRDs are not at {path}: run from a kai-ray checkout (helm/kai-ray/crds) or set KAI_RAY_CRD_DIR"
        )
    return path


def _kai_crd(name: str) -> Path:
    path = build.module_dir(build.KAI_MODULE, build.KAI_VERSION) / "deployments" / "kai-scheduler" / "crds" / name
    if not path.is_file():
        raise ControlPlaneError(f"KAI module {build.KAI_VERSION} lacks {path}")
    return path


def kai_crd_files() -> list[Path]:
    """KAI Scheduler's own Queue and PodGroup CRDs, from its Go module (downloaded through the proxy, never built)."""
    return [_kai_crd(f"scheduling.run.ai_{plural}.yaml") for plural in ("queues", "podgroups")]


def kai_config_crd_file() -> Path:
    """KAI's operator ``Config`` CRD (``kai.scheduler/v1``), where a KAI install records its scheduler name."""
    return _kai_crd("kai.scheduler_configs.yaml")


@lru_cache(maxsize=1)
def kuberay_crd_dir() -> Path:
    """KubeRay's ``config/crd/bases`` from its Go module (downloaded through the proxy, never committed)."""
    path = build.module_dir(build.KUBERAY_MODULE, build.KUBERAY_VERSION) / "config" / "crd" / "bases"
    if not path.is_dir():
        raise ControlPlaneError(f"KubeRay module {build.KUBERAY_VERSION} has no {path}")
    return path


def kuberay_crd_files() -> list[Path]:
    """RayCluster, RayJob and RayService CRDs (not RayCronJob: alpha, off by default, and each CRD costs seconds)."""
    files = [kuberay_crd_dir() / f"ray.io_{plural}.yaml" for plural in ("rayclusters", "rayjobs", "rayservices")]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise ControlPlaneError(f"KubeRay module {build.KUBERAY_VERSION} lacks {', '.join(missing)}")
    return files


def cert_manager_crd_files() -> list[Path]:
    """cert-manager's Certificate, Issuer and ClusterIssuer CRDs (``deploy/crds`` of its module: plain YAML there),
    for checking what the chart renders in its cert-manager mode."""
    base = build.module_dir(build.CERT_MANAGER_MODULE, build.CERT_MANAGER_VERSION) / "deploy" / "crds"
    files = [base / f"cert-manager.io_{plural}.yaml" for plural in ("certificates", "issuers", "clusterissuers")]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise ControlPlaneError(f"cert-manager module {build.CERT_MANAGER_VERSION} lacks {', '.join(missing)}")
    return files


_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml_docs(path: Path) -> list[Any]:
    """All documents of a YAML file, memoised as JSON in the cache (KubeRay's 1.3 MB of CRDs take seconds to parse)."""
    st = path.stat()
    key = hashlib.sha256(f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:20]
    cached = build.cache_root() / "yaml-json" / f"{key}.json"
    try:
        docs: list[Any] = json.loads(cached.read_text())
        return docs
    except (OSError, ValueError):
        pass
    docs = list(yaml.load_all(path.read_text(), Loader=_YAML_LOADER))
    with contextlib.suppress(OSError, TypeError, ValueError):  # e.g. a YAML timestamp is not JSON; just re-parse
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(docs))
        tmp.replace(cached)
    return docs


def crd_documents(paths: Iterable[Path | str]) -> Iterator[dict[str, Any]]:
    files: list[Path] = []
    for p in map(Path, paths):
        files.extend(sorted(p.glob("*.yaml")) if p.is_dir() else [p])
    for f in files:
        for doc in load_yaml_docs(f):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                yield doc


def apply_crd_docs(api_client: Any, docs: list[dict[str, Any]], timeout: float = 60.0) -> list[str]:
    """Create (or, if present, server-side apply) every CRD document, then wait until all are Established.

    Responses are read raw: KubeRay's CRDs are ~300 KB each and typed deserialisation costs more than the request.
    The requests run in a few threads because the server, not the client, is the slow part.
    """
    from concurrent.futures import ThreadPoolExecutor

    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    api: Any = client.ApiextensionsV1Api(api_client)

    def put(doc: dict[str, Any]) -> str:
        name: str = doc["metadata"]["name"]
        try:
            api.create_custom_resource_definition(doc, field_manager=FIELD_MANAGER, _preload_content=False).read()
        except ApiException as exc:
            if exc.status != 409:
                raise ControlPlaneError(f"CRD {name} rejected: {exc.status} {exc.body}") from None
            api.patch_custom_resource_definition(
                name,
                doc,
                field_manager=FIELD_MANAGER,
                force=True,
                _content_type="application/apply-patch+yaml",
                _preload_content=False,
            ).read()
        return name

    with ThreadPoolExecutor(max_workers=4) as pool:
        names = list(pool.map(put, docs))
    wait_established(api_client, names, timeout)
    return names


def wait_established(api_client: Any, names: list[str], timeout: float) -> None:
    from kubernetes import client

    api: Any = client.ApiextensionsV1Api(api_client)

    def established() -> bool:
        for name in names:
            raw = json.loads(api.read_custom_resource_definition(name, _preload_content=False).read())
            conds = (raw.get("status") or {}).get("conditions") or []
            if not any(c.get("type") == "Established" and c.get("status") == "True" for c in conds):
                return False
        return True

    wait_for(f"CRDs {', '.join(names)} to be Established", established, timeout, interval=0.1)

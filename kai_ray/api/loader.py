"""Parsing manifests into API models: the one place that turns YAML/dicts into typed objects.

Errors are :class:`ManifestError` with one line naming the document and the field, so callers (CLI, operators,
simulator) can report them without a traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from kai_ray.api.meta import Pod
from kai_ray.api.podgroup import PodGroup
from kai_ray.api.queue import Queue
from kai_ray.api.ray import RAY_API_VERSIONS, RayCluster, RayJob, RayService

KINDS: dict[tuple[str, str], type[BaseModel]] = {
    ("scheduling.run.ai/v2", "Queue"): Queue,
    ("scheduling.run.ai/v2alpha2", "PodGroup"): PodGroup,
    ("v1", "Pod"): Pod,
}
for _v in RAY_API_VERSIONS:
    KINDS[(_v, "RayCluster")] = RayCluster
    KINDS[(_v, "RayJob")] = RayJob
    KINDS[(_v, "RayService")] = RayService


class ManifestError(ValueError):
    """A manifest that cannot be used; the message is one line naming where and which field."""


def field_path(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as a dotted path with [i] indices, e.g. ``spec.subGroups[1].name``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def describe(doc: dict[str, Any]) -> str:
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    name = (meta or {}).get("name", "?")
    return f"{doc.get('kind', '?')} {name}"


SIM_SCENARIO = "a kai-ray simulator scenario"


def what_is(doc: Any) -> str:
    """What a decoded document looks like, for a "wrong kind of file" message: a manifest, or a scenario."""
    if not isinstance(doc, dict):
        return f"a YAML {type(doc).__name__}, not a mapping"
    if doc.get("kind"):
        name = (doc.get("metadata") or {}).get("name") if isinstance(doc.get("metadata"), dict) else None
        return f"a {doc['kind']} manifest" + (f" ({name})" if name else "")
    if "nodes" in doc and "jobs" in doc:
        return "a scheduler-core test scenario (the format of tests/scheduler/scenarios)"
    if "nodes" in doc and ("workloads" in doc or "queues" in doc):
        return SIM_SCENARIO
    return "a mapping without apiVersion/kind"


def parse_object(doc: Any, where: str = "document") -> BaseModel:
    """Turn one decoded manifest into its model, or raise ManifestError naming the field."""
    if not isinstance(doc, dict):
        raise ManifestError(f"{where}: not a Kubernetes object (expected a mapping, got {type(doc).__name__})")
    key = (str(doc.get("apiVersion", "")), str(doc.get("kind", "")))
    model = KINDS.get(key)
    if model is None:
        raise ManifestError(f"{where} ({describe(doc)}): unsupported apiVersion/kind {key[0]!r}/{key[1]!r}")
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = field_path(tuple(err["loc"])) or "(root)"
        raise ManifestError(f"{where} ({describe(doc)}): field {field}: {err['msg']}") from None


def load_documents(text: str, source: str = "<input>") -> Iterator[tuple[str, Any]]:
    """Yield (label, document) for each non-empty YAML document; YAML syntax errors become ManifestError."""
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ManifestError(f"{source}:{where} invalid YAML: {problem}") from None
    for i, doc in enumerate(docs):
        if doc is None:
            continue
        yield f"{source} document {i + 1}", doc

"""Our CRD YAMLs against the pydantic API models, without a server.

Why: the API server prunes any field its schema does not declare, silently. A model field missing from the CRD would
be dropped on every write, so every model field must be declared with a matching type.
"""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from pydantic import BaseModel

from kai_ray.api.podgroup import PodGroup
from kai_ray.api.queue import Queue
from kai_ray.testing.controlplane.harness import our_crd_dir

JSON_TYPES: dict[type, set[str]] = {
    str: {"string"},
    int: {"integer"},
    float: {"number"},
    bool: {"boolean"},
}


def _crd(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((our_crd_dir() / name).read_text())
    return doc


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def _strip_optional(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _check(tp: Any, schema: dict[str, Any], path: str, problems: list[str]) -> None:
    tp = _strip_optional(tp)
    origin = typing.get_origin(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        if schema.get("type") != "object" or "properties" not in schema:
            problems.append(f"{path}: model {tp.__name__} but schema is {schema.get('type')} without properties")
            return
        _check_model(tp, schema, path, problems)
    elif origin is list:
        if schema.get("type") != "array":
            problems.append(f"{path}: list but schema type {schema.get('type')}")
            return
        _check(typing.get_args(tp)[0], schema.get("items", {}), f"{path}[]", problems)
    elif origin is dict:
        if schema.get("type") != "object":
            problems.append(f"{path}: dict but schema type {schema.get('type')}")
    elif origin is Literal:
        allowed = set(schema.get("enum") or [])
        missing = {v for v in typing.get_args(tp) if v not in allowed}
        if schema.get("type") != "string" or (allowed and missing):
            problems.append(f"{path}: Literal values {sorted(missing)} not allowed by schema enum {sorted(allowed)}")
    elif tp in JSON_TYPES:
        if schema.get("type") not in JSON_TYPES[tp]:
            problems.append(f"{path}: {tp.__name__} but schema type {schema.get('type')}")
    elif tp is Any:
        pass
    else:
        problems.append(f"{path}: unhandled annotation {tp!r} (extend this test)")


def _check_model(model: type[BaseModel], schema: dict[str, Any], path: str, problems: list[str]) -> None:
    props = schema["properties"]
    for name, info in model.model_fields.items():
        alias = info.alias or name
        if path == "" and alias in ("apiVersion", "kind", "metadata"):
            continue
        if alias not in props:
            problems.append(f"{path}.{alias}: model field {model.__name__}.{name} missing from the CRD schema")
            continue
        _check(info.annotation, props[alias], f"{path}.{alias}", problems)


@pytest.mark.parametrize(
    ("model", "file", "version", "scope"),
    [
        (Queue, "scheduling.run.ai_queues.yaml", "v2", "Cluster"),
        (PodGroup, "scheduling.run.ai_podgroups.yaml", "v2alpha2", "Namespaced"),
    ],
)
def test_every_model_field_is_declared(model: type[BaseModel], file: str, version: str, scope: str) -> None:
    crd = _crd(file)
    assert crd["spec"]["group"] == "scheduling.run.ai"
    assert crd["spec"]["scope"] == scope
    assert [v["name"] for v in crd["spec"]["versions"]] == [version]
    assert crd["spec"]["versions"][0]["subresources"] == {"status": {}}
    problems: list[str] = []
    _check_model(model, _schema(crd), "", problems)
    assert problems == []


def _walk(schema: dict[str, Any], path: str = "") -> typing.Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for key, sub in (schema.get("properties") or {}).items():
        yield from _walk(sub, f"{path}.{key}")
    if isinstance(schema.get("items"), dict):
        yield from _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _walk(schema["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("file", ["scheduling.run.ai_queues.yaml", "scheduling.run.ai_podgroups.yaml"])
def test_schema_is_structural_and_closed(file: str) -> None:
    """Every node has a type (or is int-or-string) and nothing keeps unknown fields, so the server prunes typos."""
    for path, node in _walk(_schema(_crd(file))):
        assert "x-kubernetes-preserve-unknown-fields" not in node, path
        assert node.get("type") or node.get("x-kubernetes-int-or-string"), f"{path} has no type"


def test_printer_columns_name_kai_fields() -> None:
    queue_cols = {
        c["name"]: c["jsonPath"]
        for c in _crd("scheduling.run.ai_queues.yaml")["spec"]["versions"][0]["additionalPrinterColumns"]
    }
    assert queue_cols["Parent"] == ".spec.parentQueue"
    assert queue_cols["GPU-Quota"] == ".spec.resources.gpu.quota"
    assert queue_cols["GPU-Allocated"].startswith(".status.allocated.")
    pg_cols = {
        c["name"]: c["jsonPath"]
        for c in _crd("scheduling.run.ai_podgroups.yaml")["spec"]["versions"][0]["additionalPrinterColumns"]
    }
    assert pg_cols["Queue"] == ".spec.queue"
    assert pg_cols["MinMember"] == ".spec.minMember"
    assert pg_cols["Pending-Reason"].startswith(".status.schedulingConditions")


def test_crd_dir_holds_only_our_two_crds() -> None:
    files = sorted(p.name for p in Path(our_crd_dir()).glob("*.yaml"))
    assert files == ["scheduling.run.ai_podgroups.yaml", "scheduling.run.ai_queues.yaml"]

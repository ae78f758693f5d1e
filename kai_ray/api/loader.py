"""Parsing manifests into API models: the one place that turns YAML/dicts into typed objects.

Errors are :class:`ManifestError` with one line naming the document and the field, so callers (CLI, operators,
simulator) can report them without a traceback.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

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
        return f"a YAML {yaml_kind(doc).removeprefix('a ')}, not a mapping"
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
        raise ManifestError(f"{where}: not a Kubernetes object (expected a mapping, got {yaml_kind(doc)})")
    key = (str(doc.get("apiVersion", "")), str(doc.get("kind", "")))
    model = KINDS.get(key)
    if model is None:
        raise ManifestError(f"{where} ({describe(doc)}): unsupported apiVersion/kind {key[0]!r}/{key[1]!r}")
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = field_path(tuple(err["loc"])) or "(root)"
        raise ManifestError(f"{where} ({describe(doc)}): {field}: {pydantic_message(err)}") from None


def yaml_kind(value: Any) -> str:
    """What a decoded YAML value is, in YAML's words (a mapping, a list), never a Python type name."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return "a value of another kind"


# pydantic error type -> what is wrong, as the house writes it ({value}: the value given, {kind}: its YAML kind)
_PLAIN = {
    "int_parsing": "{value} is not a whole number",
    "int_from_float": "{value} is not a whole number",
    "int_type": "{value} is not a whole number",
    "float_parsing": "{value} is not a number",
    "float_type": "{value} is not a number",
    "bool_parsing": "{value} is not true or false",
    "bool_type": "{value} is not true or false",
    "dict_type": "expected a mapping (key: value), got {kind}",
    "list_type": "expected a list, got {kind}",
    "string_type": "expected a string, got {kind}",
    "missing": "required",
    "model_type": "expected a mapping (key: value), got {kind}",
    "model_attributes_type": "expected a mapping (key: value), got {kind}",
    "literal_error": "{value} is not one of {expected}",
    "enum": "{value} is not one of {expected}",
    "greater_than_equal": "{value} must be >= {ge}",
    "greater_than": "{value} must be > {gt}",
    "less_than_equal": "{value} must be <= {le}",
    "less_than": "{value} must be < {lt}",
    "string_too_short": "must not be empty",
}


def pydantic_message(err: Any) -> str:
    """A pydantic error as the "what is wrong" of an error line, in the house's words: no "Value error, " prefix, no
    "Input should be a valid integer", no Python type names; the value given when the text does not say it."""
    value = err.get("input")
    shown = repr(value) if isinstance(value, str | int | float | bool) else yaml_kind(value)
    template = _PLAIN.get(err["type"])
    if template is not None:
        ctx = {k: str(v) for k, v in (err.get("ctx") or {}).items()}
        try:
            return template.format(value=shown, kind=yaml_kind(value), **ctx)
        except KeyError:
            pass  # a bound pydantic did not give: its own text below
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "value_error":
        return msg
    msg = msg.replace("Input should be ", "must be ")
    if isinstance(value, str | int | float | bool) and value is not None:
        msg = f"{value!r}: {msg}"
    return msg


def located(label: str, message: str, doc: Any = None) -> str:
    """``<label>: <message>``, where a message from the podgrouper that starts with the object's own ``<Kind> <name>:``
    (already in ``label``, as ``<file> document N (<Kind> <name>)``) loses that prefix, for one error layout."""
    if isinstance(doc, dict):
        message = message.removeprefix(f"{describe(doc)}: ").removeprefix(f"{doc.get('kind')}: ")
    return f"{label}: {message}"


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing duplicate mapping keys as Kubernetes' own decoders do (PyYAML keeps the last
    value, so ``queue: training`` then ``queue: serving`` would silently land in ``serving``). Keys brought in by a
    merge (``<<:``) may be overridden, as YAML allows."""

    _root: yaml.Node | None = None

    def construct_document(self, node: yaml.Node) -> Any:
        self._root = node
        return super().construct_document(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in seen:
                hint = ""
                if node is self._root and key in ("apiVersion", "kind"):
                    hint = "; two objects in one document: a '---' line between them is probably missing"
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on line {seen[key]}){hint}", key_node.start_mark
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),  # before UTF-16 LE, whose BOM it starts with
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def decode_text(data: bytes, source: str) -> str:
    """Manifest bytes as text: UTF-8, or any Unicode encoding its byte-order mark names (Windows PowerShell's ``>``
    writes UTF-16 with a BOM). Anything else is a ManifestError naming the file and the first bad byte, not a
    UnicodeDecodeError: YAML is Unicode, and guessing Latin-1 would read a binary file as garbage manifests."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return data[len(bom) :].decode(encoding)
            except UnicodeDecodeError as exc:
                raise ManifestError(
                    f"{source}: not valid {encoding.upper()} text (it starts with a {encoding.upper()} "
                    f"byte-order mark): {exc.reason} at byte {exc.start + len(bom)}"
                ) from None
    nul = data.find(b"\0", 0, 8192)
    if nul >= 0:
        raise ManifestError(
            f"{source}: a binary file, not YAML text (a NUL byte at byte {nul}; UTF-16 text needs a byte-order mark)"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        byte = data[exc.start : exc.start + 1].hex()
        raise ManifestError(
            f"{source}: line {line}: not UTF-8 text (byte 0x{byte} at byte {exc.start}); save the file as UTF-8"
        ) from None


MAX_BYTES = 64 * 2**20  # a manifest stream larger than this is refused unread (``/dev/zero`` would never end)
MAX_DEPTH = 100  # YAML nesting deeper than this is refused (Kubernetes objects nest about 20 deep)


def read_bytes(stream: BinaryIO, source: str) -> bytes:
    """At most :data:`MAX_BYTES` of a file or stdin; more is a ManifestError, not an endless read."""
    data = stream.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ManifestError(f"{source}: larger than {MAX_BYTES // 2**20} MiB; not read (split the manifests)")
    return data


def read_text(path: str | Path) -> str:
    """A manifest or scenario file as text (see :func:`decode_text`); ``OSError`` is left to the caller."""
    with open(path, "rb") as fh:
        return decode_text(read_bytes(fh, str(path)), str(path))


def _depth(doc: Any) -> int:
    """How deep a decoded document nests (iteratively: a recursive walk is what the bound protects against)."""
    deepest, todo = 0, [(doc, 1)]
    while todo:
        node, level = todo.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, level)
            if level <= MAX_DEPTH:
                todo.extend((child, level + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def _is_list(doc: Any) -> bool:
    """``kind: List`` or a typed list (``PodList``, ``RayJobList``): what ``kubectl get -o yaml`` writes."""
    return (
        isinstance(doc, dict)
        and isinstance(doc.get("kind"), str)
        and doc["kind"].endswith("List")
        and isinstance(doc.get("items"), list)
    )


def load_documents(text: str, source: str = "<input>") -> Iterator[tuple[str, Any]]:
    """Yield (label, document) for each non-empty YAML document, the items of a ``List`` each as a document of their
    own; YAML syntax errors, duplicate keys and nesting deeper than :data:`MAX_DEPTH` become ManifestError naming the
    line or document."""
    try:
        docs = list(yaml.load_all(text, Loader=_Loader))
    except RecursionError:
        raise ManifestError(f"{source}: YAML nested deeper than Python can read; not a Kubernetes manifest") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}:" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if isinstance(exc, yaml.constructor.ConstructorError) and problem.startswith("duplicate key"):
            raise ManifestError(f"{source}:{where} {problem}") from None
        raise ManifestError(f"{source}:{where} invalid YAML: {problem}") from None
    for i, doc in enumerate(docs):
        if doc is None:
            continue
        where = f"{source} document {i + 1}"
        if _depth(doc) > MAX_DEPTH:
            raise ManifestError(f"{where}: nested more than {MAX_DEPTH} levels deep; not a Kubernetes manifest")
        if _is_list(doc):
            for j, item in enumerate(doc["items"]):
                yield f"{where} ({doc['kind']}) item {j + 1}", item
            continue
        yield where, doc

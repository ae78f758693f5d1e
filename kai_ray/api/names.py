"""Names a Ray CR passes to the scheduler as plain strings: label and annotation keys under ``kai.scheduler/`` and
the priority class. A typo in either is legal YAML and legal Kubernetes, so nothing refuses it: the gang silently
lands in the default queue or at the default priority. These checks say so, with the name most likely meant.

A key is suspicious when it is close to one KAI or kai-ray reads (``kai.schedular/queue``, ``kai.scheduler/queu``)
or sits under ``kai.scheduler/`` without being one of them. A priority class is checked against the classes known
to the caller: all of them in a simulator scenario (its world has no others), only a close miss from the command
line (a cluster may define classes kai-ray cannot see).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from kai_ray import constants as c
from kai_ray.api.errors import FieldError
from kai_ray.api.strict import did_you_mean, pod_templates

KAI_PREFIX = "kai.scheduler/"
# every kai.scheduler/ key KAI v0.10 or kai-ray reads or writes on an object, its pods or its PodGroup
KNOWN_KEYS = frozenset(
    {
        *(v for k, v in vars(c).items() if k.isupper() and isinstance(v, str) and v.startswith(KAI_PREFIX)),
        f"{KAI_PREFIX}eviction-strategy",
        f"{KAI_PREFIX}segment-size",
        f"{KAI_PREFIX}segment-topology-preferred-placement",
        f"{KAI_PREFIX}segment-topology-required-placement",
        c.PRIORITY_LABEL,
        c.RAY_PRIORITY_LABEL,
    }
)
BUILT_IN_CLASSES = ("system-cluster-critical", "system-node-critical")  # Kubernetes' own PriorityClasses


def key_problem(key: str) -> str | None:
    """Why a label or annotation key looks like a typo of one KAI reads; None when it does not."""
    if key in KNOWN_KEYS:
        return None
    if key.startswith(KAI_PREFIX):  # the shared prefix would make every key "close": compare what follows it
        suffixes = {k.removeprefix(KAI_PREFIX) for k in KNOWN_KEYS if k.startswith(KAI_PREFIX)}
        close = did_you_mean(key.removeprefix(KAI_PREFIX), suffixes)
        hint = KAI_PREFIX + close if close else None
    else:
        hint = did_you_mean(key, KNOWN_KEYS)
        if hint is None:
            return None
    what = "not a key KAI or kai-ray reads"
    return f"{what} (did you mean {hint}?)" if hint else what


def _metas(doc: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """(path, metadata) of the object and of each of its pod templates."""
    yield "metadata", doc.get("metadata")
    for path, template in pod_templates(doc, str(doc.get("kind", ""))):
        if isinstance(template, Mapping):
            yield f"{path}.metadata", template.get("metadata")


def key_problems(doc: Any) -> list[FieldError]:
    """Mistyped ``kai.scheduler/`` keys in the labels and annotations of a Ray CR and its pod templates."""
    if not isinstance(doc, Mapping):
        return []
    out = []
    for path, meta in _metas(doc):
        if not isinstance(meta, Mapping):
            continue
        for part in ("labels", "annotations"):
            values = meta.get(part)
            for key in values if isinstance(values, Mapping) else ():
                problem = key_problem(str(key))
                if problem:
                    out.append(FieldError(f"{path}.{part}[{key}]", problem))
    return out


def _priority_fields(doc: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """(path, value) of every place the podgrouper reads a priority class from."""
    meta = doc.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    for key in (c.RAY_PRIORITY_LABEL, c.PRIORITY_LABEL):
        if isinstance(labels, Mapping) and key in labels:
            yield f"metadata.labels[{key}]", labels[key]
    for path, template in pod_templates(doc, str(doc.get("kind", ""))):
        spec = template.get("spec") if isinstance(template, Mapping) else None
        if isinstance(spec, Mapping) and "priorityClassName" in spec:
            yield f"{path}.spec.priorityClassName", spec["priorityClassName"]


def priority_problems(doc: Any, known: Mapping[str, int], every: bool) -> list[FieldError]:
    """Priority classes the scheduler will not find: KAI then gives the gang the default priority
    (:data:`~kai_ray.constants.DEFAULT_PRIORITY_VALUE`). With ``every``, ``known`` is every class there is; else only
    a close miss of one of them is reported."""
    if not isinstance(doc, Mapping):
        return []
    out = []
    for path, name in _priority_fields(doc):
        if not isinstance(name, str) or not name or name in known or name in BUILT_IN_CLASSES:
            continue
        hint = did_you_mean(name, set(known))
        if hint is None and not every:
            continue
        listed = ", ".join(sorted(known, key=lambda k: known[k]))
        tail = f"did you mean {hint}?" if hint else f"known: {listed}"
        out.append(
            FieldError(
                path,
                f"{name!r} is not a PriorityClass ({tail}); the gang would get the default priority "
                f"{c.DEFAULT_PRIORITY_VALUE}",
            )
        )
    return out

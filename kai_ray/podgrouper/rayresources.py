"""The Ray resources a group's pods advertise beyond CPU, GPU and memory: ``TPU``, ``neuron_cores`` and the custom
names of ``rayStartParams.resources``, as KubeRay writes them into each pod's ``ray start`` command.

Why the podgrouper reads them: Ray schedules tasks and actors on these names, Kubernetes (and so kai-ray) on the
container's resources. The two views must agree for a gang to be useful once placed: a worker group that tells Ray
it has ``{"TPU": 4}`` but asks Kubernetes for no ``google.com/tpu`` lands on a node without TPUs and its TPU tasks
wait forever. KubeRay's rules (1.6): a group's ``resources`` field replaces the custom names of
``rayStartParams.resources``; then the Ray container's (the first container's) ``google.com/tpu`` or
``aws.amazon.com/neuroncore`` limit adds ``TPU`` or ``neuron_cores`` unless one of the two is already named.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from kai_ray.api.meta import PodTemplateSpec
from kai_ray.api.quantity import QuantityError, parse_quantity

# container resource -> the Ray resource KubeRay advertises for it (KubeRay's customAcceleratorToRayResourceMap)
ACCELERATORS = {"aws.amazon.com/neuroncore": "neuron_cores", "google.com/tpu": "TPU"}
_BUILT_IN = {"cpu", "memory"}


class RayResourceError(ValueError):
    """Ray resources that ``ray start`` cannot read: ``field`` is the group's field, the message what is wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _gpu_name(name: str) -> bool:
    """KubeRay's IsGPUResourceKey: any ``*gpu`` resource becomes Ray's GPU count, never a custom resource."""
    return name.lower().endswith("gpu")


def _shell_word(raw: str) -> list[str]:
    """The one shell word ``raw`` makes, unquoted; [] when it makes none or several."""
    try:
        words = shlex.split(raw)
    except ValueError:
        return []
    return words if len(words) == 1 else []


def declared(start_params: Mapping[str, Any] | None) -> dict[str, float]:
    """``rayStartParams.resources`` as ``ray start`` reads it: a JSON object of numbers, bare or shell-quoted
    (KubeRay pastes the value into a shell command line: ``'"{\\"TPU\\": 4}"'`` is Ray's documented spelling)."""
    raw = (start_params or {}).get("resources")
    if raw is None:
        return {}
    value: Any = raw
    if isinstance(raw, str):
        value = None
        for text in (raw.strip("'\"` "), *_shell_word(raw)):
            try:
                value = json.loads(text)
                break
            except ValueError:
                continue
    if not isinstance(value, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in value.values()
    ):
        example = "'{\"TPU\": 4}'"
        raise RayResourceError("rayStartParams.resources", f"{raw!r} is not a JSON object of amounts, e.g. {example}")
    return {str(k): float(v) for k, v in value.items()}


def _group_field(group_resources: Mapping[str, Any] | None) -> dict[str, float]:
    """The group's ``resources`` field minus what becomes num-cpus, memory and num-gpus."""
    out: dict[str, float] = {}
    for name, amount in (group_resources or {}).items():
        if str(name).lower() in _BUILT_IN or _gpu_name(str(name)):
            continue
        try:
            out[str(name)] = parse_quantity(amount)
        except QuantityError as exc:
            raise RayResourceError(f"resources[{name}]", str(exc)) from None
    return out


def container_limits(template: PodTemplateSpec) -> dict[str, float]:
    """The Ray container's limits (KubeRay's Ray container is the first), as numbers; unparseable ones left out."""
    if not template.spec.containers or template.spec.containers[0].resources is None:
        return {}
    out: dict[str, float] = {}
    for name, value in (template.spec.containers[0].resources.limits or {}).items():
        try:
            out[name] = parse_quantity(value)
        except QuantityError:
            continue
    return out


def ray_resources(
    start_params: Mapping[str, Any] | None,
    template: PodTemplateSpec,
    group_resources: Mapping[str, Any] | None = None,
) -> dict[str, float]:
    """The custom Ray resources one pod of the group advertises (KubeRay's mapping, see the module docstring)."""
    field = _group_field(group_resources)
    found = field or declared(start_params)  # KubeRay replaces rayStartParams.resources only with a custom name
    if not any(name in found for name in ACCELERATORS.values()):
        limits = container_limits(template)
        for resource in sorted(limits):
            ray_name = ACCELERATORS.get(resource)
            if ray_name is not None and limits[resource]:
                found[ray_name] = limits[resource]
                break
    return found


def accelerator_mismatches(resources: Mapping[str, float], template: PodTemplateSpec) -> list[tuple[str, str]]:
    """(Ray resource, problem) for each accelerator Ray is told about that the Ray container does not get from
    Kubernetes (or gets fewer of): the gang is placed by its limits, so Ray's tasks for the rest would never run."""
    limits = container_limits(template)
    out = []
    for resource, ray_name in sorted(ACCELERATORS.items()):
        told = resources.get(ray_name)
        have = limits.get(resource, 0.0)
        if told and told > have:
            got = f"a {resource} limit of {have:g}" if have else f"no {resource} limit"
            beyond = f" beyond {have:g}" if have else ""
            out.append(
                (
                    ray_name,
                    f"Ray is told {ray_name} {told:g} but the Ray container has {got}; kai-ray places the pod by its "
                    f"limits, so Ray's {ray_name} tasks{beyond} would never run (set limits[{resource}])",
                )
            )
    return out

"""Strict reading of user manifests: unknown fields (with a "did you mean") and unparsable quantities, by path.

Why a second look after the models: the models keep every field they do not know (``extra="allow"``) so that a round
trip never loses someone's data; that same leniency would let a typo'd ``workerGroupSpec`` or ``minReplica`` pass
silently. The field names below are KubeRay v1.6.1's (plus ``NEWER_KUBERAY``) and KAI's CRD schemas (a test checks
them against the CRDs), for the parts of a Ray CR or Queue that kai-ray reads or that change what runs: the specs,
the pod template, containers and their resources. Deeper parts (volumes, probes, affinity) are the API server's.

An unknown field is a warning (the object is still used, the field ignored); an unparsable quantity is an error,
since a pod's size cannot be guessed. On a real cluster the API server prunes unknown fields before any controller
sees them; kubectl's ``last-applied-configuration`` annotation still holds what the user wrote, so the operators
check it too.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic.alias_generators import to_camel

from kai_ray.api.errors import FieldError
from kai_ray.api.quantity import QuantityError, parse_quantity
from kai_ray.api.ray import RAY_API_VERSIONS
from kai_ray.constants import GPU_FRACTION, GPU_RESOURCE

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

_OBJECT = {"apiVersion", "kind", "metadata", "spec", "status"}
_OBJECT_META = {
    "annotations",
    "creationTimestamp",
    "deletionGracePeriodSeconds",
    "deletionTimestamp",
    "finalizers",
    "generateName",
    "generation",
    "labels",
    "managedFields",
    "name",
    "namespace",
    "ownerReferences",
    "resourceVersion",
    "selfLink",
    "uid",
}

# type -> (known field names, {field: child type}); a child type ending in "[]" is a list of that type
SCHEMA: dict[str, tuple[frozenset[str], dict[str, str]]] = {
    "RayCluster": (frozenset(_OBJECT), {"metadata": "ObjectMeta", "spec": "RayClusterSpec"}),
    "RayJob": (frozenset(_OBJECT), {"metadata": "ObjectMeta", "spec": "RayJobSpec"}),
    "RayService": (frozenset(_OBJECT), {"metadata": "ObjectMeta", "spec": "RayServiceSpec"}),
    "Queue": (frozenset(_OBJECT), {"metadata": "ObjectMeta", "spec": "QueueSpec"}),
    "ObjectMeta": (frozenset(_OBJECT_META), {}),
    "RayClusterSpec": (
        frozenset(
            {
                "authOptions",
                "autoscalerOptions",
                "enableInTreeAutoscaling",
                "gcsFaultToleranceOptions",
                "headGroupSpec",
                "headServiceAnnotations",
                "managedBy",
                "rayVersion",
                "suspend",
                "upgradeStrategy",
                "workerGroupSpecs",
            }
        ),
        {
            "headGroupSpec": "HeadGroupSpec",
            "workerGroupSpecs": "WorkerGroupSpec[]",
            "autoscalerOptions": "AutoscalerOptions",
        },
    ),
    "HeadGroupSpec": (
        frozenset({"enableIngress", "headService", "labels", "rayStartParams", "resources", "serviceType", "template"}),
        {"template": "PodTemplateSpec"},
    ),
    "WorkerGroupSpec": (
        frozenset(
            {
                "groupName",
                "idleTimeoutSeconds",
                "labels",
                "maxReplicas",
                "minReplicas",
                "numOfHosts",
                "rayStartParams",
                "replicas",
                "resources",
                "scaleStrategy",
                "suspend",
                "template",
            }
        ),
        {"template": "PodTemplateSpec", "scaleStrategy": "ScaleStrategy"},
    ),
    "ScaleStrategy": (frozenset({"workersToDelete"}), {}),
    "AutoscalerOptions": (
        frozenset(
            {
                "args",  # KubeRay >= 1.7 (as NEWER_KUBERAY says)
                "command",  # KubeRay >= 1.7
                "env",
                "envFrom",
                "idleTimeoutSeconds",
                "image",
                "imagePullPolicy",
                "resources",
                "securityContext",
                "upscalingMode",
                "version",
                "volumeMounts",
            }
        ),
        {"resources": "ResourceRequirements"},
    ),
    "RayJobSpec": (
        frozenset(
            {
                "activeDeadlineSeconds",
                "backoffLimit",
                "clusterSelector",
                "deletionStrategy",
                "entrypoint",
                "entrypointNumCpus",
                "entrypointNumGpus",
                "entrypointResources",
                "jobId",
                "managedBy",
                "metadata",
                "preRunningDeadlineSeconds",
                "rayClusterSpec",
                "runtimeEnvYAML",
                "shutdownAfterJobFinishes",
                "submissionMode",
                "submitterConfig",
                "submitterPodTemplate",
                "suspend",
                "ttlSecondsAfterFinished",
            }
        ),
        {"rayClusterSpec": "RayClusterSpec", "submitterPodTemplate": "PodTemplateSpec"},
    ),
    "RayServiceSpec": (
        frozenset(
            {
                "deploymentUnhealthySecondThreshold",
                "excludeHeadPodFromServeSvc",
                "managedBy",
                "rayClusterConfig",
                "rayClusterDeletionDelaySeconds",
                "serveConfigV2",
                "serveService",
                "serviceUnhealthySecondThreshold",
                "upgradeStrategy",
            }
        ),
        {"rayClusterConfig": "RayClusterSpec"},
    ),
    "PodTemplateSpec": (frozenset({"metadata", "spec"}), {"metadata": "TemplateMeta", "spec": "PodSpec"}),
    "TemplateMeta": (frozenset({"annotations", "finalizers", "labels", "name", "namespace"}), {}),
    "PodSpec": (
        frozenset(
            {
                "activeDeadlineSeconds",
                "affinity",
                "automountServiceAccountToken",
                "containers",
                "dnsConfig",
                "dnsPolicy",
                "enableServiceLinks",
                "ephemeralContainers",
                "hostAliases",
                "hostIPC",
                "hostNetwork",
                "hostPID",
                "hostUsers",
                "hostname",
                "hostnameOverride",
                "imagePullSecrets",
                "initContainers",
                "nodeName",
                "nodeSelector",
                "os",
                "overhead",
                "preemptionPolicy",
                "priority",
                "priorityClassName",
                "readinessGates",
                "resourceClaims",
                "resources",
                "restartPolicy",
                "runtimeClassName",
                "schedulerName",
                "schedulingGates",
                "securityContext",
                "serviceAccount",
                "serviceAccountName",
                "setHostnameAsFQDN",
                "shareProcessNamespace",
                "subdomain",
                "terminationGracePeriodSeconds",
                "tolerations",
                "topologySpreadConstraints",
                "volumes",
                "workloadRef",
            }
        ),
        {"containers": "Container[]", "initContainers": "Container[]", "resources": "ResourceRequirements"},
    ),
    "Container": (
        frozenset(
            {
                "args",
                "command",
                "env",
                "envFrom",
                "image",
                "imagePullPolicy",
                "lifecycle",
                "livenessProbe",
                "name",
                "ports",
                "readinessProbe",
                "resizePolicy",
                "resources",
                "restartPolicy",
                "restartPolicyRules",
                "securityContext",
                "startupProbe",
                "stdin",
                "stdinOnce",
                "terminationMessagePath",
                "terminationMessagePolicy",
                "tty",
                "volumeDevices",
                "volumeMounts",
                "workingDir",
            }
        ),
        {"resources": "ResourceRequirements"},
    ),
    "ResourceRequirements": (frozenset({"claims", "limits", "requests"}), {}),
    "QueueSpec": (
        frozenset({"displayName", "parentQueue", "preemptMinRuntime", "priority", "reclaimMinRuntime", "resources"}),
        {"resources": "QueueResources"},
    ),
    "QueueResources": (
        frozenset({"cpu", "gpu", "memory"}),
        {"cpu": "QueueResource", "gpu": "QueueResource", "memory": "QueueResource"},
    ),
    "QueueResource": (frozenset({"limit", "overQuotaWeight", "quota"}), {}),
}
CHECKED_KINDS = ("RayCluster", "RayJob", "RayService", "Queue")
NEWER_KUBERAY = {"AutoscalerOptions": {"command", "args"}}  # known fields newer than the pinned KubeRay CRDs


@dataclass(frozen=True)
class UnknownField:
    field: str  # dotted path, e.g. "spec.workerGroupSpec"
    suggestion: str | None  # the known field it most likely meant

    def __str__(self) -> str:
        hint = f" (did you mean {self.suggestion}?)" if self.suggestion else ""
        return f"unknown field {self.field}{hint}"

    def located(self) -> str:
        """``<field>: unknown field (did you mean ...?)``: the error layout of the command line."""
        hint = f" (did you mean {self.suggestion}?)" if self.suggestion else ""
        return f"{self.field}: unknown field{hint}"


def did_you_mean(name: str, known: frozenset[str] | set[str]) -> str | None:
    """The known field a typo most likely meant: same letters in another case, snake_case for camelCase, or close."""
    lowered = {k.lower(): k for k in known}
    for candidate in (name.lower(), to_camel(name).lower(), name.replace("-", "").lower()):
        if candidate in lowered:
            return lowered[candidate]
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
    if close:
        return close[0]
    close = difflib.get_close_matches(name.lower(), sorted(lowered), n=1, cutoff=0.75)
    return lowered[close[0]] if close else None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _walk(doc: Any, typ: str, path: str, out: list[UnknownField]) -> None:
    if not isinstance(doc, dict):
        return
    known, children = SCHEMA[typ]
    for key, value in doc.items():
        key = str(key)
        if key not in known:
            out.append(UnknownField(_join(path, key), did_you_mean(key, known)))
            continue
        child = children.get(key)
        if child is None:
            continue
        if child.endswith("[]"):
            if isinstance(value, list):
                for i, item in enumerate(value):
                    _walk(item, child[:-2], f"{_join(path, key)}[{i}]", out)
        else:
            _walk(value, child, _join(path, key), out)


def unknown_fields(doc: Any, kind: str | None = None) -> list[UnknownField]:
    """Unknown fields of a Ray CR or Queue manifest (``kind`` defaults to the document's own); [] for other kinds."""
    kind = kind or (str(doc.get("kind", "")) if isinstance(doc, dict) else "")
    if kind not in CHECKED_KINDS:
        return []
    out: list[UnknownField] = []
    _walk(doc, kind, "", out)
    return out


def last_applied_unknown_fields(obj: dict[str, Any], kind: str | None = None) -> list[UnknownField]:
    """Unknown fields in what ``kubectl apply`` was given (the API server prunes them from the object itself)."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    text = ((meta or {}).get("annotations") or {}).get(LAST_APPLIED)
    if not text:
        return []
    try:
        applied = json.loads(text)
    except ValueError:
        return []
    return unknown_fields(applied, kind or str(obj.get("kind", "")))


def object_unknown_fields(obj: dict[str, Any], kind: str | None = None) -> list[UnknownField]:
    """Unknown fields of a live object: its own, plus those kubectl's last-applied annotation remembers."""
    seen: dict[str, UnknownField] = {}
    for f in [*unknown_fields(obj, kind), *last_applied_unknown_fields(obj, kind)]:
        seen.setdefault(f.field, f)
    return list(seen.values())


def pod_templates(doc: Mapping[str, Any], kind: str) -> list[tuple[str, Any]]:
    """(path, pod template as decoded) of each pod a Ray CR makes: the head, each worker group, a submitter."""
    raw_spec = doc.get("spec")
    spec: dict[str, Any] = raw_spec if isinstance(raw_spec, dict) else {}
    cluster: Any
    cluster_path, cluster = "spec", spec
    out: list[tuple[str, Any]] = []
    if kind == "RayJob":
        cluster_path, cluster = "spec.rayClusterSpec", spec.get("rayClusterSpec")
        out.append(("spec.submitterPodTemplate", spec.get("submitterPodTemplate")))
    elif kind == "RayService":
        cluster_path, cluster = "spec.rayClusterConfig", spec.get("rayClusterConfig")
    if isinstance(cluster, dict):
        head = cluster.get("headGroupSpec")
        if isinstance(head, dict):
            out.append((f"{cluster_path}.headGroupSpec.template", head.get("template")))
        for i, wg in enumerate(cluster.get("workerGroupSpecs") or []):
            if isinstance(wg, dict):
                out.append((f"{cluster_path}.workerGroupSpecs[{i}].template", wg.get("template")))
    return out


def _is_extended(name: str) -> bool:
    """Kubernetes' extended resources (``nvidia.com/gpu``): a domain outside kubernetes.io, counted in whole units."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def container_resource_problems(requests: Any, limits: Any, where: str) -> list[FieldError]:
    """What Kubernetes would refuse in one container's ``resources`` (``where`` is its path): a value that is not a
    quantity, a negative one, a fractional extended resource, a request above its limit, and an extended resource
    whose request is not its limit. A Ray CR is a template: the API server does not check it, KubeRay's pods would
    be refused one by one, so kai-ray refuses the CR, naming the field, before any scheduling is done."""
    errors: list[FieldError] = []
    parsed: dict[str, dict[str, float]] = {"requests": {}, "limits": {}}
    for part, values in (("requests", requests), ("limits", limits)):
        for name, value in values.items() if isinstance(values, Mapping) else ():
            field = f"{where}.{part}[{name}]"
            try:
                number = parse_quantity(value)
            except QuantityError:
                errors.append(FieldError(field, f"{value!r} is not a quantity (e.g. 8, 500m, 16Gi)"))
                continue
            if not math.isfinite(number):
                errors.append(FieldError(field, f"{value!r} is not a finite quantity"))
            elif number < 0:
                errors.append(FieldError(field, f"{value!r} is negative; requests and limits must be >= 0"))
            elif _is_extended(str(name)) and number != int(number):
                hint = f" (for part of a GPU, use the {GPU_FRACTION} annotation)" if name == GPU_RESOURCE else ""
                errors.append(
                    FieldError(field, f"{value!r} is not a whole number; {name} is counted in whole devices{hint}")
                )
            else:
                parsed[part][str(name)] = number
    for name, request in parsed["requests"].items():
        limit = parsed["limits"].get(name)
        if limit is None:
            if _is_extended(name) and name not in (limits if isinstance(limits, Mapping) else {}):
                errors.append(
                    FieldError(
                        f"{where}.requests[{name}]",
                        f"{requests[name]!r} without a limit; Kubernetes requires an extended resource's limit "
                        f"(set limits[{name}] to the same value)",
                    )
                )
            continue
        raw_request, raw_limit = requests[name], limits[name]
        if request > limit:
            errors.append(FieldError(f"{where}.requests[{name}]", f"{raw_request!r} is above the limit {raw_limit!r}"))
        elif request != limit and _is_extended(name):
            errors.append(
                FieldError(
                    f"{where}.requests[{name}]",
                    f"{raw_request!r} is not the limit {raw_limit!r}; an extended resource's request must equal its "
                    "limit",
                )
            )
    return errors


def fraction_problem(annotations: Any, where: str) -> FieldError | None:
    """A ``gpu-fraction`` annotation outside (0, 1] (``where`` is the path of the annotations)."""
    raw = annotations.get(GPU_FRACTION) if isinstance(annotations, Mapping) else None
    if raw is None:
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = math.nan
    if 0.0 < value <= 1.0:
        return None
    return FieldError(f"{where}[{GPU_FRACTION}]", f"{raw!r} is not in (0, 1] (a share of one GPU)")


def template_problems(template: Any, path: str) -> list[FieldError]:
    """:func:`container_resource_problems` and :func:`fraction_problem` for one pod template as decoded YAML."""
    if not isinstance(template, dict):
        return []
    meta = template.get("metadata")
    fraction = fraction_problem(
        meta.get("annotations") if isinstance(meta, dict) else None, f"{path}.metadata.annotations"
    )
    errors = [fraction] if fraction else []
    pod = template.get("spec")
    if not isinstance(pod, dict):
        return errors
    for list_name in ("containers", "initContainers"):
        containers = pod.get(list_name)
        for i, ctr in enumerate(containers if isinstance(containers, list) else []):
            resources = ctr.get("resources") if isinstance(ctr, dict) else None
            if isinstance(resources, dict):
                where = f"{path}.spec.{list_name}[{i}].resources"
                errors += container_resource_problems(resources.get("requests"), resources.get("limits"), where)
    return errors


def invalid_quantities(doc: Any, kind: str | None = None) -> list[FieldError]:
    """Resource requests and limits in a Ray CR's pod templates that Kubernetes would refuse (see
    :func:`container_resource_problems`), and ``gpu-fraction`` annotations outside (0, 1]."""
    if not isinstance(doc, dict):
        return []
    kind = kind or str(doc.get("kind", ""))
    errors: list[FieldError] = []
    for path, template in pod_templates(doc, kind):
        errors += template_problems(template, path)
    return errors


DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
REPLICA_FIELDS = ("replicas", "minReplicas", "maxReplicas", "numOfHosts")


def _cluster_spec(doc: dict[str, Any], kind: str) -> tuple[str, Any]:
    raw = doc.get("spec")
    spec: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if kind == "RayJob":
        return "spec.rayClusterSpec", spec.get("rayClusterSpec")
    if kind == "RayService":
        return "spec.rayClusterConfig", spec.get("rayClusterConfig")
    return "spec", spec


def _looks_like_groups(value: Any) -> bool:
    return isinstance(value, list) and any(isinstance(v, dict) and ("groupName" in v or "template" in v) for v in value)


def lost_worker_groups(cluster: Any, path: str) -> list[FieldError]:
    """A cluster spec whose worker groups all sit under an unknown key (``workerGroupSpec``, ``workers: [...]``).
    Any other unknown field is a warning; this one is an error even without ``--strict``: the cluster would start
    with its head alone, the gang would be one pod, and the job would wait for workers that never come."""
    if not isinstance(cluster, dict) or cluster.get("workerGroupSpecs"):
        return []
    known = SCHEMA["RayClusterSpec"][0]
    return [
        FieldError(
            f"{path}.{key}",
            "unknown field (did you mean workerGroupSpecs?); without workerGroupSpecs the cluster is its head alone",
        )
        for key, value in cluster.items()
        if str(key) not in known and (did_you_mean(str(key), {"workerGroupSpecs"}) or _looks_like_groups(value))
    ]


def refused_fields(doc: Any, kind: str | None = None) -> list[FieldError]:
    """What the API server (the object's name) or KubeRay's CRD schema would refuse in a Ray CR, beyond its
    resources (:func:`invalid_quantities`): a name that is not a DNS-1123 subdomain of at most 253 characters, a
    worker group without a ``groupName``, a replica count that is not a whole number (``replicas: true``)."""
    if not isinstance(doc, dict):
        return []
    kind = kind or str(doc.get("kind", ""))
    errors = invalid_quantities(doc, kind)
    raw_meta = doc.get("metadata")
    name = raw_meta.get("name") if isinstance(raw_meta, dict) else None
    if isinstance(name, str) and (len(name) > 253 or not DNS1123_SUBDOMAIN.match(name)):
        shown = name if len(name) <= 40 else f"{name[:37]}..."
        errors.append(
            FieldError(
                "metadata.name",
                f"{shown!r} is not a valid name: lower-case letters, digits, '-' and '.', starting and ending with a "
                "letter or digit, at most 253 characters",
            )
        )
    api_version = doc.get("apiVersion")
    if isinstance(api_version, str) and api_version.startswith("ray.io/") and api_version not in RAY_API_VERSIONS:
        errors.insert(0, FieldError("apiVersion", f"{api_version!r} is not a KubeRay API version (ray.io/v1)"))
    path, cluster = _cluster_spec(doc, kind)
    errors += lost_worker_groups(cluster, path)
    groups = cluster.get("workerGroupSpecs") if isinstance(cluster, dict) else None
    for i, wg in enumerate(groups if isinstance(groups, list) else []):
        if not isinstance(wg, dict):
            continue
        where = f"{path}.workerGroupSpecs[{i}]"
        if not wg.get("groupName"):
            errors.append(FieldError(f"{where}.groupName", "missing; KubeRay requires every worker group to name it"))
        for key in REPLICA_FIELDS:
            value = wg.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                errors.append(FieldError(f"{where}.{key}", f"{json.dumps(value)} is not a whole number"))
    return errors

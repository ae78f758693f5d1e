"""Unknown fields with a "did you mean", bad quantities by path, and the field lists checked against the real CRDs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray.api.strict import (
    LAST_APPLIED,
    NEWER_KUBERAY,
    SCHEMA,
    invalid_quantities,
    object_unknown_fields,
    unknown_fields,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _raycluster(**worker: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "rc"},
        "spec": {
            "headGroupSpec": {"template": {"spec": {"containers": [{"name": "head"}]}}},
            "workerGroupSpecs": [
                {
                    "groupName": "gpu",
                    "replicas": 2,
                    "template": {"spec": {"containers": [{"name": "w", "resources": {"limits": {"cpu": "1"}}}]}},
                    **worker,
                }
            ],
        },
    }


def test_typos_are_named_with_the_field_they_meant() -> None:
    doc = _raycluster(minReplica=1)
    doc["spec"]["workerGroupSpec"] = doc["spec"].pop("workerGroupSpecs")
    found = [str(f) for f in unknown_fields(doc)]
    assert found == ["unknown field spec.workerGroupSpec (did you mean workerGroupSpecs?)"]

    doc = _raycluster(minReplica=1, max_replicas=3)
    doc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]["limit"] = {"cpu": 1}
    assert [str(f) for f in unknown_fields(doc)] == [
        "unknown field spec.workerGroupSpecs[0].template.spec.containers[0].resources.limit (did you mean limits?)",
        "unknown field spec.workerGroupSpecs[0].minReplica (did you mean minReplicas?)",
        "unknown field spec.workerGroupSpecs[0].max_replicas (did you mean maxReplicas?)",
    ]


def test_a_field_with_no_near_name_is_still_reported() -> None:
    doc = _raycluster(colour="blue")
    assert [str(f) for f in unknown_fields(doc)] == ["unknown field spec.workerGroupSpecs[0].colour"]


def test_queue_typos_and_what_kubectl_remembers() -> None:
    queue = {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": "q"},
        "spec": {"parentQueue": "p", "resources": {"gpu": {"quota": 1, "overQuotaWieght": 2}}},
    }
    assert [str(f) for f in unknown_fields(queue)] == [
        "unknown field spec.resources.gpu.overQuotaWieght (did you mean overQuotaWeight?)"
    ]
    # what the API server stored (pruned) still has the typo in kubectl's annotation
    stored = {"kind": "Queue", "metadata": {"name": "q", "annotations": {LAST_APPLIED: json.dumps(queue)}}}
    assert [f.field for f in object_unknown_fields(stored)] == ["spec.resources.gpu.overQuotaWieght"]


def test_other_kinds_and_the_projects_examples_are_clean() -> None:
    assert unknown_fields({"apiVersion": "v1", "kind": "Role", "rules": []}) == []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                assert unknown_fields(doc) == [], path.name
                assert invalid_quantities(doc) == [], path.name


def test_bad_quantities_name_the_field() -> None:
    doc = _raycluster()
    doc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]["limits"] = {
        "nvidia.com/gpu": "eight"
    }
    errors = [str(e) for e in invalid_quantities(doc)]
    assert errors == [
        "spec.workerGroupSpecs[0].template.spec.containers[0].resources.limits[nvidia.com/gpu]: "
        "'eight' is not a quantity (e.g. 8, 500m, 16Gi)"
    ]
    job = {"kind": "RayJob", "spec": {"rayClusterSpec": doc["spec"]}}
    assert invalid_quantities(job)[0].field.startswith("spec.rayClusterSpec.workerGroupSpecs[0]")


def _crd_properties(path: Path) -> dict[str, Any]:
    crd = yaml.load(path.read_text(), Loader=yaml.CSafeLoader)  # 17k-line CRDs: the C loader, 10x faster
    version = next(v for v in crd["spec"]["versions"] if v["name"] in ("v1", "v2"))
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def _at(schema: dict[str, Any], *path: str) -> set[str]:
    node = schema
    for part in path:
        node = node["items"] if part == "[]" else node["properties"][part]
    return set(node.get("properties") or {})


def test_field_lists_match_kuberay_and_kai_crds() -> None:
    """The lists are KubeRay's pinned CRDs (from the Go module cache the tests build KubeRay from) and ours."""
    pytest.importorskip("kai_ray.testing.controlplane.harness")
    from kai_ray.testing.controlplane.harness import ControlPlaneError, kuberay_crd_files, our_crd_dir

    try:
        files = {p.name: p for p in kuberay_crd_files()}
    except (ControlPlaneError, OSError) as exc:
        pytest.skip(f"KubeRay CRDs not in the Go module cache: {exc}")
    rc = _crd_properties(files["ray.io_rayclusters.yaml"])
    known = {name: set(fields) - NEWER_KUBERAY.get(name, set()) for name, (fields, _) in SCHEMA.items()}
    assert known["RayClusterSpec"] == _at(rc, "spec")
    assert known["HeadGroupSpec"] == _at(rc, "spec", "headGroupSpec")
    assert known["WorkerGroupSpec"] == _at(rc, "spec", "workerGroupSpecs", "[]")
    assert known["ScaleStrategy"] == _at(rc, "spec", "workerGroupSpecs", "[]", "scaleStrategy")
    assert known["AutoscalerOptions"] == _at(rc, "spec", "autoscalerOptions")
    template = ("spec", "workerGroupSpecs", "[]", "template")
    assert known["TemplateMeta"] == _at(rc, *template, "metadata")
    assert known["PodSpec"] == _at(rc, *template, "spec")
    assert known["Container"] == _at(rc, *template, "spec", "containers", "[]")
    assert known["ResourceRequirements"] == _at(rc, *template, "spec", "containers", "[]", "resources")
    assert known["RayJobSpec"] == _at(_crd_properties(files["ray.io_rayjobs.yaml"]), "spec")
    assert known["RayServiceSpec"] == _at(_crd_properties(files["ray.io_rayservices.yaml"]), "spec")
    q = _crd_properties(our_crd_dir() / "scheduling.run.ai_queues.yaml")
    assert known["QueueSpec"] == _at(q, "spec")
    assert known["QueueResources"] == _at(q, "spec", "resources")
    assert known["QueueResource"] == _at(q, "spec", "resources", "gpu")


def _resources(resources: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    doc = _raycluster()
    template = doc["spec"]["workerGroupSpecs"][0]["template"]
    template["spec"]["containers"][0]["resources"] = resources
    if annotations is not None:
        template["metadata"] = {"annotations": annotations}
    return doc


R = "spec.workerGroupSpecs[0].template.spec.containers[0].resources"


@pytest.mark.parametrize(
    ("resources", "annotations", "found"),
    [
        ({"limits": {"nvidia.com/gpu": "-8"}}, None, f"{R}.limits[nvidia.com/gpu]: '-8' is negative"),
        ({"limits": {"nvidia.com/gpu": -8}}, None, f"{R}.limits[nvidia.com/gpu]: -8 is negative"),
        ({"limits": {"nvidia.com/gpu": "2.5"}}, None, f"{R}.limits[nvidia.com/gpu]: '2.5' is not a whole number"),
        ({"limits": {"nvidia.com/gpu": "500m"}}, None, f"{R}.limits[nvidia.com/gpu]: '500m' is not a whole number"),
        ({"limits": {"example.com/fpga": 1.5}}, None, f"{R}.limits[example.com/fpga]: 1.5 is not a whole number"),
        ({"requests": {"cpu": "-500m"}}, None, f"{R}.requests[cpu]: '-500m' is negative"),
        ({"requests": {"memory": "-1Gi"}}, None, f"{R}.requests[memory]: '-1Gi' is negative"),
        ({"requests": {"memory": float("nan")}}, None, f"{R}.requests[memory]: nan is not a finite quantity"),
        ({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}, None, f"{R}.requests[cpu]: '2' is above the limit '1'"),
        (
            {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 2}},
            None,
            f"{R}.requests[nvidia.com/gpu]: 1 is not the limit 2; an extended resource's request must equal its limit",
        ),
        ({}, {"gpu-fraction": "1.5"}, "metadata.annotations[gpu-fraction]: '1.5' is not in (0, 1]"),
        ({}, {"gpu-fraction": "-0.5"}, "metadata.annotations[gpu-fraction]: '-0.5' is not in (0, 1]"),
        ({}, {"gpu-fraction": "half"}, "metadata.annotations[gpu-fraction]: 'half' is not in (0, 1]"),
    ],
)
def test_resources_kubernetes_would_refuse_are_named(
    resources: dict[str, Any], annotations: dict[str, str] | None, found: str
) -> None:
    """Kubernetes refuses negative requests and limits, fractional extended resources, a request above its
    limit and an extended resource whose request is not its limit; kai-ray names each by path."""
    problems = [str(e) for e in invalid_quantities(_resources(resources, annotations))]
    assert len(problems) == 1 and found in problems[0], problems


def test_resources_kubernetes_accepts_pass() -> None:
    ok = {
        "requests": {"cpu": "500m", "memory": "1.5Gi", "nvidia.com/gpu": "2", "hugepages-2Mi": "0"},
        "limits": {"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": 2, "ephemeral-storage": "1e3"},
    }
    assert invalid_quantities(_resources(ok, {"gpu-fraction": "0.5"})) == []
    assert invalid_quantities(_resources({"limits": {"nvidia.com/gpu": "1k"}}, {"gpu-fraction": "1"})) == []

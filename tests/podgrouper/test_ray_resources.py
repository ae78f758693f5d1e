"""Ray's own resource names in the gang's shape: what each group's pods tell Ray beyond CPU, GPU and memory (``TPU``
from a ``google.com/tpu`` limit, custom names from ``rayStartParams.resources`` or the group's ``resources``), as
KubeRay maps them, is recorded per subgroup on the PodGroup; a group that tells Ray of TPUs Kubernetes does not give
it is warned about, and resources ``ray start`` cannot read are refused naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray import constants as c
from kai_ray.api.loader import parse_object
from kai_ray.api.ray import RayCluster
from kai_ray.cli import main
from kai_ray.podgrouper import GroupingError, group, ray_resource_warnings


def _worker(name: str, limits: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    ctr: dict[str, Any] = {"name": "ray-worker", "image": "rayproject/ray"}
    if limits:
        ctr["resources"] = {"limits": limits}
    return {"groupName": name, "replicas": 1, "template": {"spec": {"containers": [ctr]}}, **extra}


def _cluster(*workers: dict[str, Any], head: dict[str, Any] | None = None) -> RayCluster:
    body = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "rc"},
        "spec": {
            "headGroupSpec": {"template": {"spec": {"containers": [{"name": "h"}]}}, **(head or {})},
            "workerGroupSpecs": list(workers),
        },
    }
    obj = parse_object(body)
    assert isinstance(obj, RayCluster)
    return obj


def _shape(obj: RayCluster) -> dict[str, dict[str, float]]:
    raw = group(obj).metadata.annotations.get(c.RAY_RESOURCES)
    return json.loads(raw) if raw else {}


def test_a_tpu_limit_is_ray_tpu_and_custom_names_are_carried() -> None:
    obj = _cluster(
        _worker("tpu", {"google.com/tpu": "4"}),
        _worker("neuron", {"aws.amazon.com/neuroncore": "2"}),
        _worker("custom", rayStartParams={"resources": '"{\\"X\\": 1, \\"Y\\": 0.5}"'}),
        _worker("field", {"google.com/tpu": "8"}, resources={"cpu": "4", "TPU": "8", "slice": "1"}),
        _worker("plain", {"nvidia.com/gpu": "1"}),
        head={"rayStartParams": {"resources": '{"head_only": 1}'}},
    )
    assert _shape(obj) == {
        "headgroup": {"head_only": 1},
        "tpu": {"TPU": 4},
        "neuron": {"neuron_cores": 2},
        "custom": {"X": 1, "Y": 0.5},
        "field": {"TPU": 8, "slice": 1},
    }
    assert ray_resource_warnings(obj) == []


def test_a_group_without_pods_is_not_in_the_shape() -> None:
    obj = _cluster(_worker("tpu", {"google.com/tpu": "4"}, replicas=0))
    assert "tpu" not in _shape(obj)


def test_ray_told_of_tpus_the_pod_does_not_get_is_a_warning() -> None:
    obj = _cluster(
        _worker("none", rayStartParams={"resources": '{"TPU": 4}'}),
        _worker("fewer", {"google.com/tpu": "2"}, rayStartParams={"resources": '{"TPU": 4}'}),
    )
    problems = ray_resource_warnings(obj)
    assert len(problems) == 2
    assert problems[0].startswith("spec.workerGroupSpecs[0].rayStartParams.resources: Ray is told TPU 4 but the Ray")
    assert "has no google.com/tpu limit" in problems[0]
    assert "has a google.com/tpu limit of 2" in problems[1]


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"rayStartParams": {"resources": "{TPU: 4}"}}, "rayStartParams.resources"),
        ({"rayStartParams": {"resources": '{"TPU": "four"}'}}, "rayStartParams.resources"),
        ({"resources": {"TPU": "lots"}}, "resources[TPU]"),
    ],
)
def test_resources_ray_start_cannot_read_are_refused(extra: dict[str, Any], field: str) -> None:
    with pytest.raises(
        GroupingError, match=rf"spec\.workerGroupSpecs\[0\]\.{field.replace('[', '.').replace(']', '.')}"
    ):
        group(_cluster(_worker("w", **extra)))


def test_podgroup_shows_the_shape_and_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    obj = _cluster(_worker("tpu", {"google.com/tpu": "4"}), _worker("told", rayStartParams={"resources": '{"TPU": 4}'}))
    path = tmp_path / "tpu.yaml"
    path.write_text(yaml.safe_dump(obj.to_dict()))
    _run(["podgroup", "-f", str(path), "-o", "json"])
    out, err = capsys.readouterr()
    (pg,) = json.loads(out)
    assert json.loads(pg["metadata"]["annotations"][c.RAY_RESOURCES])["tpu"] == {"TPU": 4}
    assert "workerGroupSpecs[1].rayStartParams.resources: Ray is told TPU 4" in err
    assert _run(["podgroup", "-f", str(path), "--strict"]) == 2


def _run(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0

"""The vLLM RayService example, checked by Ray itself.

No GPU here can run vLLM, so the example's ``serveConfigV2`` would otherwise be read by nothing until a user deploys
it. Ray Serve's own schema (``ray.serve.schema.ServeDeploySchema``) validates the applications, Serve LLM's config
model (``LLMConfig``, the model ``build_openai_app`` validates each ``llm_configs`` entry with) validates every LLM
entry, and Serve's ``AutoscalingConfig`` the replica range, so a typo in the example fails here. ``LLMConfig`` is
imported from its defining module: ``ray.serve.llm`` itself imports vLLM, which is not installed.
"""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("ray.serve.schema")
pytest.importorskip("pyarrow")  # LLMConfig's module reads cloud storage through pyarrow

from ray.llm._internal.serve.core.configs.llm_config import LLMConfig
from ray.serve.config import AutoscalingConfig
from ray.serve.schema import ServeDeploySchema

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rayservice-vllm.yaml"


def _serve_config() -> dict[str, Any]:
    doc = yaml.safe_load(EXAMPLE.read_text())
    assert doc["kind"] == "RayService"
    config: dict[str, Any] = yaml.safe_load(doc["spec"]["serveConfigV2"])
    return config


def _llm_configs(config: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for app in config["applications"] for c in app["args"]["llm_configs"]]


def test_serve_config_is_a_valid_serve_deployment() -> None:
    schema = ServeDeploySchema.model_validate(_serve_config())
    (app,) = schema.applications
    module, _, attr = app.import_path.partition(":")
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    assert f"def {attr}(" in Path(spec.origin).read_text(), f"{module} defines no {attr}"


def test_every_llm_config_is_valid_for_serve_llm() -> None:
    configs = _llm_configs(_serve_config())
    assert configs
    for raw in configs:
        cfg = LLMConfig.model_validate(raw)
        autoscaling = AutoscalingConfig(**cfg.deployment_config["autoscaling_config"])
        assert 1 <= autoscaling.min_replicas <= autoscaling.max_replicas


def test_the_llm_shape_matches_the_worker_group() -> None:
    """Tensor-parallel 4 on one 4-GPU worker per replica, and the worker group spans Serve's replica range."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    (group,) = doc["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    gpus = int(group["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
    (raw,) = _llm_configs(_serve_config())
    cfg = LLMConfig.model_validate(raw)
    assert cfg.engine_kwargs["tensor_parallel_size"] == gpus == int(group["rayStartParams"]["num-gpus"])
    autoscaling = cfg.deployment_config["autoscaling_config"]
    assert (group["minReplicas"], group["maxReplicas"]) == (autoscaling["min_replicas"], autoscaling["max_replicas"])


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("engine_kwarg",), {}),  # a misspelt top-level key
        (("model_loading_config", "model_idd"), "x"),
        (("deployment_config", "autoscaling_config", "min_replicas"), -1),
    ],
)
def test_a_typo_in_the_example_would_fail(path: tuple[str, ...], value: object) -> None:
    raw = copy.deepcopy(_llm_configs(_serve_config())[0])
    target = raw
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ValueError):
        cfg = LLMConfig.model_validate(raw)
        AutoscalingConfig(**cfg.deployment_config["autoscaling_config"])

"""A Ray Serve app with a tiny CPU model: the RayService of kai-ray's headline (``import_path: serve_app:app``).

The "model" is a linear classifier over 4 features into 3 classes with weights drawn from a fixed seed, so every
replica answers the same and nothing is downloaded. It stands in for the vLLM service of
``examples/rayservice-vllm.yaml`` on machines without a GPU: what the headline measures is when the service answers
its first request, not what it answers.

``POST /`` with ``{"features": [f1, f2, f3, f4]}`` (or a list of such rows) returns the class and its scores;
``GET /`` returns the model's shape and the node serving it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ray import serve
from starlette.requests import Request

CLASSES = ("setosa", "versicolor", "virginica")
FEATURES = 4


def model() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(2026)
    return rng.normal(size=(FEATURES, len(CLASSES))), rng.normal(size=len(CLASSES))


def predict(weights: np.ndarray, bias: np.ndarray, rows: list[list[float]]) -> list[dict[str, Any]]:
    x = np.asarray(rows, dtype=float).reshape(-1, FEATURES)
    logits = x @ weights + bias
    scores = np.exp(logits - logits.max(axis=1, keepdims=True))
    scores /= scores.sum(axis=1, keepdims=True)
    return [
        {"label": CLASSES[int(i)], "scores": [round(float(s), 6) for s in row]}
        for i, row in zip(scores.argmax(axis=1), scores, strict=True)
    ]


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Classifier:
    def __init__(self) -> None:
        import ray

        self.weights, self.bias = model()
        self.node = ray.get_runtime_context().get_node_id()

    async def __call__(self, request: Request) -> dict[str, Any]:
        if request.method == "GET":
            return {"model": "linear", "features": FEATURES, "classes": list(CLASSES), "node": self.node}
        try:
            body = await request.json()
            rows = body["features"]
            if rows and not isinstance(rows[0], list):
                rows = [rows]
            return {"predictions": predict(self.weights, self.bias, rows)}
        except (ValueError, KeyError, TypeError) as exc:
            return {"error": f"expected {{'features': [{FEATURES} numbers]}}: {exc}"}


app = Classifier.bind()

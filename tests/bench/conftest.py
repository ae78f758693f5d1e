"""The chaos and fuzz runs use the operator fixtures of the k8s tests."""

from tests.k8s.conftest import kube, node_pool, priority_classes  # noqa: F401

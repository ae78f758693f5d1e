"""Real-Ray fixtures for the scheduler operator's Ray-native tests, shared with the autoscaler tests."""

from tests.autoscaler.conftest import ray_cluster, ray_env  # noqa: F401  (fixtures)

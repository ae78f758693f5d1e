"""Real Ray environments for the headline workloads: the autoscaler tests' isolated ``ray_env`` and ``ray_cluster``."""

from tests.autoscaler.conftest import ray_cluster, ray_env  # noqa: F401

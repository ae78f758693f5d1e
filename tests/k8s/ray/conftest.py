"""Real-Ray fixtures for the Ray-aware reclaim tests (draining Ray nodes through the GCS), shared with the autoscaler
tests."""

from tests.autoscaler.conftest import ray_cluster, ray_env  # noqa: F401  (fixtures)

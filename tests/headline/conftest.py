"""Real Ray environments for the headline workloads: the autoscaler tests' isolated ``ray_env`` and ``ray_cluster``,
and their API-server client ``kube`` for the tests that run Ray's autoscaler with kai-ray's hook."""

from tests.autoscaler.conftest import kube, ray_cluster, ray_env  # noqa: F401

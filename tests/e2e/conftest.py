"""The operator fixtures (real control plane, in-process kai-ray operators) are shared with tests/k8s."""

from tests.k8s.conftest import (  # noqa: F401
    kube,
    node_pool,
    priority_classes,
    queues,
    run_podgrouper,
    run_scheduler,
)

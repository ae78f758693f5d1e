"""Shared pytest configuration.

The real-control-plane fixtures (``control_plane``, ``kube_api``, ``namespace``, ``gpu_nodes``) and the hook that
marks their users ``controlplane`` live in :mod:`kai_ray.testing.controlplane.pytest_plugin`.
"""

from kai_ray.testing.controlplane.pytest_plugin import (  # noqa: F401
    control_plane,
    gpu_nodes,
    kube_api,
    namespace,
    pytest_collection_modifyitems,
)

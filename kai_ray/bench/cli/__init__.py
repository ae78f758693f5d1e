"""The benchmark commands (``kai-ray bench ...``, ``kai-ray sweep``): development tooling, not in the runtime wheel.

``kai_ray.cli.commands`` imports this package when it is there and adds :data:`bench` (which each module
registers its commands on) and :func:`sweep` to its app; nothing here imports the CLI, so the two packages do not
import each other in a circle.
"""

from kai_ray.bench.cli import core, e2e, failover, fragmentation, headline, replay, robust, vs_kai  # noqa: F401
from kai_ray.bench.cli.fragmentation import sweep
from kai_ray.bench.cli.group import bench

__all__ = ["bench", "sweep"]

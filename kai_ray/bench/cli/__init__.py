"""The benchmark commands (``kai-ray bench ...``, ``kai-ray sweep``): development tooling, not in the runtime wheel.

``kai_ray.cli.commands`` imports this package when it is there; each module registers its commands on
:data:`kai_ray.bench.cli.group.bench` (or on the app, for ``sweep``).
"""

from kai_ray.bench.cli import core, e2e, failover, fragmentation, headline, replay, robust, vs_kai  # noqa: F401

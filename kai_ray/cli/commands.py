"""Imports each command module so it registers itself on the app. One line per module."""

from kai_ray.cli import bench  # noqa: F401, I001
from kai_ray.cli import podgroup  # noqa: F401
from kai_ray.cli import simulate  # noqa: F401
from kai_ray.cli import demo  # noqa: F401
from kai_ray.cli import operator  # noqa: F401
from kai_ray.cli import explain  # noqa: F401
from kai_ray.cli import bench_e2e  # noqa: F401
from kai_ray.cli import bench_robust  # noqa: F401
from kai_ray.cli import views  # noqa: F401
from kai_ray.cli import fragmentation  # noqa: F401
from kai_ray.cli import bench_vs  # noqa: F401

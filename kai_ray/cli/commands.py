"""Imports each command module so it registers itself on the app. One line per module."""

from kai_ray.cli import podgroup  # noqa: F401

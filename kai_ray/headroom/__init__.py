"""Autoscaler headroom: how many more pods of each subgroup the scheduler can place, below both the scheduler
operator (which computes and publishes it) and the Ray autoscaler hook (which caps scale-ups with it).

- :mod:`~kai_ray.headroom.contract` — the ``kai-ray.io/headroom`` annotation and the capping rule (pure).
- :mod:`~kai_ray.headroom.compute` — computing headroom with the scheduler core.
"""

from kai_ray.headroom.contract import HEADROOM_ANNOTATION, SubgroupHeadroom, headroom_annotations

__all__ = ["HEADROOM_ANNOTATION", "SubgroupHeadroom", "headroom_annotations"]

"""The Ray autoscaler hook: scale-ups capped by the headroom the kai-ray scheduler publishes on each PodGroup.

- :mod:`~kai_ray.autoscaler.headroom` — the ``kai-ray.io/headroom`` contract and the capping rule (pure).
- :mod:`~kai_ray.autoscaler.compute` — computing headroom with the scheduler core (for the operator to publish).
- :mod:`~kai_ray.autoscaler.providers` — Ray's KubeRay providers (v1 and v2) with the cap (needs ``ray``).
- :mod:`~kai_ray.autoscaler.entrypoint` — ``python -m kai_ray.autoscaler``, the sidecar command.

Nothing here imports Ray at package import time.
"""

from kai_ray.autoscaler.headroom import HEADROOM_ANNOTATION, SubgroupHeadroom, headroom_annotations

__all__ = ["HEADROOM_ANNOTATION", "SubgroupHeadroom", "headroom_annotations"]

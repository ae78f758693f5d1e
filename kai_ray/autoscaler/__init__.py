"""The Ray autoscaler hook: scale-ups capped by the headroom the kai-ray scheduler publishes on each PodGroup.

- :mod:`~kai_ray.autoscaler.providers` — Ray's KubeRay providers (v1 and v2) with the cap (needs ``ray``).
- :mod:`~kai_ray.autoscaler.entrypoint` — ``python -m kai_ray.autoscaler``, the sidecar command.

The contract and the computation live one floor down, in :mod:`kai_ray.headroom`. Nothing here imports Ray at
package import time.
"""

from kai_ray.headroom.contract import HEADROOM_ANNOTATION, SubgroupHeadroom, headroom_annotations

__all__ = ["HEADROOM_ANNOTATION", "SubgroupHeadroom", "headroom_annotations"]

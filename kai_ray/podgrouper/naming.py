"""DNS-safe subgroup names for Ray worker groups.

KubeRay accepts any ``groupName`` but KAI's PodGroup webhook wants RFC 1123 labels, so a group named ``GPU_Workers``
would fail KAI's validation. We map such names deterministically; a hash of the original keeps two names that
lower-case alike (``gpu_a`` and ``GPU-A``) apart. Valid names pass through unchanged.
"""

from __future__ import annotations

import hashlib
import re

from kai_ray.api.podgroup import DNS_LABEL

_INVALID = re.compile(r"[^a-z0-9-]+")


def subgroup_name(group_name: str) -> str:
    if DNS_LABEL.match(group_name) and len(group_name) <= 63:
        return group_name
    digest = hashlib.sha256(group_name.encode()).hexdigest()[:6]
    base = _INVALID.sub("-", group_name.lower()).strip("-")[: 63 - 7].strip("-")
    return f"{base}-{digest}" if base else f"group-{digest}"

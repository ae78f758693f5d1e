"""Which queue a PodGroup goes to: one rule for Ray owners, ownerless pods and the simulator, KAI's.

Why KAI's rule to the letter (its podgrouper's ``CalcPodGroupQueue``): a workload labelled for KAI must land in the
same queue under kai-ray, or moving between the two moves jobs between tenants. In order:

1. the queue label on the top owner, then on the pod; a label that is there wins even when its value is empty (the
   PodGroup's queue is then empty, which the scheduler reports as an unknown queue, rather than a silent move to the
   default queue);
2. the ``project`` label (top owner, then pod), followed by ``-<pool>`` when the pod carries ``runai/node-pool``; an
   empty ``project`` counts as none;
3. the default queue.
"""

from __future__ import annotations

from kai_ray.api.meta import ObjectMeta, Pod
from kai_ray.podgrouper.grouper_config import PodgrouperConfig

PROJECT_LABEL = "project"
POOL_LABEL = "runai/node-pool"  # KAI's NodePoolNameLabel: the pool a project's queue is split by


def resolve_queue(owner: ObjectMeta, pod: Pod | None, config: PodgrouperConfig) -> str:
    """The queue for a PodGroup of ``owner`` (the top owner; for an ownerless pod, the pod's own metadata), with
    ``pod`` the pod being grouped when there is one."""
    metas = (owner,) if pod is None else (owner, pod.metadata)
    for meta in metas:
        if config.queue_label_key in meta.labels:
            return meta.labels[config.queue_label_key]
    project = next((m.labels[PROJECT_LABEL] for m in metas if PROJECT_LABEL in m.labels), "")
    if not project:
        return config.default_queue
    pool = pod.metadata.labels.get(POOL_LABEL) if pod is not None else None
    return f"{project}-{pool}" if pool is not None else project

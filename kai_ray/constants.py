"""Label and annotation keys, and defaults. KAI's keys where KAI has one; ``kai-ray.io/*`` for our additions."""

from __future__ import annotations

SCHEDULER_NAME = "kai-scheduler"

# KAI wire keys
QUEUE_LABEL = "kai.scheduler/queue"
NODE_POOL_LABEL = "kai.scheduler/node-pool"  # KAI's nodePoolLabelKey default: nodes, Queues, PodGroups of a pool
DEFAULT_NODE_POOL = "default"  # KAI's default SchedulingShard: what carries no node-pool label
PRIORITY_LABEL = "priorityClassName"
RAY_PRIORITY_LABEL = "ray.io/priority-class-name"
PREEMPTIBILITY_LABEL = "kai.scheduler/preemptibility"
# KAI's values of spec.preemptibility and of that label; semi-preemptible is KAI's third mode (docs/semi-preemptible.md)
PREEMPTIBILITY_VALUES = ("preemptible", "non-preemptible", "semi-preemptible")
PODGROUP_ANNOTATION = "pod-group-name"
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"
SKIP_PODGROUPER = "kai.scheduler/skip-podgrouper"
TASK_PRIORITY_LABEL = "kai.scheduler/task-priority"
TOP_OWNER_METADATA = "kai.scheduler/top-owner-metadata"
TOPOLOGY = "kai.scheduler/topology"
TOPOLOGY_REQUIRED = "kai.scheduler/topology-required-placement"
TOPOLOGY_PREFERRED = "kai.scheduler/topology-preferred-placement"
PREEMPTION_DELAY = "kai.scheduler/preemption-delay"
STALENESS_GRACE = "kai.scheduler/staleness-grace-period"
LAST_START = "kai.scheduler/last-start-timestamp"
LAST_EVICTION = "kai.scheduler/last-eviction-timestamp"
STALE_SINCE = "kai.scheduler/stale-podgroup-timestamp"
# KAI's queue-admission gating design (docs/autoscaling.md): the gate on pods of opted-in queues, the Queue label that
# opts a queue in, and the stamp written when a quota decision removes the gate (the gang's room is reserved from then)
QUEUE_ADMISSION_GATE = "kai.scheduler/queue-admission"
QUEUE_ADMISSION_GATING_LABEL = "kai.scheduler/queue-admission-gating"
QUEUE_ADMITTED = "kai.scheduler/queue-admitted-timestamp"
GPU_FRACTION = "gpu-fraction"
GPU_MEMORY = "gpu-memory"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_MEMORY_NODE_LABEL = "nvidia.com/gpu.memory"

# kai-ray additions (KAI's PodGroup has no maxMember)
MAX_MEMBER = "kai-ray.io/max-member"
SUBGROUP_MAX = "kai-ray.io/subgroup-max"
SUBGROUP_NAMES = "kai-ray.io/subgroup-names"
# JSON {subgroup: {Ray resource: amount}}: what each pod tells Ray beyond CPU/GPU/memory (TPU, custom resources)
RAY_RESOURCES = "kai-ray.io/ray-resources"
SUBMITTER_SUBGROUP = "submitter"
# JSON {subgroup: pods}: a leaf's non-preemptible core when the gang is semi-preemptible, where it is not the leaf's
# minMember (the RayJob submitter: minMember 0, as it starts after the cluster, yet part of the core)
SUBGROUP_CORE = "kai-ray.io/subgroup-core"
# on a Queue: the preemptibility of its jobs that set none themselves (one of PREEMPTIBILITY_VALUES)
DEFAULT_PREEMPTIBILITY = "kai-ray.io/default-preemptibility"
# Why the gang cannot be scheduled, written by the podgrouper on the PodGroup (the scheduler reports it as a condition)
INVALID = "kai-ray.io/invalid"
# Ray-native scheduling (docs/ray-native.md). On the Ray object (copied to its PodGroup by the podgrouper):
LAST_CHECKPOINT = "kai-ray.io/last-checkpoint-time"  # RFC 3339, set from inside the Ray program
READY_TIMEOUT = "kai-ray.io/ready-timeout"  # duration: a bound gang not all Ready by then is evicted whole
MAX_PENDING_TIME = "kai-ray.io/max-pending-time"  # duration: a condition and Event once pending longer
MAX_PENDING_ACTION = "kai-ray.io/max-pending-action"  # "" (report only) | "suspend" | "fail"
MAX_PENDING_ACTIONS = ("", "suspend", "fail")
MAX_RUNTIME = "kai-ray.io/max-runtime"  # duration of admitted time, then stopped (a RayJob suspended)
# On the Ray object (copied to its PodGroup) or on a Queue: how long a drained Ray node gets before its pod goes
DRAIN_DEADLINE = "kai-ray.io/drain-deadline"
# written by kai-ray on the PodGroup:
ADMITTED_SECONDS = "kai-ray.io/admitted-seconds"  # admitted time of earlier runs (max-runtime)
REQUEUE_AFTER = "kai-ray.io/requeue-after"  # RFC 3339: a gang evicted for its ready-timeout waits until then
MAX_PENDING_ACTED = "kai-ray.io/max-pending-acted"  # JSON {action, at, ...}: the max-pending-action was taken
UPGRADE_SURGE_OF = "kai-ray.io/upgrade-surge-of"  # a RayService's pending cluster: the active cluster's PodGroup
# Pods one gang may have (minimum and elastic ceiling): no object makes the operators do work beyond it
DEFAULT_MAX_GANG_PODS = 10_000

# KubeRay pod labels
RAY_GROUP = "ray.io/group"
RAY_NODE_TYPE = "ray.io/node-type"
RAY_CLUSTER = "ray.io/cluster"
RAY_HEAD_GROUP = "headgroup"
RAY_SUBMITTER_GROUP = "submittergroup"
RAY_KINDS = ("RayCluster", "RayJob", "RayService")  # the KubeRay owners kai-ray groups, suspends and reclaims

DEFAULT_QUEUE = "default-queue"

# KAI's Helm PriorityClasses
PRIORITY_CLASSES: dict[str, int] = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
PREEMPTIBLE_BELOW = 100
DEFAULT_PRIORITY_VALUE = 50

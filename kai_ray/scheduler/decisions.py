"""The scheduler core's output: what should happen, and why.

Every decision carries a machine-readable ``reason`` (a stable code an operator can put on a condition or Event) and
a human ``message``. Adapters turn these into Bindings, Evictions (or Ray-aware shrinks/suspends), PodGroup
conditions and Queue status; the simulator applies them to its in-memory world.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from kai_ray.scheduler.device_ledger import ClaimAllocation


class Action(str, Enum):  # noqa: UP042  (str() kept as before)
    ALLOCATE = "allocate"
    CONSOLIDATION = "consolidation"
    RECLAIM = "reclaim"
    PREEMPT = "preempt"
    STALE_GANG_EVICTION = "stalegangeviction"


class Reason(str, Enum):  # noqa: UP042  (str() kept as before)
    """Stable reason codes. KAI's names where KAI has one."""

    # bind
    SCHEDULED = "Scheduled"
    ELASTIC_SCALE_UP = "ElasticScaleUp"
    PIPELINED = "Pipelined"  # placed on resources that victims are still releasing
    # pending (PodGroup condition Unschedulable)
    QUEUE_DOES_NOT_EXIST = "QueueDoesNotExist"
    QUEUE_NOT_LEAF = "QueueNotLeaf"
    OVER_LIMIT = "OverLimit"
    NON_PREEMPTIBLE_OVER_QUOTA = "NonPreemptibleOverQuota"
    GANG_DOES_NOT_FIT = "GangDoesNotFit"
    NEVER_FITS = "NeverFits"  # bigger than any node / the whole cluster: no eviction can help
    TOPOLOGY = "TopologyConstraintUnsatisfiable"
    PREEMPTION_DELAY_NOT_ELAPSED = "PreemptionDelayNotElapsed"
    NOT_READY = "NotReadyForScheduling"  # fewer pods exist than the gang's minimum
    READY_TIMEOUT_BACKOFF = "ReadyTimeoutBackoff"  # kai-ray: evicted for its ready-timeout, waiting out the backoff
    MAX_RUNTIME_EXCEEDED = "MaxRuntimeExceeded"  # kai-ray: admitted for its kai-ray.io/max-runtime; not placed again
    # kai-ray: pending beyond kai-ray.io/max-pending-time with a kai-ray.io/max-pending-action: suspend or fail it
    MAX_PENDING_TIME_EXCEEDED = "MaxPendingTimeExceeded"
    INVALID = "InvalidPodGroup"
    QUEUE_INVALID = "QueueInvalid"  # its queue (or an ancestor) has an unknown parent or is in a cycle
    # evict
    PREEMPTED = "Preempted"
    RECLAIMED = "Reclaimed"
    CONSOLIDATED = "Consolidated"
    STALE_GANG = "StaleGang"
    READY_TIMEOUT = "ReadyTimeout"  # kai-ray: bound but not all Ready within kai-ray.io/ready-timeout
    MAX_RUNTIME = "MaxRuntime"  # kai-ray: admitted for kai-ray.io/max-runtime; stopped (a RayJob is suspended)


@dataclass(frozen=True, slots=True)
class Bind:
    pod: str  # Pod.uid
    job: str  # Job.key
    node: str
    reason: Reason = Reason.SCHEDULED
    gpu_group: str | None = None  # fractional pods: the shared GPU they go on
    pipelined: bool = False  # True: wait for victims to release before binding
    message: str = ""
    claims: tuple[ClaimAllocation, ...] = ()  # DRA: write each claim's allocation and reservedFor before binding


@dataclass(frozen=True, slots=True)
class Evict:
    pod: str  # Pod.uid
    job: str  # victim Job.key
    action: Action
    reason: Reason
    preemptor: str | None = None  # Job.key that the eviction makes room for
    elastic: bool = False  # True: surplus above the gang's min (shrink, do not kill the gang)
    whole_gang: bool = False  # True: the victim gang goes entirely
    message: str = ""
    moved_to: str | None = None  # consolidation: the node where room is held for the re-created pod
    moved_group: str | None = None  # and, for a shared-GPU pod, the logical GPU there (as Bind.gpu_group)
    queue: str = ""  # the victim's queue: adapters count and report per queue without looking the job up again


@dataclass(frozen=True, slots=True)
class StopPending:
    """A pending gang past its ``kai-ray.io/max-pending-time`` with a ``kai-ray.io/max-pending-action``: stop its Ray
    owner (``suspend``; ``fail`` also marks it failed). Decided once per wait, named by the wait's start
    (``pending_since``), until the adapter's record of the action (``kai-ray.io/max-pending-acted``) is read back."""

    job: str
    action: str  # "suspend" | "fail"
    pending_since: float
    waited: float
    limit: float


@dataclass(frozen=True, slots=True)
class JobStatus:
    """Per-PodGroup verdict of the cycle: scheduled, or why not (the blocking fact)."""

    job: str
    scheduled: bool
    reason: Reason
    message: str
    details: dict[str, Any] = field(default_factory=dict)  # e.g. {"shortfall": {"gpu": 2.0}, "queue": {...}}


@dataclass(frozen=True, slots=True)
class Finding:
    """A validation finding about bad input that the core worked around (never raised)."""

    kind: str  # Queue | PodGroup | Pod | Node
    name: str
    field: str
    message: str


@dataclass(slots=True)
class QueueStatus:
    name: str
    fair_share: dict[str, float]
    allocated: dict[str, float]
    allocated_non_preemptible: dict[str, float]
    requested: dict[str, float]
    # normalised historical usage (KAI's U': decayed allocation over decayed capacity in the usage window), next to
    # fair_share; empty when no usage is accounted (the feature is off), zeros for a queue that used nothing
    usage: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class CycleResult:
    binds: list[Bind] = field(default_factory=list)
    evictions: list[Evict] = field(default_factory=list)
    stop_pending: list[StopPending] = field(default_factory=list)
    jobs: dict[str, JobStatus] = field(default_factory=dict)  # by Job.key
    queues: dict[str, QueueStatus] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)  # timings and counters
    ungate: list[Any] = field(default_factory=list)  # ungate.Ungate: gangs whose queue-admission gates go now

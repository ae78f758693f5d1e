"""The scheduler core's input: a plain-data picture of the cluster at one instant.

Why plain dataclasses and not the pydantic API models: the core runs thousands of what-ifs per cycle and must not
pay validation costs, nor know about YAML, Kubernetes or Ray. Adapters (the operators, the simulator) build a
``Snapshot`` from whatever they watch; the core only reads it and answers with decisions.

Units follow KAI's queue units so quotas compare without conversion: cpu in millicores, memory in bytes (queues say
MB = 10^6 bytes; adapters multiply), gpu in whole or fractional GPUs. ``-1`` in a queue quota or limit means
"unlimited"; ``0`` is literal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from kai_ray.scheduler.device_ledger import Claim, Device
from kai_ray.scheduler.usage import UsageParams

UNLIMITED = -1.0


@dataclass(frozen=True, slots=True)
class Resources:
    """A resource vector; the three resources KAI divides (gpu, cpu millicores, memory bytes)."""

    gpu: float = 0.0
    cpu: float = 0.0
    memory: float = 0.0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.gpu + other.gpu, self.cpu + other.cpu, self.memory + other.memory)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.gpu - other.gpu, self.cpu - other.cpu, self.memory - other.memory)

    def scale(self, k: float) -> Resources:
        return Resources(self.gpu * k, self.cpu * k, self.memory * k)

    def as_dict(self) -> dict[str, float]:
        return {"gpu": self.gpu, "cpu": self.cpu, "memory": self.memory}

    @staticmethod
    def names() -> tuple[str, str, str]:
        return ("gpu", "cpu", "memory")


ZERO = Resources()


class PodPhase(str, Enum):  # noqa: UP042  (str() kept as before)
    PENDING = "Pending"
    RUNNING = "Running"  # bound to a node (includes ContainerCreating)
    PIPELINED = "Pipelined"  # placed by an earlier cycle onto resources still being released; not bound yet
    RELEASING = "Releasing"  # terminating: still holds its node's resources
    STUCK_RELEASING = "StuckInReleasing"  # terminating for too long: holds resources nobody may pipeline onto
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class Disruption(str, Enum):  # noqa: UP042  (str() as the other enums)
    """How a gang may be disrupted: an upstream Kubernetes PodGroup's ``disruptionMode``.

    Why in the core: it changes the victim steps. ``SINGLE`` pods are independent victims, one at a time, even below
    the gang minimum (upstream enforces ``minCount`` only when scheduling); ``ALL`` pods go together, surplus
    included. A job without one (KAI PodGroups) keeps KAI's steps: elastic surplus one pod at a time, then the rest
    of the gang whole."""

    SINGLE = "Single"
    ALL = "All"


class Preemptibility(str, Enum):  # noqa: UP042  (str() kept as before)
    PREEMPTIBLE = "preemptible"
    NON_PREEMPTIBLE = "non-preemptible"
    # KAI's third mode: a non-preemptible core charged within quota, a preemptible burst above it
    # (:mod:`kai_ray.scheduler.semipreemptible`)
    SEMI_PREEMPTIBLE = "semi-preemptible"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"  # NoSchedule | PreferNoSchedule | NoExecute


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""  # empty key with operator Exists tolerates everything
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # empty matches every effect


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    """One matchExpression of a required node-affinity term (In, NotIn, Exists, DoesNotExist, Gt, Lt)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RayActivity:
    """What Ray last said about the Ray node in one pod (the GCS autoscaler state's ``idle_duration_ms``).

    Why its own record with a time: the answer ages. The core uses it only while ``now - observed_at`` is within
    ``SchedulerConfig.ray_activity_max_age``; an older or missing answer leaves the victim order as it was."""

    observed_at: float  # snapshot clock
    idle_seconds: float = 0.0  # > 0: no running tasks or actors for that long; 0: busy
    busy_since: float | None = None  # when it last turned busy (the adapter remembers the transition); None unknown


@dataclass(slots=True)
class Node:
    name: str
    allocatable: Resources
    max_pods: int = 110
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[Taint] = field(default_factory=list)
    gpu_memory_mib: int = 0  # memory of one GPU (node label nvidia.com/gpu.memory); 0 = unknown
    unschedulable: bool = False  # cordoned
    ready: bool = True
    # allocatable of every other resource, by its Kubernetes name (extended resources such as google.com/tpu,
    # amd.com/gpu or nvidia.com/mig-1g.10gb; ephemeral-storage and hugepages-* in bytes); absent means none
    extended: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class Pod:
    """One pod of a PodGroup. ``uid`` is the identity used in decisions (``namespace/name`` is fine)."""

    uid: str
    name: str
    namespace: str
    job: str  # key of its Job (``namespace/podgroup-name``)
    request: Resources
    phase: PodPhase = PodPhase.PENDING
    node: str | None = None
    subgroup: str | None = None  # kai.scheduler/subgroup-name; None when the job has no subgroups
    task_priority: int = 0  # kai.scheduler/task-priority: higher is placed first, evicted last
    is_ray_head: bool = False  # ray.io/node-type=head: placed first, evicted last
    gpu_fraction: float | None = None  # gpu-fraction annotation: share of ONE GPU (0 < f < 1)
    gpu_memory_mib: int | None = None  # gpu-memory annotation: MiB of one GPU
    gpu_group: str | None = None  # for a bound fractional pod: which shared GPU it sits on
    node_selector: dict[str, str] = field(default_factory=dict)
    required_affinity: list[list[NodeSelectorRequirement]] = field(default_factory=list)  # OR of ANDed terms
    tolerations: list[Toleration] = field(default_factory=list)
    start_time: float | None = None  # seconds (snapshot clock) when it became Running
    gated: bool = False  # has scheduling gates: not ready to schedule
    quota_gated: bool = False  # its only gate is the queue-admission gate (ungate.py decides when it goes)
    admitted_at: float | None = None  # when a quota decision removed that gate (snapshot clock): room reserved
    created_at: float = 0.0  # creation time (snapshot clock): older pods are placed first within a PodSet
    claims: tuple[str, ...] = ()  # keys of its ResourceClaims (Snapshot.claims); DRA GPUs are already in request
    # kai-ray Ray-native facts: what Ray says about this pod's Ray node; None unknown
    ray_activity: RayActivity | None = None
    ready: bool | None = None  # the pod's Ready condition; None unknown (ready-timeout ignores it)
    # when it was bound (its PodScheduled condition): a semi-preemptible core is its PodSet's first-bound pods, an
    # order fixed at binding (containers may start in any order); None: unknown, start_time stands in
    bound_at: float | None = None
    # request of every resource beyond gpu, cpu and memory, by its Kubernetes name (as Node.extended); fitted
    # against nodes, never charged to queues (KAI's quotas are on gpu, cpu and memory)
    extended: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopologyConstraint:
    topology: str  # name of a Topology
    required_level: str | None = None  # a node label key from the Topology's levels
    preferred_level: str | None = None


@dataclass(slots=True)
class Topology:
    name: str
    levels: list[str]  # node label keys, largest domain first


@dataclass(slots=True)
class SubGroup:
    name: str
    min_member: int | None = None  # a leaf: pods required
    min_subgroup: int | None = None  # an inner node: children required (None = all)
    parent: str | None = None
    max_member: int | None = None  # kai-ray.io/subgroup-max: elastic ceiling of this subgroup
    topology: TopologyConstraint | None = None
    core: int | None = None  # kai-ray.io/subgroup-core: a leaf's non-preemptible pods when semi-preemptible (min)


@dataclass(slots=True)
class Job:
    """A PodGroup and its pods: the unit of gang scheduling."""

    namespace: str
    name: str
    queue: str
    priority: int = 50
    priority_class: str = ""
    preemptibility: Preemptibility | None = None  # None: derived, priority < 100 is preemptible
    # the podgrouper derived ``preemptibility`` (from the priority class), the object set none: a queue's default
    # preemptibility replaces it (:func:`kai_ray.scheduler.semipreemptible.job_mode`)
    preemptibility_derived: bool = False
    min_member: int = 1
    min_subgroup: int | None = None
    subgroups: list[SubGroup] = field(default_factory=list)
    max_member: int | None = None  # kai-ray.io/max-member: elastic ceiling of the whole gang
    topology: TopologyConstraint | None = None
    created_at: float = 0.0
    last_start: float | None = None  # kai.scheduler/last-start-timestamp
    preemption_delay: float | None = None  # seconds pending before this job may cause evictions
    staleness_grace: float | None = None  # seconds; negative disables stale-gang eviction
    stale_since: float | None = None  # kai.scheduler/stale-podgroup-timestamp: when it was first seen stale
    uid: str = ""
    kind: str = ""  # RayCluster / RayJob / RayService / "" - informational
    pods: list[Pod] = field(default_factory=list)
    raynative: RayNativeFacts | None = None  # kai-ray's Ray-native facts and limits; None: none
    disruption: Disruption | None = None  # an upstream PodGroup's disruptionMode; None: KAI's victim steps

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def preemptible(self) -> bool:
        """Whether the scheduler may take pods of it (a semi-preemptible job's burst counts: it is preemptible)."""
        if self.preemptibility is not None:
            return self.preemptibility is not Preemptibility.NON_PREEMPTIBLE
        return self.priority < 100


@dataclass(slots=True)
class RayNativeFacts:
    """What kai-ray knows of a Ray workload beyond its pods, kept apart from KAI's fields.

    Times are on the snapshot clock, durations in seconds; None means unknown or not asked for."""

    last_checkpoint: float | None = None  # kai-ray.io/last-checkpoint-time on the Ray object
    ready_timeout: float | None = None  # kai-ray.io/ready-timeout (else SchedulerConfig.default_ready_timeout)
    bound_since: float | None = None  # when its gang was last bound whole (ready-timeout runs from here)
    max_pending_time: float | None = None  # kai-ray.io/max-pending-time
    pending_since: float | None = None  # when it last started waiting (else created_at)
    max_pending_action: str | None = None  # kai-ray.io/max-pending-action: "suspend" | "fail"; None: report only
    max_pending_acted: float | None = None  # when the adapter took that action (kai-ray.io/max-pending-acted)
    max_pending_failed: bool = False  # ... and it was "fail": never placed again
    max_pending_refused: str | None = None  # ... but the Ray object could not be suspended: why
    max_runtime: float | None = None  # kai-ray.io/max-runtime: admitted time after which it is stopped
    admitted_seconds: float | None = None  # admitted time accumulated before the current run (adapter-kept)
    backoff_until: float | None = None  # requeued after a ready-timeout: not placed again before this
    upgrade_of: str | None = None  # a RayService's pending cluster: the Job key of the service's active cluster


@dataclass(slots=True)
class Queue:
    name: str
    parent: str | None = None
    priority: int = 100
    quota: Resources = field(default_factory=lambda: Resources(0.0, 0.0, 0.0))  # deserved; -1 = unlimited
    limit: Resources = field(default_factory=lambda: Resources(UNLIMITED, UNLIMITED, UNLIMITED))  # -1 = no cap
    over_quota_weight: Resources = field(default_factory=lambda: Resources(1.0, 1.0, 1.0))
    preempt_min_runtime: float | None = None  # seconds
    reclaim_min_runtime: float | None = None
    created_at: float = 0.0
    uid: str = ""
    # kai-ray.io/default-preemptibility: for the jobs of this leaf queue that set none themselves
    default_preemptibility: Preemptibility | None = None
    # labelled kai.scheduler/queue-admission-gating: "true": its pods wait on the queue-admission gate's decision
    # when SchedulerConfig.queue_admission_gating is "queues"
    admission_gating: bool = False


@dataclass(slots=True)
class SchedulerConfig:
    """Options of one scheduling cycle. Defaults are KAI's."""

    placement_gpu: str = "binpack"  # binpack | spread | bestfit | fgd | cpufgd
    placement_cpu: str = "binpack"
    gpu_sharing_order: bool = True  # KAI's gpusharingorder plugin: fractions go first to nodes with a shared GPU
    actions: tuple[str, ...] = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")
    reservation_ttl: float = 600.0  # seconds a gang ungated by its queue's quota holds that room while pending
    # which queues' gated gangs wait on the quota decision (queue_admission.py): off (none: every gate is lifted),
    # queues (Queues with admission_gating), all (every queue, a missing one included: it stays gated)
    queue_admission_gating: str = "off"
    queue_priority_in_quota_reclaim: bool = False  # kai-ray/KAI alpha: higher-priority queue reclaims in-quota
    default_preemption_delay: float = 0.0
    default_staleness_grace: float = 60.0
    default_preempt_min_runtime: float = 0.0
    default_reclaim_min_runtime: float = 0.0
    k_value: float = 1.0
    reclaimer_saturation_multiplier: float = 1.0
    max_consolidation_preemptees: int = 16
    default_priority: int = 50  # value of an unknown PriorityClass
    reclaim_min_runtime_resolve: str = "lca"  # lca | queue (KAI minruntime reclaimResolveMethod)
    max_preemptor_victim_units: int = 4096  # bound on victim units one preemptor may consider
    max_scenarios_per_job: int = 512  # victim search budget: scenarios simulated for one pending job
    max_scenarios_per_action: int = 8192  # ... and for all pending jobs of one action in one cycle
    minimal_victims: bool = True  # kai-ray: drop a victim unit when the chosen scenario works without it
    fewest_nodes: bool = True  # kai-ray: a gang that fits one node prefers single-node victim scenarios
    prune_limit: int = 64  # victim sets larger than this are kept as found (pruning is quadratic)
    preemptor_first: bool = False  # kai-ray option: in a victim scenario, place the pending job before victims
    allow_consolidating_reclaim: bool = True  # KAI: a victim that can be re-placed elsewhere is moved, not killed
    # KAI's usageDBConfig.usageParams: set, the adapter accounts each queue's usage into Snapshot.usage (time-based
    # fair share); None (KAI's default) keeps every usage at 0. The core itself reads only k_value and the usage.
    usage_params: UsageParams | None = None
    # kai-ray Ray-native scheduling (docs/ray-native.md); each one off-switchable
    idle_aware_victims: bool = True  # among equal victims, Ray-idle first, then busy for the shortest time
    checkpoint_aware_victims: bool = True  # ... and the least work since the last checkpoint
    ray_activity_max_age: float = 120.0  # seconds: an older Ray answer is ignored (today's order)
    default_ready_timeout: float | None = None  # seconds: a bound gang not Ready by then is evicted whole; None off
    ready_timeout_backoff: float = 60.0  # seconds a gang evicted for its ready-timeout waits before placement
    upgrade_surge: bool = True  # a RayService's pending cluster may go above quota (up to the limit) to upgrade


@dataclass(slots=True)
class Snapshot:
    nodes: list[Node]
    queues: list[Queue]
    jobs: list[Job]
    now: float = 0.0
    topologies: list[Topology] = field(default_factory=list)
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    # queue name -> normalised historical usage (KAI's U'; absent: 0); None: no usage is accounted (feature off)
    usage: dict[str, Resources] | None = None
    # Dynamic Resource Allocation: published devices and the claims pods name (kai_ray.scheduler.device_ledger)
    devices: list[Device] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)

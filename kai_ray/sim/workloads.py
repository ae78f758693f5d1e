"""Workloads in the simulated world: what every workload shares, and plain single-pod gangs (trace replay); Ray CRs
(through the real podgrouper) are :mod:`.ray_workload`.

A workload owns one scheduler :class:`~kai_ray.scheduler.snapshot.Job` (its PodGroup and pods) and plays the
controllers around it: KubeRay creating and re-creating pods, the kai-ray podgrouper regrouping after a replica
change, and the Ray autoscaler asking for more workers. Progress bookkeeping (work done, restarts, pending time)
lives in :class:`WorkloadBase`, so Ray CRs and trace pods are measured the same way.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from kai_ray.scheduler.device_ledger import DeviceRequest
from kai_ray.scheduler.snapshot import Job, Pod, PodPhase, SubGroup

NOT_ARRIVED, PENDING, RUNNING, COMPLETED = "NotArrived", "Pending", "Running", "Completed"
SUSPENDED = "Suspended"  # spec.suspend true as written: KubeRay creates no pods, so the scheduler never sees it


@dataclass(eq=False)
class WorkloadBase:
    """State shared by every workload kind: lifecycle, progress and the numbers the metrics are made of."""

    key: str
    kind: str
    arrive_at: float
    duration: float | None  # seconds of work at the gang minimum; None = until the end of the simulation
    restart_cost: float
    queue: str = ""
    priority_class: str = ""
    job: Job | None = None
    state: str = NOT_ARRIVED
    done: float = 0.0  # work done, in seconds at rate 1
    rate: float = 0.0
    warmup_left: float = 0.0  # restart cost still to pay before progress resumes
    last_update: float = 0.0
    first_running_at: float | None = None
    completed_at: float | None = None
    preemptions: int = 0  # times the gang was lost to an eviction
    shrinks: int = 0  # times elastic pods were evicted while the gang kept running
    evicted_pods: int = 0
    restarts: int = 0
    pending_since: float | None = None
    pending_seconds: float = 0.0
    pending_reason: str | None = None
    pending_message: str | None = None
    last_pending_reason: str | None = None
    pending_log: list[tuple[float, str, str]] = field(default_factory=list)  # (t, reason, message) as it changes
    wasted_gpu_seconds: float = 0.0
    partial_gpu_seconds: float = 0.0  # part of wasted: GPUs held by a gang below its minimum that never ran yet
    useful_gpu_seconds: float = 0.0  # GPUs held while running past the restart cost (doing work)
    intervals: list[tuple[float, float, str]] = field(default_factory=list)  # (start, end, state)
    preempted_at: list[float] = field(default_factory=list)
    version: int = 0  # bumps whenever a scheduled completion becomes stale
    running_pods: int = 0
    gang_gpus: float = 0.0  # GPUs of the gang minimum (for wasted work)
    _interval_start: float = 0.0
    # kai-ray Ray-native world (docs/ray-native.md)
    checkpoint_interval: float | None = None  # seconds of work between checkpoints (overrides the simulation's)
    activity: tuple[float, float] | None = None  # (busy, idle) seconds in Ray, repeating from each run's start
    startup_failures: int = 0  # placements whose pods never all turn Ready (an image that never pulls, ...)
    stuck: bool = False  # this placement is one of them: bound, never Ready, no progress
    stuck_gpu_seconds: float = 0.0  # GPUs held by this workload's half-started gangs
    work_lost_gpu_seconds: float = 0.0  # work lost to evictions (since the checkpoint / busy phase), GPU-seconds
    upgrade_of: str | None = None  # a RayService's pending cluster: the workload it replaces once running
    served_at: float | None = None  # when an upgrade surge took over

    # ------------------------------------------------------------------ controller behaviour (overridden)
    def create(self, t: float) -> Job:
        raise NotImplementedError

    def replace_evicted(self, t: float, evicted: list[tuple[Pod, bool]]) -> None:
        """KubeRay/the workload controller after evictions: recreate the pods that should exist."""
        raise NotImplementedError

    def worker_rate(self) -> float:
        return 1.0

    def autoscale(self, t: float) -> bool:
        """One autoscaler step; True when pods were added."""
        return False

    @property
    def autoscaling(self) -> bool:
        return False

    @property
    def user_suspended(self) -> bool:
        """Suspended by its author: it arrives and stays suspended (a Ray CR with ``spec.suspend: true``)."""
        return False

    def wants_more(self) -> bool:
        """The autoscaler would add pods now."""
        return False

    def claim_requests(self, pod: Pod) -> dict[str, tuple[DeviceRequest, ...]]:
        """The DRA claims ``pod`` makes from its templates (claim key -> device requests); none here."""
        return {}

    def gang_summary(self) -> list[dict[str, object]] | None:
        """Per pod group: pods at the gang minimum and at most, GPUs per pod (None: a workload without groups)."""
        return None

    # ------------------------------------------------------------------ shared bookkeeping
    def running_pods_any(self) -> bool:
        return self.job is not None and any(p.phase is PodPhase.RUNNING for p in self.job.pods)

    def gang(self) -> Gang:
        """The workload's real gang minimum (what it needs to run), whatever the scheduler is shown."""
        assert self.job is not None
        return Gang(self.job.min_member, self.job.min_subgroup, self.job.subgroups)

    def min_satisfied(self) -> bool:
        job = self.job
        if job is None:
            return False
        gang = self.gang()
        if not gang.subgroups:
            return sum(1 for p in job.pods if p.phase is PodPhase.RUNNING) >= max(gang.min_member, 1)
        running: dict[str, int] = {}
        for p in job.pods:
            if p.phase is PodPhase.RUNNING and p.subgroup is not None:
                running[p.subgroup] = running.get(p.subgroup, 0) + 1
        children: dict[str | None, list[str]] = {}
        for sg in gang.subgroups:
            children.setdefault(sg.parent or None, []).append(sg.name)
        by_name = {sg.name: sg for sg in gang.subgroups}

        def ok(name: str) -> bool:
            kids = children.get(name)
            if not kids:
                return running.get(name, 0) >= (by_name[name].min_member or 0)
            need = by_name[name].min_subgroup
            got = sum(1 for k in kids if ok(k))
            return got >= (need if need is not None else len(kids))

        top = children.get(None, [])
        got = sum(1 for k in top if ok(k))
        need = gang.min_subgroup if gang.min_subgroup is not None else len(top)
        return got >= need

    def missing_pods(self) -> list[Pod]:
        """Pending pods of the next step: those the gang minimum still lacks, else one elastic pod."""
        job = self.job
        assert job is not None
        pending = [p for p in job.pods if p.phase is PodPhase.PENDING]
        if not pending or self.min_satisfied():
            return sorted(pending, key=lambda p: p.request.gpu)[:1]
        gang = self.gang()
        if not gang.subgroups:
            running = sum(1 for p in job.pods if p.phase is PodPhase.RUNNING)
            return pending[: max(gang.min_member, 1) - running]
        out: list[Pod] = []
        for sg in gang.subgroups:
            running = sum(1 for p in job.pods if p.phase is PodPhase.RUNNING and p.subgroup == sg.name)
            lack = (sg.min_member or 0) - running
            if lack > 0:
                out.extend([p for p in pending if p.subgroup == sg.name][:lack])
        return out

    def advance(self, t: float, gpus_held: float) -> None:
        """Account progress from ``last_update`` to ``t`` (restart cost first, then work at ``rate``).

        ``gpus_held`` is what the workload held over that interval: callers advance before changing its pods."""
        dt = t - self.last_update
        if dt > 0 and self.state == RUNNING and self.stuck:
            self.wasted_gpu_seconds += dt * gpus_held
            self.stuck_gpu_seconds += dt * gpus_held
        elif dt > 0 and self.state == RUNNING:
            warm = min(dt, self.warmup_left)
            self.warmup_left -= warm
            self.wasted_gpu_seconds += warm * gpus_held
            self.useful_gpu_seconds += (dt - warm) * gpus_held
            self.done += (dt - warm) * self.rate
        elif dt > 0 and self.state == PENDING:
            self.wasted_gpu_seconds += dt * gpus_held  # what is left of a broken gang does no work
            if not self.preemptions:
                self.partial_gpu_seconds += dt * gpus_held  # a gang that never ran holds part of its pods
        self.last_update = t

    def eta(self, t: float) -> float | None:
        if self.duration is None or self.state != RUNNING or self.rate <= 0 or self.stuck:
            return None
        left = max(0.0, self.duration - self.done)
        return t + self.warmup_left + left / self.rate

    def set_state(self, t: float, state: str) -> None:
        if state == self.state:
            return
        if self.state in (PENDING, RUNNING) and t > self._interval_start:
            self.intervals.append((self._interval_start, t, self.state))
        if self.state == PENDING and self.pending_since is not None:
            self.pending_seconds += t - self.pending_since
            self.pending_since = None
        self.state = state
        self._interval_start = t
        if state == PENDING:
            self.pending_since = t

    def close(self, t: float) -> None:
        """End of the simulation: close the open interval (the state stays as it is)."""
        if self.state in (PENDING, RUNNING) and t > self._interval_start:
            self.intervals.append((self._interval_start, t, self.state))
            self._interval_start = t
        if self.state == PENDING and self.pending_since is not None:
            self.pending_seconds += t - self.pending_since
            self.pending_since = t

    def lose_work(self, checkpoint_interval: float, t: float | None = None) -> None:
        """On losing the gang: work since the last checkpoint is lost (none when checkpoints are continuous); with
        busy/idle phases, an idle Ray cluster loses nothing and a busy one at most its current busy phase."""
        interval = self.checkpoint_interval if self.checkpoint_interval is not None else checkpoint_interval
        lost_work: float | None = None
        if interval > 0:
            lost_work = self.done - math.floor(self.done / interval + 1e-9) * interval
        phase = self.busy_phase(t)
        if phase is not None:
            at_risk = phase * self.rate
            lost_work = at_risk if lost_work is None else min(lost_work, at_risk)
        if lost_work is not None and not self.stuck:
            lost = lost_work * self.gang_gpus  # work at any size costs the gang minimum's GPU time
            self.wasted_gpu_seconds += lost
            self.useful_gpu_seconds -= lost
            self.work_lost_gpu_seconds += lost
            self.done -= lost_work
        self.stuck = False
        self.warmup_left = 0.0

    def busy_phase(self, t: float | None) -> float | None:
        """Seconds into the current busy phase at ``t`` (0 while idle); None without declared phases."""
        if self.activity is None or t is None or self.job is None or self.job.last_start is None:
            return None
        busy, idle = self.activity
        pos = (t - self.job.last_start) % (busy + idle) if busy + idle > 0 else 0.0
        return pos if pos < busy else 0.0

    def restart_in_place(self, t: float, checkpoint_interval: float) -> None:
        """A Ray-unaware eviction of pods the run needed: Ray sees workers die, and the job restarts from its last
        checkpoint on the pods it still has, paying its restart cost (it stays Running for the scheduler)."""
        self.preemptions += 1
        self.preempted_at.append(t)
        self.lose_work(checkpoint_interval, t)
        self.restarts += 1
        self.warmup_left = self.restart_cost


@dataclass(frozen=True)
class Gang:
    """A gang minimum: the PodGroup's minMember, minSubGroup and subgroups."""

    min_member: int
    min_subgroup: int | None
    subgroups: list[SubGroup]


def fresh_pod(template: Pod, name: str, t: float) -> Pod:
    """A new pod from ``template`` named ``name``, created at ``t`` (pending, unbound, its claims its own)."""
    return dataclasses.replace(
        template,
        uid=f"{template.namespace}/{name}",
        name=name,
        phase=PodPhase.PENDING,
        node=None,
        gpu_group=None,
        start_time=None,
        created_at=t,
        claims=tuple(k if "/" in k else f"{template.namespace}/{name}-{k}" for k in template.claims),
    )


@dataclass(eq=False)
class PodWorkload(WorkloadBase):
    """One pod as its own gang (trace replay): no podgrouper, the scheduler Job is built directly."""

    template: Pod | None = None
    priority: int = 50
    generation: int = 0

    def create(self, t: float) -> Job:
        tpl = self.template
        assert tpl is not None
        ns, name = self.key.split("/", 1)
        job = Job(
            namespace=ns,
            name=name,
            queue=self.queue,
            priority=self.priority,
            priority_class=self.priority_class,
            min_member=1,
            max_member=1,
            created_at=t,
            kind="Pod",
            pods=[fresh_pod(tpl, tpl.name, t)],
        )
        self.gang_gpus = tpl.request.gpu
        self.job = job
        return job

    def replace_evicted(self, t: float, evicted: list[tuple[Pod, bool]]) -> None:
        assert self.job is not None and self.template is not None
        if not any(p.phase in (PodPhase.PENDING, PodPhase.RUNNING) for p in self.job.pods):
            self.generation += 1
            self.job.pods.append(fresh_pod(self.template, f"{self.template.name}-r{self.generation}", t))

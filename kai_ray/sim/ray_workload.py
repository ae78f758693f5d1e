"""A Ray workload in the simulated world: a RayCluster, RayJob or RayService whose gang the real podgrouper
decides and whose pods the simulator plays KubeRay for.

Why apart from :mod:`.workloads`: it parses Ray manifests with :mod:`kai_ray.api` (pydantic) and evaluates DRA
claim templates (CEL), which a trace replay of plain pods never needs; the engine asks a workload through
:class:`~kai_ray.sim.workloads.WorkloadBase`'s hooks, so a replay does not import either.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from kai_ray import constants as c
from kai_ray.api.meta import Pod as ApiPod
from kai_ray.api.ray import RayCluster, RayJob, RayObject, RayService
from kai_ray.bridge import job_from_podgroup, pod_from_api
from kai_ray.bridge_dra import DraCatalog, template_pod_claims
from kai_ray.podgrouper import PodgrouperConfig, cluster_name, expand_pods, group, stamp
from kai_ray.scheduler.device_ledger import DeviceRequest
from kai_ray.scheduler.snapshot import Job, Pod, PodPhase, Resources
from kai_ray.sim.workloads import RUNNING, Gang, WorkloadBase, fresh_pod


@dataclass(eq=False)
class RayWorkload(WorkloadBase):
    """A RayCluster, RayJob or RayService: the podgrouper decides its gang, KubeRay its pods."""

    obj: RayObject | None = None
    pg_config: PodgrouperConfig = field(default_factory=PodgrouperConfig)
    priority_classes: dict[str, int] = field(default_factory=lambda: dict(c.PRIORITY_CLASSES))
    podgroup_name: str = ""
    problems: list[str] = field(default_factory=list)
    _templates: dict[str, Pod] = field(default_factory=dict)  # ray.io/group -> a pod to clone
    _desired: dict[str, int] = field(default_factory=dict)  # ray.io/group -> pods KubeRay keeps
    _max: dict[str, int] = field(default_factory=dict)  # ray.io/group -> pods ceiling (maxReplicas x hosts)
    _hosts: dict[str, int] = field(default_factory=dict)
    _counter: dict[str, int] = field(default_factory=dict)
    _pod_group: dict[str, str] = field(default_factory=dict)  # pod name -> ray.io/group
    _min_workers: int = 0
    _aggressive: bool = False
    scripted: bool = False  # scale steps come from the scenario; the simple autoscaler policy stays out
    gang_scheduling: bool = True  # False: the scheduler is shown each pod as its own gang of one (head first)
    _gang: Gang | None = None  # the real gang minimum, kept when the scheduler is shown another
    dra: DraCatalog | None = None  # DRA devices and claim templates of the scenario
    _claim_requests: dict[str, dict[str, tuple[DeviceRequest, ...]]] = field(default_factory=dict)  # group -> claim

    @property
    def user_suspended(self) -> bool:
        """Suspended by its author (``spec.suspend: true``): it arrives and stays suspended, as on a cluster."""
        return self.obj is not None and not isinstance(self.obj, RayService) and self.obj.spec.suspend is True

    def _spec(self):  # type: ignore[no-untyped-def]
        obj = self.obj
        assert obj is not None
        if isinstance(obj, RayCluster):
            return obj.spec
        if isinstance(obj, RayJob):
            return obj.spec.ray_cluster_spec
        return obj.spec.ray_cluster_config

    @property
    def autoscaling(self) -> bool:
        spec = self._spec()
        return bool(spec is not None and spec.enable_in_tree_autoscaling)

    def _api_templates(self) -> list[ApiPod]:
        """One pod per group (and the head, and the submitter), as KubeRay would create them."""
        obj = self.obj
        assert obj is not None
        probe = obj.model_copy(deep=True)
        spec = (
            probe.spec.ray_cluster_spec
            if isinstance(probe, RayJob)
            else (probe.spec if isinstance(probe, RayCluster) else probe.spec.ray_cluster_config)
        )
        assert spec is not None
        for wg in spec.worker_group_specs:
            wg.replicas, wg.min_replicas, wg.max_replicas, wg.suspend = 1, 1, 1, False
            wg.num_of_hosts = 1
        return expand_pods(probe, config=self.pg_config)

    def _regroup(self) -> None:
        """The podgrouper after a spec change: recompute the PodGroup, keep the pods."""
        obj = self.obj
        assert obj is not None and self.job is not None
        pg = group(obj, config=self.pg_config)
        fresh = job_from_podgroup(pg, [], self.priority_classes, self.problems)
        for f in (
            "min_member",
            "min_subgroup",
            "subgroups",
            "max_member",
            "topology",
            "priority",
            "preemptibility",
            "preemptibility_derived",
        ):
            setattr(self.job, f, getattr(fresh, f))
        self._gang = Gang(fresh.min_member, fresh.min_subgroup, fresh.subgroups)
        if not self.gang_scheduling:
            self.job.min_member, self.job.min_subgroup = 1, None
            self.job.subgroups = [
                dataclasses.replace(sg, min_member=int(sg.name == c.RAY_HEAD_GROUP))
                if sg.min_member is not None
                else sg
                for sg in fresh.subgroups
            ]
        self._min_workers = sum(
            sg.min_member or 0 for sg in fresh.subgroups if sg.name not in (c.RAY_HEAD_GROUP, c.SUBMITTER_SUBGROUP)
        )

    def gang(self) -> Gang:
        return self._gang if self._gang is not None else super().gang()

    def create(self, t: float) -> Job:
        obj = self.obj
        assert obj is not None
        pg = group(obj, config=self.pg_config)
        self.podgroup_name = pg.metadata.name or ""
        job = job_from_podgroup(pg, [], self.priority_classes, self.problems)
        job.created_at = t
        job.kind = obj.kind
        self.queue, self.priority_class = job.queue, job.priority_class
        self.job = job
        spec = self._spec()
        assert spec is not None
        self._aggressive = bool(
            spec.autoscaler_options is not None and (spec.autoscaler_options.upscaling_mode or "") == "Aggressive"
        )
        for api_pod in self._api_templates():
            labels = api_pod.metadata.labels
            grp = labels.get(c.RAY_GROUP, "")
            st = stamp(api_pod, pg)
            api_pod.metadata.annotations.update(st.annotations)
            labels.update(st.labels)
            tpl = self._templates[grp] = pod_from_api(api_pod, job.key, self.problems)
            if self.dra is not None:
                entries, self._claim_requests[grp], gpus = template_pod_claims(api_pod, self.dra)
                tpl.claims = entries
                tpl.request = tpl.request + Resources(gpu=gpus)
        self._desired = {c.RAY_HEAD_GROUP: 1}
        if c.RAY_SUBMITTER_GROUP in self._templates:
            self._desired[c.RAY_SUBMITTER_GROUP] = 1
        for i, wg in enumerate(spec.worker_group_specs):
            name = wg.group_name or f"worker-group-{i}"
            self._hosts[name] = wg.hosts
            self._desired[name] = wg.desired_replicas() * wg.hosts
            self._max[name] = (wg.max * wg.hosts) if self.autoscaling else self._desired[name]
        self._regroup()
        job.pods = []
        self._reconcile(t)
        self.gang_gpus = self._gang_gpus()
        return job

    def _gang_gpus(self) -> float:
        mins = {sg.name: sg.min_member or 0 for sg in self.gang().subgroups}
        total = 0.0
        for _grp, tpl in self._templates.items():
            sg = tpl.subgroup
            if sg is None:
                continue
            total += tpl.request.gpu * mins.get(sg, 0)
        return total

    def _pod_name(self, grp: str) -> str:
        assert self.obj is not None
        cname = cluster_name(self.obj)
        if grp == c.RAY_HEAD_GROUP:
            base = f"{cname}-head"
        elif grp == c.RAY_SUBMITTER_GROUP:
            base = f"{self.obj.metadata.name}-submitter"
        else:
            base = f"{cname}-{grp.lower().replace('_', '-')}-worker"
        k = self._counter.get(grp, 0)
        self._counter[grp] = k + 1
        if grp in (c.RAY_HEAD_GROUP, c.RAY_SUBMITTER_GROUP):
            return base if k == 0 else f"{base}-{k}"
        return f"{base}-{k}"

    def _reconcile(self, t: float) -> list[Pod]:
        """KubeRay: create the missing pods of each group; returns pending pods dropped on a scale-down."""
        job = self.job
        assert job is not None
        live: dict[str, list[Pod]] = {}
        for p in job.pods:
            if p.phase in (PodPhase.PENDING, PodPhase.RUNNING):
                live.setdefault(self._group_of(p), []).append(p)
        dropped: list[Pod] = []
        for grp, want in self._desired.items():
            have = live.get(grp, [])
            tpl = self._templates.get(grp)
            if tpl is None:
                continue
            for _ in range(want - len(have)):
                name = self._pod_name(grp)
                self._pod_group[name] = grp
                job.pods.append(fresh_pod(tpl, name, t))
            if len(have) > want:
                extra = sorted(have, key=lambda p: (p.phase is PodPhase.RUNNING, -p.created_at))[: len(have) - want]
                for p in extra:
                    if p.phase is PodPhase.PENDING:
                        job.pods.remove(p)
                        dropped.append(p)
        return dropped

    def claim_requests(self, pod: Pod) -> dict[str, tuple[DeviceRequest, ...]]:
        """The requests of each claim made for ``pod`` from its group's templates, by claim key."""
        per = self._claim_requests.get(self._group_of(pod), {})
        prefix = f"{pod.namespace}/{pod.name}-"
        return {k: per[k[len(prefix) :]] for k in pod.claims if k.startswith(prefix) and k[len(prefix) :] in per}

    def _group_of(self, pod: Pod) -> str:
        return self._pod_group.get(pod.name, "")

    def _set_replicas(self, grp: str, pods: int) -> None:
        spec = self._spec()
        assert spec is not None
        for i, wg in enumerate(spec.worker_group_specs):
            if (wg.group_name or f"worker-group-{i}") == grp:
                wg.replicas = pods // max(wg.hosts, 1)
        self._desired[grp] = pods
        self._regroup()

    def replace_evicted(self, t: float, evicted: list[tuple[Pod, bool]]) -> None:
        """Ray-aware shrink: an elastic worker evicted from an autoscaling group lowers that group's replicas
        (kai-ray tells Ray which worker to drop); anything else is recreated by KubeRay and waits to be scheduled."""
        if self.autoscaling:
            for pod, elastic in evicted:
                grp = self._group_of(pod)
                if elastic and grp in self._max:
                    floor = self._floor(grp)
                    self._set_replicas(grp, max(floor, self._desired[grp] - 1))
        self._reconcile(t)

    def _floor(self, grp: str) -> int:
        tpl = self._templates[grp]
        for sg in self.gang().subgroups:
            if sg.name == tpl.subgroup:
                return sg.min_member or 0
        return 0

    def worker_rate(self) -> float:
        """Linear scaling: workers running / workers in the gang minimum (1 when the minimum has no workers)."""
        if self._min_workers <= 0:
            return 1.0
        assert self.job is not None
        workers = sum(
            1
            for p in self.job.pods
            if p.phase is PodPhase.RUNNING and p.subgroup not in (None, c.RAY_HEAD_GROUP, c.SUBMITTER_SUBGROUP)
        )
        return max(1.0, workers / self._min_workers)

    def autoscale(self, t: float) -> bool:
        """The Ray autoscaler, simplified: while every pod of the job runs, add one replica to each worker group
        below maxReplicas (all the way up in ``Aggressive`` mode), never beyond the kai-ray.io/max-member ceiling."""
        if not self.autoscaling or self.scripted or self.state != RUNNING or self.job is None:
            return False
        if any(p.phase is PodPhase.PENDING for p in self.job.pods):
            return False
        added = False
        ceiling = self.job.max_member if self.job.max_member is not None else 1 << 30
        for grp, mx in self._max.items():
            cur = self._desired[grp]
            if cur >= mx:
                continue
            step = (mx - cur) if self._aggressive else self._hosts.get(grp, 1)
            room = ceiling - sum(self._desired.values())
            step = min(step, room, mx - cur)
            if step <= 0:
                continue
            self._set_replicas(grp, cur + step)
            added = True
        if added:
            self._reconcile(t)
        return added

    def scale_to(self, t: float, grp: str, replicas: int) -> list[Pod]:
        """A scripted scale step (Ray Serve / the Ray autoscaler deciding): set the group's replicas and let
        KubeRay create or delete pods. Returns the running pods it deleted (newest first, as idle workers go)."""
        spec = self._spec()
        assert spec is not None
        if self.job is None:
            for i, wg in enumerate(spec.worker_group_specs):
                if (wg.group_name or f"worker-group-{i}") == grp:
                    wg.replicas = replicas
            return []
        if grp not in self._desired:
            return []
        hosts = self._hosts.get(grp, 1)
        self._set_replicas(grp, replicas * hosts)
        want = self._desired[grp]
        mine = [
            p for p in self.job.pods if self._group_of(p) == grp and p.phase in (PodPhase.PENDING, PodPhase.RUNNING)
        ]
        removed: list[Pod] = []
        if len(mine) > want:
            order = sorted(mine, key=lambda p: (p.phase is PodPhase.RUNNING, -p.created_at, p.name))
            for p in order[: len(mine) - want]:
                self.job.pods.remove(p)
                if p.phase is PodPhase.RUNNING:
                    removed.append(p)
        self._reconcile(t)
        return removed

    def gang_summary(self) -> list[dict[str, object]]:
        """Per pod group (head, each worker group, submitter): pods at the gang minimum and at most, GPUs per pod."""
        out: list[dict[str, object]] = []
        if self.job is None:
            return out
        mins = {sg.name: sg.min_member or 0 for sg in self.gang().subgroups}
        for grp, tpl in self._templates.items():
            if grp == c.RAY_HEAD_GROUP:
                lo, hi = 1, 1
            elif grp == c.RAY_SUBMITTER_GROUP:
                lo, hi = 0, 1
            else:
                lo, hi = mins.get(tpl.subgroup or "", 0), self._max.get(grp, 0)
            out.append({"group": grp, "min_pods": lo, "max_pods": hi, "gpus_per_pod": tpl.request.gpu})
        return out

    def wants_more(self) -> bool:
        if not self.autoscaling or self.scripted:
            return False
        return any(self._desired[g] < m for g, m in self._max.items())

"""Computing the headroom the scheduler publishes, with the scheduler core itself.

Why a what-if through the real core instead of a formula: "how many more pods would this gang get now" depends on
everything the core weighs (queue quota, limits, fair share against competing queues, priorities, node fit, topology,
reclaim). So we add probe pods to the job's subgroups, run one cycle and count what the core places. Probes of every
requested job go into the same cycle: the answer is jointly feasible, so autoscalers scaling up at the same time
never together ask for more than fits.

Pure and deterministic like the core: snapshot in, numbers out; the input snapshot is not modified.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from kai_ray import constants as c
from kai_ray.headroom.contract import SubgroupHeadroom
from kai_ray.scheduler import device_ledger
from kai_ray.scheduler import snapshot as s
from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.decisions import CycleResult

PROBE_MARK = "kai-ray-probe"
COUNTED = (s.PodPhase.PENDING, s.PodPhase.RUNNING)
# Actions that decide whether a new pod of the job gets in; consolidation and stale-gang eviction do not.
DEFAULT_ACTIONS = ("allocate", "reclaim", "preempt")
SKIPPED_SUBGROUPS = (c.RAY_HEAD_GROUP, c.SUBMITTER_SUBGROUP)


def _elastic_subgroups(job: s.Job) -> list[s.SubGroup]:
    parents = {sg.parent for sg in job.subgroups if sg.parent}
    return [sg for sg in job.subgroups if sg.name not in SKIPPED_SUBGROUPS and sg.name not in parents]


def autoscaling_jobs(snapshot: s.Snapshot) -> list[str]:
    """Jobs with a worker subgroup that may still grow (fewer counted pods than its max)."""
    out = []
    for job in snapshot.jobs:
        for sg in _elastic_subgroups(job):
            n = sum(1 for p in job.pods if p.subgroup == sg.name and p.phase in COUNTED)
            if sg.max_member is not None and sg.max_member > n:
                out.append(job.key)
                break
    return out


def compute_headroom(
    snapshot: s.Snapshot,
    jobs: Iterable[str] | None = None,
    *,
    templates: Mapping[str, Mapping[str, s.Pod]] | None = None,
    probe_limit: int = 32,
    actions: tuple[str, ...] | None = None,
) -> dict[str, dict[str, SubgroupHeadroom]]:
    """Per job key, per worker subgroup: pods counted now and how many more the core would place now.

    ``jobs`` defaults to :func:`autoscaling_jobs`. A probe is a copy of one of the subgroup's pods, or of
    ``templates[job][subgroup]`` when the subgroup has none (scaled to zero: pass the pod KubeRay would create, e.g.
    from ``podgrouper.expand_pods``); a subgroup with neither gets headroom 0. At most ``min(max - pods,
    probe_limit)`` probes per subgroup. ``actions`` defaults to allocate, reclaim and preempt (those of the snapshot's
    config that are among them): room the job would win by reclaiming from over-quota queues counts, because the
    scheduler would really do it for a pending pod.
    """
    wanted = list(autoscaling_jobs(snapshot) if jobs is None else jobs)
    by_key = {j.key: j for j in snapshot.jobs}
    missing = [k for k in wanted if k not in by_key]
    if missing:
        raise KeyError(f"jobs not in the snapshot: {', '.join(missing)}")
    templates = templates or {}
    claims = {cl.key: cl for cl in snapshot.claims}
    new_claims: list[device_ledger.Claim] = []
    counted: dict[str, dict[str, int]] = {}
    probes: dict[str, dict[str, list[str]]] = {}
    new_jobs: list[s.Job] = []
    for job in snapshot.jobs:
        if job.key not in wanted:
            new_jobs.append(job)
            continue
        extra: list[s.Pod] = []
        counted[job.key] = {}
        probes[job.key] = {}
        for sg in _elastic_subgroups(job):
            mine = [p for p in job.pods if p.subgroup == sg.name]
            n = sum(1 for p in mine if p.phase in COUNTED)
            counted[job.key][sg.name] = n
            ceiling = sg.max_member if sg.max_member is not None else n + probe_limit
            if job.max_member is not None:
                ceiling = min(ceiling, n + max(0, job.max_member - sum(1 for p in job.pods if p.phase in COUNTED)))
            want = max(0, min(ceiling - n, probe_limit))
            template = next((p for p in mine if not p.is_ray_head), None) or templates.get(job.key, {}).get(sg.name)
            if want == 0 or template is None:
                probes[job.key][sg.name] = []
                continue
            names = []
            for i in range(want):
                uid = f"{job.key}/{PROBE_MARK}/{sg.name}/{i}"
                names.append(uid)
                extra.append(
                    dataclasses.replace(
                        template,
                        uid=uid,
                        name=f"{PROBE_MARK}-{sg.name}-{i}",
                        job=job.key,
                        subgroup=sg.name,
                        phase=s.PodPhase.PENDING,
                        node=None,
                        gpu_group=None,
                        start_time=None,
                        gated=False,
                        created_at=snapshot.now + 1e9 + i,  # after every real pending pod of the subgroup
                        claims=_probe_claims(template.claims, uid, claims, new_claims),
                    )
                )
            probes[job.key][sg.name] = names
        new_jobs.append(dataclasses.replace(job, pods=list(job.pods) + extra))
    run = tuple(a for a in DEFAULT_ACTIONS if a in snapshot.config.actions) if actions is None else tuple(actions)
    config = dataclasses.replace(snapshot.config, actions=run)
    probe_snapshot = dataclasses.replace(snapshot, jobs=new_jobs, config=config)
    if new_claims:
        probe_snapshot.claims = list(snapshot.claims) + new_claims
    result = run_cycle(probe_snapshot)
    return _count(snapshot, result, counted, wanted)


def _probe_claims(
    keys: tuple[str, ...], uid: str, claims: Mapping[str, device_ledger.Claim], out: list[device_ledger.Claim]
) -> tuple[str, ...]:
    """A probe pod's claims: a fresh, unallocated copy of each claim made for one pod (KubeRay's pod would get its
    own claim from the template); a shared claim stays shared."""
    mine = []
    for key in keys:
        claim = claims.get(key)
        if claim is None or claim.shared:
            mine.append(key)
            continue
        fresh = f"{uid}/{key}"
        out.append(device_ledger.Claim(key=fresh, requests=claim.requests))
        mine.append(fresh)
    return tuple(mine)


def _count(
    snapshot: s.Snapshot, result: CycleResult, counted: dict[str, dict[str, int]], wanted: list[str]
) -> dict[str, dict[str, SubgroupHeadroom]]:
    bound = {b.pod for b in result.binds}
    evicted = {e.pod for e in result.evictions}
    by_key = {j.key: j for j in snapshot.jobs}
    out: dict[str, dict[str, SubgroupHeadroom]] = {}
    for key in wanted:
        job = by_key[key]
        out[key] = {}
        for sg, n in counted[key].items():
            placed = sum(
                1
                for p in job.pods
                if p.subgroup == sg
                and (
                    (p.phase is s.PodPhase.RUNNING and p.uid not in evicted)
                    or (p.phase is s.PodPhase.PENDING and p.uid in bound)
                )
            )
            prefix = f"{key}/{PROBE_MARK}/{sg}/"
            placed += sum(1 for uid in bound if uid.startswith(prefix))
            out[key][sg] = SubgroupHeadroom(n, placed - n)
    return out


def admits(
    snapshot: s.Snapshot,
    job_key: str,
    pods: list[s.Pod],
    *,
    actions: tuple[str, ...] | None = None,
) -> bool:
    """Would the core schedule this gang now if ``pods`` existed? For lifting a suspend: a suspended RayJob has no
    pods, so the caller passes the ones KubeRay would create (``podgrouper.expand_pods`` through the bridge) and
    calls :func:`kai_ray.k8s.ray.elastic.apply_resume` only when the answer is yes, so a resumed job does not sit
    Pending. ``actions`` defaults as in :func:`compute_headroom`."""
    jobs = []
    found = False
    for job in snapshot.jobs:
        if job.key == job_key:
            found = True
            extra = [dataclasses.replace(p, job=job_key, phase=s.PodPhase.PENDING, node=None) for p in pods]
            job = dataclasses.replace(job, pods=list(job.pods) + extra)
        jobs.append(job)
    if not found:
        raise KeyError(f"job not in the snapshot: {job_key}")
    run = tuple(a for a in DEFAULT_ACTIONS if a in snapshot.config.actions) if actions is None else tuple(actions)
    result = run_cycle(
        dataclasses.replace(snapshot, jobs=jobs, config=dataclasses.replace(snapshot.config, actions=run))
    )
    status = result.jobs.get(job_key)
    return bool(status is not None and status.scheduled)

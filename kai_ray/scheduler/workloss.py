"""Work a victim would lose: kai-ray's victim order among otherwise equal Ray workloads.

KAI, and every peer, orders victims by priority, elasticity and age: two equal-priority Ray workloads are told
apart by which was created last, although Ray knows one of them has been idle for an hour and the other checkpointed
a minute ago. The operators put what Ray knows into the snapshot (``Pod.ray_activity`` from the GCS autoscaler
state, ``RayNativeFacts.last_checkpoint`` from ``kai-ray.io/last-checkpoint-time``), and this module turns it into
one number per job and per pod: the work an eviction would lose, in GPU-seconds.

The time at risk is weighted by what the victim holds (:func:`weight`): its GPUs, so that 10 minutes lost on 8 GPUs
counts as much as 80 minutes on 1 GPU; a pod without GPUs counts its CPU cores at :data:`CORE_WEIGHT` of a GPU each,
so CPU-only work is still told apart by time and cores, and always weighs less than GPU work of similar length.
Time at risk:

* idle in Ray (every active pod's Ray node idle, fresh answer): nothing is lost, 0;
* busy since a known instant: at most the work since then;
* a checkpoint at a known instant: at most the work since then (or since the run started, if later);
* a job with no such fact, beside jobs with one: everything since its run started (what a run without
  checkpoints loses).

The victims queue and the node-local scenarios use it after priority and elastic state and before age, so it only
ever chooses among victims that KAI considers equal. When no job has a fact (Ray unreachable, answers stale, or the
features off in ``SchedulerConfig``), every risk stays 0 and the order is exactly KAI's. Elastic workers of one job
are ordered the same way (``tasks.evict_key``): idle Ray nodes leave first, then those busy for the shortest time.
"""

from __future__ import annotations

from collections.abc import Iterable

from kai_ray.durations import span
from kai_ray.scheduler.session import ACTIVE, JobInfo, Session

CORE_WEIGHT = 0.01  # a CPU core of a pod without GPUs weighs as 1/100 of a GPU


def weight(ses: Session, pods: Iterable[int]) -> float:
    """GPU-equivalents the pods hold: their GPUs (fractions as fractions), a GPU-less pod its cores x CORE_WEIGHT."""
    total = 0.0
    for p in pods:
        req = ses.pods[p].request
        total += req.gpu if req.gpu > 0 else req.cpu / 1000.0 * CORE_WEIGHT
    return total


def _held(w: float) -> str:
    if w == 1:
        return "1 GPU"
    return f"{w:g} GPUs" if w > 1 or w == 0 else f"{w:.3g} GPU-equivalents"


def assess(ses: Session) -> None:
    """Fill ``JobInfo.risk``/``risk_note`` and ``Session.p_risk``/``p_risk_note`` (GPU-seconds) from the snapshot's
    facts."""
    cfg = ses.cfg
    idle_on, ckpt_on = cfg.idle_aware_victims, cfg.checkpoint_aware_victims
    if not (idle_on or ckpt_on):
        return
    if not any(job.spec.raynative is not None for job in ses.jobs) and not any(
        p.ray_activity is not None for p in ses.pods
    ):
        return  # nothing to assess from: every job would be unknown, and unknowns alone change nothing
    now, st = ses.now, ses.p_status
    known: list[tuple[JobInfo, float, float, str]] = []  # job, seconds at risk, weight, why
    unknown: list[tuple[JobInfo, float, float]] = []
    for job in ses.jobs:
        active = [p for p in job.pods if st[p] in ACTIVE]
        if not active:
            continue
        start = _run_start(ses, job, active)
        bounds: list[tuple[float, str]] = []
        if idle_on:
            bounds.extend(_activity_bound(ses, job, active, start))
        facts = job.spec.raynative
        if ckpt_on and facts is not None and facts.last_checkpoint is not None and facts.last_checkpoint <= now:
            since = max(facts.last_checkpoint, start)
            bounds.append((now - since, f"last checkpoint {span(now - facts.last_checkpoint)} ago"))
        w = weight(ses, active)
        if bounds:
            risk, note = min(bounds, key=lambda b: b[0])
            known.append((job, max(0.0, risk), w, note))
        else:
            unknown.append((job, max(0.0, now - start), w))
    if not known:
        return
    for job, risk, w, note in known:
        job.risk, job.risk_note = risk * w, f"{note}, on {_held(w)}"
    for job, risk, w in unknown:
        job.risk = risk * w
        job.risk_note = f"no Ray activity or checkpoint known; running {span(risk)} on {_held(w)}"


def _run_start(ses: Session, job: JobInfo, active: list[int]) -> float:
    if job.spec.last_start is not None:
        return job.spec.last_start
    return min(ses.p_start[p] for p in active)


def _activity_bound(ses: Session, job: JobInfo, active: list[int], start: float) -> list[tuple[float, str]]:
    """The job's bound from Ray activity (all active pods fresh), and each pod's own order among its siblings."""
    now, max_age = ses.now, ses.cfg.ray_activity_max_age
    fresh: dict[int, float] = {}
    notes: dict[int, str] = {}
    idle_for: list[float] = []
    busy_from: list[float] = []
    all_busy_known = True
    for p in active:
        act = ses.pods[p].ray_activity
        if act is None or now - act.observed_at > max_age or act.observed_at > now:
            continue
        if act.idle_seconds > 0:
            fresh[p] = 0.0
            notes[p] = f"idle in Ray for {span(act.idle_seconds)}"
            idle_for.append(act.idle_seconds)
        elif act.busy_since is not None:
            since = max(act.busy_since, ses.p_start[p])
            fresh[p] = max(0.0, now - since)
            notes[p] = f"busy in Ray for {span(now - since)}"
            busy_from.append(since)
        else:
            fresh[p] = max(0.0, now - ses.p_start[p])
            notes[p] = "busy in Ray"
            all_busy_known = False
    if not fresh:
        return []
    for p in active:  # siblings without a fresh answer are taken as busy since they started
        ses.p_risk[p] = fresh.get(p, max(0.0, now - ses.p_start[p])) * weight(ses, (p,))
        ses.p_risk_note[p] = notes.get(p, "no fresh Ray answer")
    if len(fresh) < len(active):
        return []
    if len(idle_for) == len(active):
        return [(0.0, f"idle in Ray for {span(min(idle_for))}")]
    if busy_from and all_busy_known:
        since = max(min(busy_from), start)
        return [(now - since, f"busy in Ray for {span(now - since)}")]
    return []

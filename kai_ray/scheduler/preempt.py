"""The preempt action: a pending job takes room from strictly lower-priority preemptible jobs of its own queue.

KAI's rules (``actions/preempt``): victims share the preemptor's leaf queue, are preemptible, have strictly lower
priority, are running and past the queue's preempt min-runtime (else only their elastic surplus may go). A
non-preemptible preemptor must also fit its queue's quota. Jobs still inside their preemption delay do not evict.
The victims themselves are found by the scenario search in :mod:`solver`.
"""

from __future__ import annotations

from kai_ray.scheduler.allocation import capacity_failure
from kai_ray.scheduler.decisions import Action, Reason
from kai_ray.scheduler.minruntime import preempt_min_runtime, protected
from kai_ray.scheduler.pending import record_eviction_failure, search_for_pending
from kai_ray.scheduler.session import JobInfo, Session
from kai_ray.scheduler.solver import JobSolver, victim_jobs
from kai_ray.scheduler.tasks import tasks_to_allocate


def preempt_action(ses: Session) -> None:
    by_queue: dict[int, list[JobInfo]] = {}
    for v in ses.jobs:
        if v.preemptible and v.n_active > 0 and v.invalid is None and v.queue >= 0:
            by_queue.setdefault(v.queue, []).append(v)
    search_for_pending(
        ses,
        Action.PREEMPT,
        lambda job, budget: preempt_for(ses, job, by_queue.get(job.queue, []), budget),
        nothing_found="no victims",
        per_queue=True,
    )


def preempt_for(
    ses: Session, job: JobInfo, candidates: list[JobInfo] | None = None, budget: list[int] | None = None
) -> bool:
    tasks = tasks_to_allocate(ses, job)
    if not tasks:
        return False
    if not job.preemptible or job.semi:  # a semi-preemptible job's core must fit its quota too
        fail = capacity_failure(ses, job, tasks)
        if fail is not None and fail.reason is Reason.NON_PREEMPTIBLE_OVER_QUOTA:
            job.fail(fail.reason, fail.message, fail.details)
            return False
    victims: list[JobInfo] = []
    surplus_only: set[int] = set()
    for v in ses.jobs if candidates is None else candidates:
        if v.queue != job.queue or v.idx == job.idx or not v.preemptible or v.priority >= job.priority:
            continue
        if v.n_active == 0 or v.invalid is not None:
            continue
        if protected(ses, v, preempt_min_runtime(ses, v)):
            surplus_only.add(v.idx)
        victims.append(v)
    solver = JobSolver(
        ses, job, victim_jobs(ses, victims, surplus_only), Action.PREEMPT, Reason.PREEMPTED, budget=budget
    )
    if solver.solve():
        job.fail_reason = None
        return True
    record_eviction_failure(
        job,
        "preempt",
        f"no lower-priority preemptible victims in queue that make room ({solver.failure})"
        if victims
        else "no lower-priority preemptible jobs in its queue",
    )
    return False

"""The statement: every change of a session goes through it, with an undo record, so what-ifs are cheap.

Why one shared operation log instead of copying state: KAI's actions try many hypotheses (place this gang; evict
these victims and place it; ...). Every mutation goes through :meth:`Statement.allocate`, :meth:`Statement.evict`,
:meth:`Statement.move` or :meth:`Statement.unevict`, appends a typed undo record (:class:`Allocated`,
:class:`Evicted`, :class:`Moved`, :class:`Unevicted`) and updates the session's node, GPU-group, queue and gang
counters in place (its accounting). A checkpoint is the log length; rollback undoes records back to it. So a failed
hypothesis costs exactly the work it did, and the final decisions are the difference between the initial and final
pod states (KAI's ``statement.go``, with the session's ``Statement()`` kept for the whole cycle).
"""

from __future__ import annotations

from dataclasses import dataclass

from kai_ray.scheduler.device_ledger import Taken
from kai_ray.scheduler.session import (
    ALLOCATED,
    EVICTED,
    MOVED,
    PENDING,
    PIPELINED,
    EvictInfo,
    JobInfo,
    Session,
)


@dataclass(slots=True)
class Allocated:
    """Undo record of :meth:`Statement.allocate`: ``pod`` was pending and asked for ``prev_req``."""

    pod: int
    created: bool  # a shared GPU was opened for it
    prev_req: tuple[float, float, float]
    dra: Taken | None = None  # DRA devices it took (claims it allocated)


@dataclass(slots=True)
class Evicted:
    """Undo record of :meth:`Statement.evict`: ``pod``'s status and eviction record before."""

    pod: int
    prev_status: int
    prev_info: EvictInfo | None


@dataclass(slots=True)
class Moved:
    """Undo record of :meth:`Statement.move`: room held on ``node`` (and shared GPU ``group``) for the pod's copy."""

    pod: int
    node: int
    group: str | None
    created: bool


@dataclass(slots=True)
class Unevicted:
    """Undo record of :meth:`Statement.unevict`: the eviction record it cancelled."""

    pod: int
    info: EvictInfo


Op = Allocated | Evicted | Moved | Unevicted  # slotted dataclasses: half the cost of a NamedTuple per record


class Statement:
    """The operations of one session's cycle and their undo log (KAI's statement, kept for the whole cycle: a
    checkpoint marks where a hypothesis starts, rollback discards it, and what stays is committed)."""

    __slots__ = ("log", "ses")

    def __init__(self, ses: Session) -> None:
        self.ses = ses
        self.log: list[Op] = []

    def checkpoint(self) -> int:
        return len(self.log)

    def rollback(self, cp: int) -> None:
        log = self.log
        ses = self.ses
        jobs, p_job, p_status = ses.jobs, ses.p_job, ses.p_status
        while len(log) > cp:
            op = log.pop()
            p = op.pod
            job = jobs[p_job[p]]
            if isinstance(op, Unevicted):
                p_status[p] = EVICTED
                ses.release(p)
                ses.count_active(job, p, -1)
                ses.evict_info[p] = op.info
                ses.dra_use(p, -1)
            elif isinstance(op, Moved):
                ses.unhold(p, op.node, op.group, op.created)
                ses.count_active(job, p, -1)
                ses.dra_use(p, -1)
                p_status[p] = EVICTED
                del ses.p_moved[p]
            elif isinstance(op, Allocated):
                ses.vacate(p, op.created)
                ses.count_active(job, p, -1)
                if op.dra is not None and ses.dra is not None:
                    ses.dra.untake(op.dra)
                ses.p_req[p] = op.prev_req
                p_status[p] = PENDING
                job.n_pend += 1
            else:
                ses.release(p, -1.0)
                p_status[p] = op.prev_status
                ses.count_active(job, p, 1)
                ses.dra_use(p, 1)
                if op.prev_info is None:
                    ses.evict_info.pop(p, None)
                else:
                    ses.evict_info[p] = op.prev_info

    def allocate(self, p: int, node: int, pipelined: bool, group: str | None = None) -> None:
        ses = self.ses
        job = ses.jobs[ses.p_job[p]]
        prev_req = ses.p_req[p]
        if ses.p_gpumem[p]:
            f = min(1.0, ses.node_gpu_fraction(p, node))
            ses.p_req[p] = (f, prev_req[1], prev_req[2])
            ses.p_frac[p] = f
        _, created = ses.occupy(p, node, group)
        ses.count_active(job, p, 1)
        ses.p_status[p] = PIPELINED if pipelined else ALLOCATED
        job.n_pend -= 1
        claims = ses.pods[p].claims
        taken = ses.dra.take(claims, node, pipelined) if claims and ses.dra is not None else None
        self.log.append(Allocated(p, created, prev_req, taken))

    def evict(self, p: int, info: EvictInfo) -> None:
        ses = self.ses
        job = ses.jobs[ses.p_job[p]]
        prev = ses.p_status[p]
        ses.p_status[p] = EVICTED
        ses.release(p)
        ses.count_active(job, p, -1)
        ses.dra_use(p, -1)
        self.log.append(Evicted(p, prev, ses.evict_info.get(p)))
        ses.evict_info[p] = info

    def move(self, p: int, node: int, group: str | None) -> None:
        """Re-place evicted pod ``p`` on ``node`` (KAI's pipelined victim): its controller re-creates it, and the
        room for the copy is held now so later decisions of the cycle do not take it. The pod stays charged to its
        queue and counted in its gang, which keeps running."""
        ses = self.ses
        group, created = ses.hold(p, node, group)
        ses.count_active(ses.jobs[ses.p_job[p]], p, 1)
        ses.p_status[p] = MOVED
        ses.dra_use(p, 1)
        ses.p_moved[p] = (node, group)
        self.log.append(Moved(p, node, group, created))

    def unevict(self, p: int) -> None:
        """Cancel the eviction of ``p`` within the statement (KAI: a victim re-placed where it already runs)."""
        ses = self.ses
        job = ses.jobs[ses.p_job[p]]
        assert ses.p_status[p] == EVICTED
        info = ses.evict_info.pop(p)
        ses.release(p, -1.0)
        ses.p_status[p] = next(op.prev_status for op in reversed(self.log) if isinstance(op, Evicted) and op.pod == p)
        ses.count_active(job, p, 1)
        ses.dra_use(p, 1)
        self.log.append(Unevicted(p, info))

    def convert_to_pipelined(self, job: JobInfo, since: int) -> None:
        """KAI: once one task of a job is pipelined, all its tasks allocated in the statement are pipelined."""
        ses = self.ses
        st = ses.p_status
        p_job = ses.p_job
        for op in self.log[since:]:
            if isinstance(op, Allocated) and p_job[op.pod] == job.idx and st[op.pod] == ALLOCATED:
                st[op.pod] = PIPELINED

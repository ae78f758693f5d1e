"""Why each pending workload waits, as the core answered in a cycle; and which of them no later cycle can help.

Why apart: the report explains every wait from these answers (the reason, its message and the log of changes), and
the engine skips cycles for workloads the core found bigger than every eligible node ("hopeless": nodes never change
in the simulator, so only a change for someone else makes a new cycle worth running).
"""

from __future__ import annotations

from kai_ray.scheduler.decisions import CycleResult, Reason
from kai_ray.sim.workloads import PENDING, WorkloadBase


def note_pending_reasons(
    res: CycleResult,
    with_pending: dict[str, WorkloadBase],
    touched: dict[str, WorkloadBase],
    hopeless: set[str],
    t: float,
) -> None:
    """Record the cycle's answer on each workload with a pending pod, and update ``hopeless`` in place. ``touched``
    are the workloads the cycle bound or evicted pods of: one no longer pending has no pending reason."""
    for key, w in list(with_pending.items()):
        st = res.jobs.get(key)
        if st is None:
            continue
        if w.state == PENDING:
            if not st.scheduled:
                if not w.pending_log or w.pending_log[-1][1] != st.reason.value:
                    w.pending_log.append((t, st.reason.value, st.message))
                w.pending_reason = st.reason.value
                w.pending_message = st.message
                w.last_pending_reason = st.reason.value
            if st.reason is Reason.NEVER_FITS and not w.running_pods_any():
                hopeless.add(key)
            else:
                hopeless.discard(key)
        else:
            w.pending_reason = None
            w.pending_message = None
    for w in touched.values():
        if w.state != PENDING:
            w.pending_reason = None
            w.pending_message = None

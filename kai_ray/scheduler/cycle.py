"""``run_cycle``: one scheduling cycle, KAI's action order, decisions out.

The core never raises on bad input: validation problems become findings or pending reasons. An unexpected internal
error is also caught, so that one bad snapshot never crash-loops an operator; it is reported as a finding and the
cycle returns no decisions (a safe no-op).
"""

from __future__ import annotations

import gc
import time
import traceback

from kai_ray.scheduler.allocate import allocate_action
from kai_ray.scheduler.bounded import annotate, hold
from kai_ray.scheduler.consolidation import consolidation_action
from kai_ray.scheduler.decisions import CycleResult, Finding
from kai_ray.scheduler.incremental import IncrementalState
from kai_ray.scheduler.preempt import preempt_action
from kai_ray.scheduler.proportion import compute_fair_share
from kai_ray.scheduler.queue_admission import apply_ungates
from kai_ray.scheduler.reclaim import reclaim_action
from kai_ray.scheduler.results import build_result
from kai_ray.scheduler.session import Session
from kai_ray.scheduler.session_build import build_session
from kai_ray.scheduler.snapshot import Snapshot
from kai_ray.scheduler.stale import stale_gang_action
from kai_ray.scheduler.workloss import assess

ACTIONS = {
    "allocate": allocate_action,
    "consolidation": consolidation_action,
    "reclaim": reclaim_action,
    "preempt": preempt_action,
    "stalegangeviction": stale_gang_action,
}


def open_session(snapshot: Snapshot, state: IncrementalState | None = None) -> Session:
    ses = build_session(snapshot) if state is None else state.open(snapshot)
    assess(ses)
    hold(ses)
    compute_fair_share(ses)
    return ses


def run_cycle(snapshot: Snapshot, state: IncrementalState | None = None) -> CycleResult:
    """Decide binds and evictions for one snapshot. Deterministic: same snapshot => same result, with or without
    ``state`` (the incremental session an adapter keeps across cycles, told what changed since the last one)."""
    t0 = time.perf_counter()
    c0 = time.process_time()
    gc_was_enabled = gc.isenabled()
    gc.disable()  # the cycle allocates many short-lived objects; generation scans would dominate its time
    try:
        ses = open_session(snapshot, state)
        # one clock reading ends a step and starts the next: a CPU-clock reading is a system call (~2 us), and a
        # trace replay runs thousands of cycles of a millisecond each
        ta, ca = time.perf_counter(), time.process_time()
        ses.stats["open_seconds"] = ta - t0
        ses.stats["open_cpu_seconds"] = ca - c0
        for name in snapshot.config.actions:
            fn = ACTIONS.get(name)
            if fn is None:
                continue
            fn(ses)
            tb, cb = time.perf_counter(), time.process_time()
            ses.stats[f"{name}_seconds"] = tb - ta
            ses.stats[f"{name}_cpu_seconds"] = cb - ca
            ta, ca = tb, cb
        result = build_result(ses)
        annotate(ses, result)
        apply_ungates(ses, result, snapshot.config.reservation_ttl, snapshot.config.queue_admission_gating)
        # closed and dropped while the collector is still paused: what the session held is freed by reference
        # counting, not scanned by the young-generation collection the next allocation would trigger
        ses.close()
        del ses
    except Exception as exc:  # pragma: no cover - defensive: the core must not crash its caller
        result = CycleResult()
        result.findings.append(
            Finding("Cycle", "", "", f"internal error, no decisions made: {exc!r}\n{traceback.format_exc(limit=5)}")
        )
    finally:
        if gc_was_enabled:
            gc.enable()
    result.stats["cycle_seconds"] = time.perf_counter() - t0
    result.stats["cycle_cpu_seconds"] = time.process_time() - c0
    return result

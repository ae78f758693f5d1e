"""A scenario at a chosen simulated time, as ``kai-ray queues`` and ``kai-ray pending`` show a cluster.

The scenario runs through the engine up to ``at`` (every event at or before it, including the cycle due then), and
the core runs one more cycle on the world as it stands: its verdicts and queue numbers are what the scheduler would
report at ``at``, the same facts the operators write on PodGroups and Queues.
"""

from __future__ import annotations

from dataclasses import dataclass

from kai_ray.scheduler.cycle import run_cycle
from kai_ray.scheduler.queue_views import LastCycle
from kai_ray.scheduler.snapshot import Snapshot
from kai_ray.sim.run import build_engine
from kai_ray.sim.scenario import Scenario


@dataclass
class ScenarioView:
    snapshot: Snapshot
    last: LastCycle
    display_names: dict[str, str]  # queue -> spec.displayName
    owners: dict[str, str]  # job key -> "Kind/name" of the Ray CR it was made for
    ended_at: float | None = None  # when the run ended, if before ``at`` (nothing happens after it)


def scenario_view(scn: Scenario, at: float) -> ScenarioView:
    engine = build_engine(scn)
    engine.opt.until = at
    engine.run()
    snapshot = engine.snapshot(at)
    owners = {w.job.key: f"{w.kind}/{w.key.split('/', 1)[-1]}" for w in engine.active.values() if w.job is not None}
    names = {q.name: q.spec.display_name for q in scn.queues if q.spec.display_name}
    ended = engine.now if engine.drained and engine.now < at else None
    return ScenarioView(snapshot, LastCycle.of(run_cycle(snapshot)), names, owners, ended)

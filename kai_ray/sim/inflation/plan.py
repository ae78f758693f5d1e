"""What a sweep of the inflation protocol runs, from the options as typed: pod lists, placements, seeds, files.

Why here and not in the commands: ``simulate --inflate``, ``bench fragmentation`` and ``sweep`` read the same options
the same way (a short list name in the data directory, ``1-10`` for seeds), and a bad value is the same one line
(an :class:`InflationError` naming the option) whichever command got it.
"""

from __future__ import annotations

from pathlib import Path

from kai_ray.sim.inflation.protocol import DATA_ENV, InflationError, data_dir, known_placements
from kai_ray.sim.inflation.sweep import SweepPlan


def split_list(value: str, option: str) -> tuple[str, ...]:
    items = tuple(v.strip() for v in value.split(",") if v.strip())
    if not items:
        raise InflationError(f"{option}: give at least one value (comma-separated)")
    return items


def parse_seeds(value: str, option: str = "--seeds") -> tuple[int, ...]:
    """``1,2,5`` or ``1-10`` (inclusive), or both: ``1-3,7``."""
    seeds: list[int] = []
    for item in split_list(value, option):
        lo, sep, hi = item.partition("-") if not item.startswith("-") else (item, "", "")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise InflationError(f"{option}: {item!r} is not a seed or a range like 1-10") from None
        if b < a:
            raise InflationError(f"{option}: {item!r} is an empty range")
        seeds.extend(range(a, b + 1))
    return tuple(dict.fromkeys(seeds))


def resolve_list(value: str, data: Path, prefix: str) -> str:
    """A file path, a file name inside the data directory, or a short name (``default``, ``multigpu50``)."""
    for cand in (Path(value), data / value, data / f"{value}.csv", data / f"{prefix}{value}.csv"):
        if cand.is_file():
            return str(cand)
    return value  # reading it reports the missing file with its name


def make_plan(
    nodes: str,
    pods: str,
    placement: str,
    seeds: tuple[int, ...],
    factor: float,
    actions: str | None,
    batch: float,
    data: Path | None = None,
) -> SweepPlan:
    """A checked plan: every option valid and every file there, or an :class:`InflationError` naming the option."""
    if data is not None:
        nodes = resolve_list(nodes, data, "openb_node_list_")
    pod_files = split_list(pods, "--pods")
    if data is not None:
        pod_files = tuple(resolve_list(p, data, "openb_pod_list_") for p in pod_files)
    plan = SweepPlan(
        nodes=nodes,
        pods=pod_files,
        placements=split_list(placement, "--placement"),
        seeds=seeds,
        factor=factor,
        actions=split_list(actions, "--actions") if actions is not None else None,
        batch=batch,
    )
    plan.validate()
    where = f" (nor in {data}: give a path, --data or set {DATA_ENV})" if data is not None else ""
    for option, path in (("--nodes", plan.nodes), *(("--pods", p) for p in plan.pods)):
        if not Path(path).is_file():
            raise InflationError(f"{option}: {path}: no such file{where}")
    return plan


def shared_plan(
    data: str | None,
    nodes: str,
    pods: str,
    seeds: str,
    inflate: float,
    placement: str | None,
    actions: str | None,
    batch: float,
) -> SweepPlan:
    """A plan over the shared Alibaba files (``--data``, else the default data directory); every known policy
    unless ``--placement`` names some."""
    d = Path(data) if data else data_dir()
    return make_plan(
        nodes, pods, placement or ",".join(known_placements()), parse_seeds(seeds), inflate, actions, batch, d
    )

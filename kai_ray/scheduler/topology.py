"""Topology-aware node subsets (KAI's topology plugin, simplified to node sets).

A constraint names a Topology (node label keys, largest domain first) and a required and/or preferred level. A
domain at level L is the set of nodes sharing the label values of every level down to L. Required: the gang (or
subgroup) must fit entirely inside one domain; domains are tried fullest-first among those whose free resources
cover the request (bin-packing the topology). Preferred: the fitting preferred sub-domains are tried first, then
the enclosing set as a fallback, so the preference never makes a gang unschedulable.
"""

from __future__ import annotations

import numpy as np

from kai_ray.scheduler.session import CPU, EPS, GPU, MEM, Session
from kai_ray.scheduler.snapshot import TopologyConstraint

MAX_PREFERRED_TRIES = 3


class TopologyError(Exception):
    """The constraint cannot be met; the message is the pending reason."""


def _domains(ses: Session, levels: list[str], upto: int, allowed: np.ndarray) -> dict[tuple[str, ...], np.ndarray]:
    keys = levels[: upto + 1]
    groups: dict[tuple[str, ...], list[int]] = {}
    for i in np.flatnonzero(allowed):
        labels = ses.nodes[int(i)].labels
        try:
            dom = tuple(labels[k] for k in keys)
        except KeyError:
            continue
        groups.setdefault(dom, []).append(int(i))
    out: dict[tuple[str, ...], np.ndarray] = {}
    n = len(ses.nodes)
    for dom, idxs in groups.items():
        m = np.zeros(n, dtype=bool)
        m[idxs] = True
        out[dom] = m
    return out


def _fitting_sorted(
    ses: Session, domains: dict[tuple[str, ...], np.ndarray], need: tuple[float, float, float]
) -> list[tuple[tuple[str, ...], np.ndarray]]:
    fut = ses.free + ses.rel
    scored = []
    for dom, m in domains.items():
        have = (float(fut[GPU, m].sum()), float(fut[CPU, m].sum()), float(fut[MEM, m].sum()))
        if all(have[r] + EPS >= need[r] for r in range(3)):
            scored.append(((have[GPU], have[CPU], have[MEM], dom), dom, m))
    scored.sort(key=lambda t: t[0])
    return [(dom, m) for _, dom, m in scored]


def subset_nodes(
    ses: Session, constraint: TopologyConstraint | None, need: tuple[float, float, float], allowed: np.ndarray
) -> list[np.ndarray]:
    """Candidate node sets to try in order; raises TopologyError when a required level cannot be met."""
    if constraint is None or (constraint.required_level is None and constraint.preferred_level is None):
        return [allowed]
    topo = ses.topologies.get(constraint.topology)
    if topo is None:
        raise TopologyError(f"topology {constraint.topology!r} does not exist")
    levels = topo.levels
    sets: list[np.ndarray] = []
    if constraint.required_level is not None:
        if constraint.required_level not in levels:
            raise TopologyError(
                f"required level {constraint.required_level!r} is not a level of topology {topo.name!r}"
            )
        req_idx = levels.index(constraint.required_level)
        fitting = _fitting_sorted(ses, _domains(ses, levels, req_idx, allowed), need)
        if not fitting:
            raise TopologyError(
                f"no {constraint.required_level} domain of topology {topo.name!r} has room for "
                f"gpu={need[0]:g} cpu={need[1]:g} memory={need[2]:g}"
            )
        outer = [m for _, m in fitting]
    else:
        outer = [allowed]
    pref = constraint.preferred_level
    if pref is not None and pref in levels:
        pidx = levels.index(pref)
        for om in outer:
            tries = _fitting_sorted(ses, _domains(ses, levels, pidx, om), need)[:MAX_PREFERRED_TRIES]
            sets.extend(m for _, m in tries)
            sets.append(om)
    else:
        sets = outer
    return sets

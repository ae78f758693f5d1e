"""Topology-aware node subsets and node scores (KAI's topology plugin).

A Topology names node label keys, largest domain first; a domain at level L is the set of nodes sharing the label
values of every level down to L, and the domains form a tree under a ``root``. A constraint names a required and/or
a preferred level. For one gang (or subgroup) KAI:

* starts from the lowest domain that holds every node it may use, and gives up when even that cannot hold the pods;
* sorts the tree below it, at every level, fullest first relative to the request (the pods' share of a domain's idle
  and releasing resources, larger first; ties by domain id), down to the preferred (else required) level;
* offers as candidates every domain that can hold the pods, at each level from the preferred one up to the
  required one (up to the root without a required level), deepest level first and in the sorted tree order: the
  allocation tries them in turn, so a gang lands in the tightest domain that fits, then climbs;
* with a preferred level, scores nodes by their preferred-level domain's place in the sorted order, so that within a
  wider candidate the pods gather by preferred domain.

"Can hold" counts pods when the pods are alike (how many copies of the largest pod fit on each node, summed), else
compares the dominant share of the request to the domain's free resources.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from kai_ray.scheduler.session import CPU, EPS, GPU, MEM, Session
from kai_ray.scheduler.snapshot import TopologyConstraint

ROOT = "root"
NOT_IN_DOMAIN = 1000.0  # KAI: the ratio of a resource the domain has none of
SCORE = 100000.0  # KAI's topology node-score scale (above every other plugin's)


class TopologyError(Exception):
    """The constraint cannot be met; the message is the pending reason."""


@dataclass(eq=False)
class Domain:
    id: str
    level: str
    nodes: list[int] = field(default_factory=list)
    children: list[Domain] = field(default_factory=list)
    mask: np.ndarray | None = None


@dataclass
class Tree:
    name: str
    levels: list[str]
    root: Domain
    by_level: dict[str, dict[str, Domain]]
    member: np.ndarray  # nodes that carry every level's label


def tree_of(ses: Session, name: str) -> Tree | None:
    cache: dict[str, Tree] = ses.topology_trees
    if name in cache:
        return cache[name]
    topo = ses.topologies.get(name)
    if topo is None:
        return None
    levels = list(topo.levels)
    n = len(ses.nodes)
    root = Domain(ROOT, ROOT)
    by_level: dict[str, dict[str, Domain]] = {ROOT: {ROOT: root}}
    member = np.zeros(n, dtype=bool)
    for i, node in enumerate(ses.nodes):
        labels = node.labels
        if not all(k in labels for k in levels):
            continue
        member[i] = True
        root.nodes.append(i)
        parent = root
        for d, key in enumerate(levels):
            dom_id = ".".join(labels[k] for k in levels[: d + 1])
            level_doms = by_level.setdefault(key, {})
            dom = level_doms.get(dom_id)
            if dom is None:
                dom = level_doms[dom_id] = Domain(dom_id, key)
                parent.children.append(dom)
            dom.nodes.append(i)
            parent = dom
    for doms in by_level.values():
        for dom in doms.values():
            m = np.zeros(n, dtype=bool)
            m[dom.nodes] = True
            dom.mask = m
    tree = Tree(name, levels, root, by_level, member)
    cache[name] = tree
    return tree


@dataclass
class Request:
    """What the pods of one placement step ask of a domain."""

    total: tuple[float, float, float]
    count: int
    largest: tuple[float, float, float] | None  # set when the pods are alike enough to count copies (KAI)
    fractional: bool = False


def _free(ses: Session, dom: Domain) -> list[float]:
    fut = ses.free + ses.rel
    idx = dom.nodes
    return [float(fut[r, idx].sum()) for r in range(3)]


def _ratio(req: Request, free: list[float]) -> float:
    worst = 0.0
    for r in range(3):
        v = req.total[r]
        if v <= 0:
            continue
        worst = max(worst, NOT_IN_DOMAIN if free[r] <= 0 else v / free[r])
    return worst


def _accommodation(ses: Session, dom: Domain, req: Request) -> int:
    assert req.largest is not None
    big = req.largest
    if all(v <= 0 for v in big):
        return req.count
    fut = ses.free + ses.rel
    slots = ses.pods_free + ses.rel_pods
    total = 0
    for i in dom.nodes:
        have = [float(fut[r, i]) for r in range(3)]
        if req.fractional:
            have[GPU] += float(ses.frac_room_future[i])
        if any(big[r] > have[r] + EPS * max(1.0, big[r]) for r in range(3)) or slots[i] < 1:
            continue
        fits = int(slots[i])
        for r in range(3):
            if big[r] > 0:
                fits = min(fits, int((have[r] + EPS * max(1.0, big[r])) // big[r]))
        total += fits
    return total


def _fits(ses: Session, dom: Domain, req: Request) -> bool:
    if req.largest is not None:
        return _accommodation(ses, dom, req) >= req.count
    return _ratio(req, _free(ses, dom)) <= 1.0


def _lowest_common(tree: Tree, allowed: np.ndarray, preferred: str | None) -> tuple[Domain, np.ndarray]:
    valid = allowed & tree.member
    idx = np.flatnonzero(valid)
    dom = tree.root
    if idx.size == 0:
        return dom, valid
    for key in tree.levels:
        nxt = [c for c in dom.children if c.mask is not None and c.mask[idx].all()]
        if not nxt:
            break
        dom = nxt[0]
        if key == preferred:
            break
    return dom, valid


def _sort(ses: Session, dom: Domain, req: Request, depth_level: str) -> None:
    ratios = {c.id: _ratio(req, _free(ses, c)) for c in dom.children}
    dom.children.sort(key=lambda c: (-ratios[c.id], c.id))
    if dom.level == depth_level:
        return
    for c in dom.children:
        _sort(ses, c, req, depth_level)


def _level_domains(dom: Domain, level: str) -> list[Domain]:
    if dom.level == level:
        return [dom]
    out: list[Domain] = []
    for c in dom.children:
        out.extend(_level_domains(c, level))
    return out


def _reverse_level_order(root: Domain) -> list[Domain]:
    levels: list[list[Domain]] = []
    queue = [root]
    while queue:
        levels.append(queue)
        queue = [c for d in queue for c in d.children]
    return [d for lvl in reversed(levels) for d in lvl]


def subset_nodes(
    ses: Session,
    constraint: TopologyConstraint | None,
    req: Request,
    allowed: np.ndarray,
    active: np.ndarray | None = None,
) -> tuple[list[np.ndarray], np.ndarray | None]:
    """Candidate node sets to try in order, and node scores for the pods (preferred level), or raise."""
    if constraint is None or (constraint.required_level is None and constraint.preferred_level is None):
        return [allowed], None
    tree = tree_of(ses, constraint.topology)
    if tree is None:
        raise TopologyError(f"topology {constraint.topology!r} does not exist")
    required, preferred = constraint.required_level, constraint.preferred_level
    for kind, lvl in (("required", required), ("preferred", preferred)):
        if lvl is not None and lvl not in tree.levels:
            raise TopologyError(f"{kind} level {lvl!r} is not a level of topology {tree.name!r}")
    start, valid = _lowest_common(tree, allowed, preferred)
    if not _fits(ses, start, req):
        where = "the cluster" if start.level == ROOT else f"{start.level} {start.id}"
        raise TopologyError(
            f"topology {tree.name}, requirement {required or preferred} couldn't be satisfied: not enough "
            f"resources in {where} (gpu={req.total[GPU]:g} cpu={req.total[CPU]:g} memory={req.total[MEM]:g})"
        )
    _sort(ses, start, req, preferred or required or ROOT)
    scores = None
    if preferred is not None:
        doms = _level_domains(start, preferred)
        scores = np.zeros(len(ses.nodes))
        for i, d in enumerate(doms):
            scores[d.nodes] = math.floor((i + 1) / len(doms) * 10) * SCORE
    order = [*reversed(tree.levels), ROOT]  # deepest level first
    lo = order.index(preferred) if preferred is not None else order.index(required or ROOT)
    hi = order.index(required) if required is not None else len(order) - 1
    relevant = set(order[lo : hi + 1])
    tops: list[np.ndarray] | None = None
    if required is not None and active is not None and active.any():
        tops = [d.mask for d in tree.by_level[required].values() if d.mask is not None and (d.mask & active).any()]
    candidates: list[Domain] = []
    for dom in _reverse_level_order(tree.root):
        if dom.level not in relevant:
            continue
        if tops is not None and not any(not (dom.mask & ~t).any() for t in tops):
            continue  # pods already running tie the gang to their required-level domain
        if _fits(ses, dom, req):
            candidates.append(dom)
    if not candidates:
        raise TopologyError(
            f"topology {tree.name}, requirement {required or preferred} couldn't be satisfied: no "
            f"{required or preferred} domain can hold the pods "
            f"(gpu={req.total[GPU]:g} cpu={req.total[CPU]:g} memory={req.total[MEM]:g})"
        )
    sets = []
    for dom in candidates:
        assert dom.mask is not None
        sets.append(dom.mask & valid)
    return sets, scores

"""The gang tree of one PodGroup: PodSets (leaves: pods with a min and max) under SubGroupSets (inner nodes:
satisfied when ``minSubGroup`` of their members are, all when unset), with readiness and surplus.

Why a module of its own: the tree is plain data with counters the session keeps current (``PodSet.n_active``,
``n_alive``); these questions are answered from the counters alone, so this module knows nothing of the session.
Which pods of a gang to place or evict next needs the session's pod states and lives in :mod:`.tasks`.
"""

from __future__ import annotations

from kai_ray.scheduler.snapshot import Job, TopologyConstraint


class PodSet:
    """A leaf of the gang tree: pods of one subgroup (or the implicit ``default`` set), with min and max."""

    __slots__ = ("core", "max", "min", "n_active", "n_alive", "name", "parent", "pods", "topology")
    is_set = False

    def __init__(self, name: str, min_member: int, max_member: int, topology: TopologyConstraint | None) -> None:
        self.name = name
        self.min = min_member
        self.max = max_member
        # non-preemptible pods of a semi-preemptible job (never below the minimum: a burst eviction must not break
        # the gang); fixed by the spec, read only by :mod:`.semipreemptible`
        self.core = min_member
        self.pods: list[int] = []
        self.n_active = 0
        self.n_alive = 0  # non-gated pods that are not finished: readiness
        self.parent: SubGroupSet | None = None
        self.topology = topology

    def satisfied(self) -> bool:
        return self.n_active >= self.min

    def n_satisfied_members(self) -> int:
        return self.n_active

    def k(self) -> int:
        return self.min

    def podsets(self) -> list[PodSet]:
        return [self]


class SubGroupSet:
    """An inner node of the gang tree: satisfied when ``min_k`` of its members are (all when ``None``)."""

    __slots__ = ("members", "min_k", "name", "parent", "topology")
    is_set = True

    def __init__(self, name: str, min_k: int | None, topology: TopologyConstraint | None) -> None:
        self.name = name
        self.min_k = min_k
        self.members: list[PodSet | SubGroupSet] = []
        self.parent: SubGroupSet | None = None
        self.topology = topology

    def k(self) -> int:
        return self.min_k if self.min_k is not None else len(self.members)

    def n_satisfied_members(self) -> int:
        return sum(1 for m in self.members if m.satisfied())

    def satisfied(self) -> bool:
        return self.n_satisfied_members() >= self.k()

    def podsets(self) -> list[PodSet]:
        out: list[PodSet] = []
        for m in self.members:
            out.extend(m.podsets())
        return out


Member = PodSet | SubGroupSet


def member_key(m: Member) -> tuple[int, float, str]:
    """KAI's subgroup order: unsatisfied first, then lower satisfaction ratio, then name."""
    count = m.n_satisfied_members()
    k = m.k()
    if count < k:
        return (0, 0.0, m.name)
    if k == 0:
        return (2, float(count), m.name)
    return (1, count / k, m.name)


def has_surplus(m: Member) -> bool:
    """Whether some part of the tree runs more than its minimum: more pods than a PodSet's minimum, or more
    satisfied members than a SubGroupSet needs (what elastic eviction may take without breaking the gang)."""
    if isinstance(m, PodSet):
        return m.n_active > m.min
    if m.n_satisfied_members() > m.k():
        return True
    return any(has_surplus(c) for c in m.members)


def is_ready(m: Member) -> bool:
    """Whether enough pods exist (not gated, not finished) to reach the minimum: a gang that is not ready is not
    tried (KAI's PodGroup readiness)."""
    if isinstance(m, PodSet):
        return m.n_alive >= m.min
    ready = sum(1 for c in m.members if is_ready(c))
    return ready >= m.k()


def build_gang_tree(j: Job) -> tuple[SubGroupSet, dict[str, PodSet], str]:
    """The root SubGroupSet and the leaf PodSets of a PodGroup, or an error message (then a trivial tree)."""
    big = 1 << 30
    if not j.subgroups:
        root = SubGroupSet("", j.min_subgroup, j.topology)
        mm = j.min_member if j.min_member is not None else 1
        err = ""
        if mm < 0:
            err, mm = "minMember is negative", 0
        ps = PodSet("default", mm, big, None)
        ps.parent = root
        root.members.append(ps)
        root.min_k = None
        return root, {"default": ps}, err
    names = [sg.name for sg in j.subgroups]
    by_name = {sg.name: sg for sg in j.subgroups}
    err = ""
    if len(set(names)) != len(names):
        err = "duplicate subgroup names"
    children: dict[str | None, list[str]] = {}
    for sg in j.subgroups:
        parent = sg.parent or None
        if parent is not None and parent not in by_name:
            err = err or f"subgroup {sg.name!r} names unknown parent {parent!r}"
            parent = None
        children.setdefault(parent, []).append(sg.name)
    root = SubGroupSet("", j.min_subgroup, j.topology)
    podsets: dict[str, PodSet] = {}
    visited: set[str] = set()

    def build(parent_set: SubGroupSet, names_: list[str]) -> None:
        nonlocal err
        for name in sorted(set(names_)):
            if name in visited:
                err = err or f"subgroup {name!r} is part of a cycle"
                continue
            visited.add(name)
            sg = by_name[name]
            kids = children.get(name, [])
            if kids:
                if sg.min_member is not None and sg.min_subgroup is None:
                    err = err or f"subgroup {name!r} has children and minMember"
                s = SubGroupSet(name, sg.min_subgroup, sg.topology)
                s.parent = parent_set
                parent_set.members.append(s)
                build(s, kids)
                if s.min_k is not None and not (0 <= s.min_k <= len(s.members)):
                    err = err or f"subgroup {name!r} minSubGroup {s.min_k} out of range"
                    s.min_k = None
            else:
                mm = sg.min_member if sg.min_member is not None else 1
                if mm < 0:
                    err = err or f"subgroup {name!r} minMember is negative"
                    mm = 0
                mx = sg.max_member if sg.max_member is not None else big
                if mx < mm:
                    err = err or f"subgroup {name!r} max-member {mx} is below minMember {mm}"
                    mx = mm
                ps = PodSet(name, mm, mx, sg.topology)
                if sg.core is not None:
                    ps.core = min(max(sg.core, mm), mx)
                ps.parent = parent_set
                parent_set.members.append(ps)
                podsets[name] = ps

    build(root, children.get(None, []))
    if len(visited) != len(by_name):
        err = err or "subgroup parents form a cycle"
    if root.min_k is not None and not (0 <= root.min_k <= len(root.members)):
        err = err or f"minSubGroup {root.min_k} out of range"
        root.min_k = None
    # KAI orders members: subgroup sets first, then pod sets
    root.members.sort(key=lambda m: (not m.is_set, m.name))
    return root, podsets, err

"""What a session knows of the nodes before any pod is counted: the part of a cycle that only node changes can move.

Why its own object: a cycle used to rebuild these arrays from the ``Node`` objects every time (at 1,500 nodes, a
third of the simulator's cost), though between two cycles the nodes rarely change. A :class:`NodeBase` is built
once per node list and shared by the sessions of the cycles that follow; each session copies the few arrays it
mutates (free, releasing, pod slots) with numpy, which costs microseconds, and reads the rest as they are. Static
predicate masks (:class:`StaticMasks`) are cached per pod signature in the base, so they too live across cycles.

The base never changes once built: a node added, changed or deleted makes a new one (``IncrementalState``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

from kai_ray.scheduler.decisions import Finding
from kai_ray.scheduler.placement import StaticMasks
from kai_ray.scheduler.snapshot import Node

GPU, CPU, MEM = 0, 1, 2
EPS = 1e-9

MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-(\d+)g\.(\d+)gb$")


def mig_gpus(extended: dict[str, float]) -> float:
    """GPUs a request of MIG slices counts as in KAI: the profile's compute slices (the ``N`` of ``mig-Ng.Mgb``)
    times the count; a 1g.10gb slice is one GPU, a 3g.40gb slice three."""
    total = 0.0
    for name, v in extended.items():
        hit = MIG_RESOURCE.match(name)
        if hit is not None and v > 0:
            total += int(hit.group(1)) * v
    return total


def node_extended_names(nodes: Sequence[Node]) -> set[str]:
    """The extended resources some node has (the rows they need, with those pods ask for)."""
    names: set[str] = set()
    for n in nodes:
        if n.extended:
            names.update(n.extended)
    return names


class NodeBase:
    """The node arrays of a session before pods: allocatable, readiness, GPU memory, masks, capacity.

    ``xnames`` are the extended-resource rows (those of the nodes and of the pods of the snapshot it was built
    for); a session whose snapshot needs other rows cannot use this base."""

    def __init__(self, nodes: Sequence[Node], xnames: list[str]) -> None:
        self.findings: list[Finding] = []
        seen: dict[str, Node] = {}
        for n in nodes:
            if n.name in seen:
                self.findings.append(Finding("Node", n.name, "name", "duplicate node name; the first is used"))
                continue
            seen[n.name] = n
        self.node_xnames = frozenset(node_extended_names(nodes))  # what the nodes bring to xnames
        self.xnames = xnames
        self.xindex: dict[str, int] = {k: i for i, k in enumerate(xnames)}
        self.nodes: list[Node] = [seen[k] for k in sorted(seen)]
        self.node_index: dict[str, int] = {n.name: i for i, n in enumerate(self.nodes)}
        nn = len(self.nodes)
        alloc = (
            np.array(
                [(n.allocatable.gpu, n.allocatable.cpu, n.allocatable.memory) for n in self.nodes], dtype=np.float64
            )
            .reshape(nn, 3)
            .T.copy()
        )
        bad = ~((alloc >= 0) & (alloc < math.inf))  # NaN fails both comparisons
        if bad.any():
            for i in np.flatnonzero(bad.any(axis=0)):
                self.findings.append(
                    Finding(
                        "Node", self.nodes[i].name, "allocatable", "negative, infinite or NaN allocatable treated as 0"
                    )
                )
            alloc[bad] = 0.0
        alloc[GPU] = np.floor(alloc[GPU] + EPS)
        self.alloc = alloc
        self.max_pods = np.array([n.max_pods for n in self.nodes], dtype=np.int64)
        self.ready = np.array([n.ready for n in self.nodes], dtype=bool)
        self.node_arange = np.arange(nn, dtype=np.float64)
        self.masks = StaticMasks(self.nodes)
        self.gpu_mem = np.array([n.gpu_memory_mib for n in self.nodes], dtype=np.float64)
        self.cpu_only = alloc[GPU] <= 0  # KAI's resourcetype plugin: CPU-only pods prefer CPU-only nodes
        known = self.gpu_mem[self.gpu_mem > 0]
        self.min_gpu_mem = float(known.min()) if known.size else 0.0
        self.max_gpu_mem = float(known.max()) if known.size else 0.0
        ready_alloc = alloc[:, self.ready] if nn else alloc
        self.capacity = [float(ready_alloc[r].sum()) for r in range(3)]
        # KAI counts a node's MIG slices as GPUs of its capacity (what fair shares divide)
        self.capacity[GPU] += sum(mig_gpus(n.extended) for n in self.nodes if n.extended and n.ready)
        xalloc = np.zeros((len(xnames), nn))
        for ni, n in enumerate(self.nodes):
            for name, v in n.extended.items():
                if v >= 0 and v < math.inf:
                    xalloc[self.xindex[name], ni] = v
                else:
                    msg = f"negative, infinite or NaN allocatable {name} treated as 0"
                    self.findings.append(Finding("Node", n.name, "allocatable", msg))
        self.xalloc = xalloc

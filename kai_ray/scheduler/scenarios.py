"""KAI's scenario generators (``actions/common/solvers``, ``scenario``): which victim sets the search tries, in order.

A generator reads the victims queue (eviction units popped in reverse queue/job order, each queue judged as if what
was already popped from it were gone) and proposes scenarios; it never touches the statement. Trying a scenario for
real, and keeping or rolling it back, is :class:`.solver.JobSolver`'s job, so the two can change apart: a new
generator is a new method here, a new simulation rule a change there.

* *node-local greedy*: after each new unit, the units touching one node of that unit's job;
* *multi-node gang*: the accumulated units, restricted to the fewest nodes whose capacity covers the demand, then more;
* kai-ray's *single node*: per node, its least deserving units until the pods could fit there (fewest nodes).

A cheap filter (idle + releasing + victim GPUs must be able to hold the pending pods) skips hopeless accumulations.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from kai_ray.scheduler.ordering import JobsOrderByQueues
from kai_ray.scheduler.placement import signature
from kai_ray.scheduler.session import EPS, Session
from kai_ray.scheduler.victim_units import Unit, VictimJob, VictimRep, unit_risk


@dataclass(slots=True)
class Scenario:
    tasks: list[int]  # the pending pods to place
    recorded: list[Unit]  # victims carried from an earlier success (always evicted)
    potential: list[Unit]  # victims this scenario adds

    def units(self) -> list[Unit]:
        return self.recorded + self.potential

    def fingerprint(self) -> tuple[frozenset[int], frozenset[tuple[int, int]], frozenset[tuple[int, int]]]:
        return (
            frozenset(self.tasks),
            frozenset(u.key for u in self.recorded),
            frozenset(u.key for u in self.potential),
        )


NODE_LOCAL, MULTI_NODE = "NodeLocalGreedy", "MultiNodeGang"


class _Accum:
    """Victims accumulated for one probe and what KAI's filters and generators read of them, kept incrementally:
    victim GPUs per node, the victim jobs on each node, and (multi-node generator) the potential units on each node
    in the order they came."""

    def __init__(self, gens: ScenarioGenerators, tasks: list[int]) -> None:
        ses = gens.ses
        self.gens = gens
        self.need = sorted((ses.p_req[p][0] for p in tasks), reverse=True)
        self.gpus: dict[int, float] = {}  # node -> GPUs the victims free there
        self.jobs_on: dict[int, set[int]] = {}  # node -> victim jobs with a pod there
        self.potential_on: dict[int, list[Unit]] = {}
        self.potential_gpu: dict[int, float] = {}
        self.first_seen: dict[int, int] = {}
        self.order: dict[tuple[int, int], int] = {}
        self.selectors = [ses.masks.mask(ses.pods[p]) for p in tasks if signature(ses.pods[p]) != _NO_SIGNATURE]
        self.touched: set[int] = set()
        self._seen_pods = 0

    def add(self, u: Unit, index: int | None = None) -> None:
        ses = self.gens.ses
        node_of = self.gens.node_of_pod
        for p in u.pods:
            n = node_of[p]
            if index is not None:
                self._seen_pods += 1
            if n < 0:
                continue
            g = ses.p_req[p][0]
            self.gpus[n] = self.gpus.get(n, 0.0) + g
            self.jobs_on.setdefault(n, set()).add(u.vj.job.idx)
            self.touched.add(n)
            if index is not None:
                self.first_seen.setdefault(n, self._seen_pods)
                lst = self.potential_on.setdefault(n, [])
                if not lst or lst[-1] is not u:
                    lst.append(u)
                self.potential_gpu[n] = self.potential_gpu.get(n, 0.0) + g
        if index is not None:
            self.order[u.key] = index

    def valid(self) -> bool:
        """KAI's accumulated-scenario filters: every pod with a node selector has a node among the usable ones, and
        the idle, releasing and victims' GPUs of the best nodes can hold the pending GPU requests."""
        gens = self.gens
        if self.selectors:
            allowed = gens.feasible.copy()
            if self.touched:
                allowed[list(self.touched)] = True
            if not all((m & allowed).any() for m in self.selectors):
                return False
        need = self.need
        if not need or need[0] <= 0:
            return True
        room = gens.gpu_room
        caps = [float(room[n]) + g for n, g in self.gpus.items()]
        taken = 0
        for n in gens.room_order():
            if taken >= len(need):
                break
            if n in self.gpus:
                continue
            caps.append(float(room[n]))
            taken += 1
        caps.sort(reverse=True)
        holders = caps[: len(need)]
        used = [0.0] * len(holders)
        for req in need:
            if req <= 0:
                return True
            for i, total in enumerate(holders):
                if total + EPS < req:
                    break
                if total - used[i] + EPS >= req:
                    used[i] += req
                    break
            else:
                return False
        return True


_NO_SIGNATURE: tuple[tuple[object, ...], ...] = ((), (), ())


class ScenarioGenerators:
    """The victims queue of one pending job's search and the generators over it. The queue is materialised lazily
    and kept across probes: the session is back at the same state before every scenario, so its order holds."""

    def __init__(self, ses: Session, vjobs: list[VictimJob], feasible: np.ndarray, gpu_room: np.ndarray) -> None:
        self.ses = ses
        self.vjobs = vjobs
        self.feasible = feasible
        self.gpu_room = gpu_room
        self.node_of_pod = ses.p_node
        self.seq_index: dict[tuple[int, int], int] = {}
        self._sequence: list[Unit] = []
        self._seq_iter: Iterator[Unit] | None = None
        self._room_sorted: list[int] | None = None

    def sequence(self) -> Iterator[Unit]:
        i = 0
        while True:
            if i < len(self._sequence):
                yield self._sequence[i]
                i += 1
                continue
            if self._seq_iter is None:
                self._seq_iter = self._pop_units()
            nxt = next(self._seq_iter, None)
            if nxt is None:
                return
            self.seq_index[nxt.key] = len(self._sequence)
            self._sequence.append(nxt)

    def _pop_units(self) -> Iterator[Unit]:
        order = JobsOrderByQueues(self.ses, victims=True)
        order.extend([VictimRep(vj, 0) for vj in self.vjobs])
        while not order.empty():
            rep: VictimRep | None = order.pop()  # type: ignore[assignment]
            if rep is None:
                return
            yield Unit(rep.vj, rep.step)
            if rep.step + 1 < len(rep.vj.steps):
                order.push(VictimRep(rep.vj, rep.step + 1))  # type: ignore[arg-type]

    def room_order(self) -> list[int]:
        if self._room_sorted is None:
            room = self.gpu_room
            self._room_sorted = sorted(range(room.size), key=lambda n: -room[n])
        return self._room_sorted

    def _accum(self, tasks: list[int], recorded: list[Unit]) -> _Accum:
        acc = _Accum(self, tasks)
        for u in recorded:
            acc.add(u)
        return acc

    def _accumulated(self, tasks: list[int], recorded: list[Unit]) -> Iterator[tuple[list[Unit], _Accum]]:
        """KAI's accumulated scenario builder: victims added one unit at a time, least deserving first (recorded
        ones skipped), each valid accumulation yielded."""
        skip = {u.key for u in recorded}
        acc = self._accum(tasks, recorded)
        potential: list[Unit] = []
        for unit in self.sequence():
            if unit.key in skip:
                continue
            potential.append(unit)
            acc.add(unit, len(potential) - 1)
            if acc.valid():
                yield potential, acc

    def node_local(self, tasks: list[int], recorded: list[Unit]) -> Iterator[Scenario]:
        if recorded and self._accum(tasks, recorded).valid():
            yield Scenario(tasks, recorded, [])
        for potential, acc in self._accumulated(tasks, recorded):
            latest = potential[-1].vj
            seen: set[frozenset[tuple[int, int]]] = set()
            for n in latest.nodes:
                jobs_here = acc.jobs_on.get(n, set())
                victims = [u for u in potential if u.vj.job.idx in jobs_here]
                key = frozenset(u.key for u in victims)
                if not victims or key in seen:
                    continue
                seen.add(key)
                yield Scenario(tasks, recorded, victims)

    def multi_node(self, tasks: list[int], recorded: list[Unit]) -> Iterator[Scenario]:
        ses = self.ses
        if self._accum(tasks, recorded).valid():
            yield Scenario(tasks, recorded, [])
        node_of = self.node_of_pod
        demand = sum(ses.p_req[p][0] for p in tasks)
        smallest = min((ses.p_req[p][0] for p in tasks), default=0.0)
        freed: dict[int, float] = {}
        for u in recorded:
            for p in u.pods:
                if node_of[p] >= 0:
                    freed[node_of[p]] = freed.get(node_of[p], 0.0) + ses.p_req[p][0]
        room = self.gpu_room
        base_nodes = set(np.flatnonzero(self.feasible).tolist()) | set(freed)  # KAI: + recorded victims' nodes
        base_total = sum(float(room[n]) + freed.get(n, 0.0) for n in base_nodes)
        for _potential, acc in self._accumulated(tasks, recorded):
            node_units = acc.potential_on
            cap = {n: acc.potential_gpu[n] + freed.get(n, 0.0) + float(room[n]) for n in node_units}
            nodes = sorted(
                (n for n in cap if not smallest > 0 or cap[n] + EPS >= smallest),
                key=lambda n: (cap[n], acc.first_seen[n]),
            )
            baseline = base_total - sum(float(room[n]) + freed.get(n, 0.0) for n in node_units if n in base_nodes)
            remaining = max(0.0, demand - baseline)
            k, total = 0, 0.0
            if remaining > EPS:
                k = len(nodes) + 1
                for i, n in enumerate(nodes):
                    total += cap[n]
                    if total + EPS >= remaining:
                        k = i + 1
                        break
            step = 1
            while k <= len(nodes):
                picked: list[Unit] = []
                keys: set[tuple[int, int]] = set()
                for n in nodes[:k]:
                    for u in node_units[n]:
                        if u.key not in keys:
                            keys.add(u.key)
                            picked.append(u)
                picked.sort(key=lambda u: acc.order[u.key])
                yield Scenario(tasks, recorded, picked)
                if k >= len(nodes):
                    break
                k = min(k + step, len(nodes))
                step *= 2

    def single_node(self, tasks: list[int], queues: set[int], top: int) -> Iterator[Scenario]:
        """kai-ray: for each node, its least deserving victim units (of the given queues, priority at most ``top``)
        until the pods could fit there; nodes needing the fewest pods lost first."""
        ses = self.ses
        node_of = self.node_of_pod
        need = [sum(ses.p_req[p][r] for p in tasks) for r in range(3)]
        alloc = ses.alloc
        per_node: dict[int, list[tuple[tuple[object, ...], Unit]]] = {}
        for vj in self.vjobs:
            job = vj.job
            if job.queue not in queues or job.priority > top:
                continue
            for step in range(len(vj.steps)):
                nodes = {node_of[p] for p in vj.steps[step]}
                if len(nodes) != 1 or -1 in nodes:
                    break  # a later step needs this one gone first: stop at the first step off one node
                (n,) = nodes
                risk = unit_risk(vj, step)
                key = (job.priority, -job.elastic_state(), risk, -job.created_at, job.uid, step)
                per_node.setdefault(n, []).append((key, Unit(vj, step)))
        fut = ses.free + ses.rel
        options: list[tuple[int, int, float, str, list[Unit]]] = []
        for n, keyed in per_node.items():
            if any(alloc[r, n] + EPS * max(1.0, need[r]) < need[r] for r in range(3)):
                continue
            have = [float(fut[r, n]) for r in range(3)]
            chosen: list[Unit] = []
            taken: set[tuple[int, int]] = set()
            for _, u in sorted(keyed, key=lambda kv: kv[0]):
                if all(have[r] + EPS * max(1.0, need[r]) >= need[r] for r in range(3)):
                    break
                if u.step > 0 and (u.vj.job.idx, u.step - 1) not in taken:
                    continue
                chosen.append(u)
                taken.add(u.key)
                for p in u.pods:
                    req = ses.p_req[p]
                    for r in range(3):
                        have[r] += req[r]
            if chosen and all(have[r] + EPS * max(1.0, need[r]) >= need[r] for r in range(3)):
                risk = sum(unit_risk(u.vj, u.step) for u in chosen)  # kai-ray: least work lost, then node name
                options.append((sum(len(u.pods) for u in chosen), len(chosen), risk, ses.nodes[n].name, chosen))
        for *_, chosen in sorted(options, key=lambda o: (o[0], o[1], o[2], o[3])):
            yield Scenario(tasks, [], chosen)


__all__ = ["MULTI_NODE", "NODE_LOCAL", "Scenario", "ScenarioGenerators"]

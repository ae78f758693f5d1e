"""The simulated cluster's nodes: what is bound where, checked independently of the scheduler.

Why a second ledger when the core already accounts for nodes: the simulator plays the kubelet and the API server.
It accepts a bind only if the pod really fits (whole GPUs, fractional GPUs on a shared device, cpu, memory, pod
count), so a core bug that overcommits a node shows up as a rejected bind instead of silently skewing results.
It also keeps the running totals the metrics need (allocated and fragmented GPUs) in O(1) per change.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kai_ray.scheduler.snapshot import Node, Pod

EPS = 1e-9


@dataclass(slots=True)
class NodeState:
    node: Node
    gpus: float
    cpu: float
    memory: float
    max_pods: int
    used_gpu: float = 0.0  # whole GPUs + fractions
    whole: float = 0.0  # GPUs held by whole-GPU pods
    cpu_used: float = 0.0
    mem_used: float = 0.0
    pods: int = 0
    shared: dict[str, float] = field(default_factory=dict)  # gpu group -> fraction in use

    def devices_in_use(self) -> float:
        return self.whole + len(self.shared)


class Cluster:
    """Nodes and their usage; ``bind``/``unbind`` keep every total consistent."""

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes
        self.state: dict[str, NodeState] = {
            n.name: NodeState(
                n, float(int(n.allocatable.gpu + EPS)), n.allocatable.cpu, n.allocatable.memory, n.max_pods
            )
            for n in nodes
        }
        self.total_gpus = sum(s.gpus for s in self.state.values())
        self.allocated_gpus = 0.0
        # free GPU capacity on nodes where some GPU is allocated (it cannot serve a whole-node gang)
        self.free_on_busy_nodes = 0.0

    @staticmethod
    def _busy(st: NodeState) -> bool:
        return st.used_gpu > EPS

    def fits(self, pod: Pod, node: str, gpu_group: str | None) -> str | None:
        """None if ``pod`` fits on ``node`` right now, else why not."""
        st = self.state.get(node)
        if st is None:
            return f"unknown node {node!r}"
        req = pod.request
        if st.pods + 1 > st.max_pods:
            return "too many pods"
        if st.cpu_used + req.cpu > st.cpu + EPS * max(1.0, st.cpu):
            return "not enough cpu"
        if st.mem_used + req.memory > st.memory + EPS * max(1.0, st.memory):
            return "not enough memory"
        frac = pod.gpu_fraction
        if frac is not None and frac < 1.0:
            if gpu_group is not None and gpu_group in st.shared:
                if st.shared[gpu_group] + frac > 1.0 + EPS:
                    return f"shared GPU {gpu_group} is full"
                return None
            if st.devices_in_use() + 1 > st.gpus + EPS:
                return "no idle GPU for a new shared GPU"
            return None
        if st.devices_in_use() + req.gpu > st.gpus + EPS:
            return "not enough GPUs"
        return None

    def bind(self, pod: Pod, node: str, gpu_group: str | None) -> str | None:
        """Place ``pod``; returns the GPU group it ended on (fractional pods), else None."""
        st = self.state[node]
        was_busy = self._busy(st)
        req = pod.request
        frac = pod.gpu_fraction
        if frac is not None and frac < 1.0:
            group = gpu_group or f"{node}-shared{len(st.shared)}"
            while gpu_group is None and group in st.shared:
                group += "x"
            st.shared[group] = st.shared.get(group, 0.0) + frac
            gpu = frac
        else:
            group = None
            gpu = req.gpu
            st.whole += gpu
        st.used_gpu += gpu
        st.cpu_used += req.cpu
        st.mem_used += req.memory
        st.pods += 1
        self.allocated_gpus += gpu
        self._account_busy(st, was_busy, gpu, 1.0)
        return group

    def unbind(self, pod: Pod, node: str, gpu_group: str | None) -> None:
        st = self.state[node]
        was_busy = self._busy(st)
        req = pod.request
        frac = pod.gpu_fraction
        if frac is not None and frac < 1.0 and gpu_group is not None:
            left = st.shared.get(gpu_group, 0.0) - frac
            if left <= EPS:
                st.shared.pop(gpu_group, None)
            else:
                st.shared[gpu_group] = left
            gpu = frac
        else:
            gpu = req.gpu
            st.whole -= gpu
        st.used_gpu -= gpu
        st.cpu_used -= req.cpu
        st.mem_used -= req.memory
        st.pods -= 1
        self.allocated_gpus -= gpu
        self._account_busy(st, was_busy, gpu, -1.0)

    def _account_busy(self, st: NodeState, was_busy: bool, gpu: float, sign: float) -> None:
        busy = self._busy(st)
        if was_busy and busy:
            self.free_on_busy_nodes -= sign * gpu
        elif not was_busy and busy:
            self.free_on_busy_nodes += st.gpus - st.used_gpu
        elif was_busy and not busy:
            self.free_on_busy_nodes -= st.gpus - (st.used_gpu + gpu)

    def fits_all(self, pods: list[Pod]) -> bool:
        """Whether ``pods`` would all fit on the free capacity as it stands (first fit, largest GPU request first;
        a fractional pod takes a whole idle GPU). Node selectors and affinity are not checked: this answers "is
        there room", for reports, not "where" (that is the scheduler's job)."""
        free = {
            n: [st.gpus - st.devices_in_use(), st.cpu - st.cpu_used, st.memory - st.mem_used, st.max_pods - st.pods]
            for n, st in self.state.items()
        }
        for pod in sorted(pods, key=lambda p: -p.request.gpu):
            req = pod.request
            gpu = 1.0 if 0 < req.gpu < 1 else req.gpu
            for room in free.values():
                if (
                    room[0] + EPS >= gpu
                    and room[1] + EPS * max(1.0, req.cpu) >= req.cpu
                    and room[2] + EPS * max(1.0, req.memory) >= req.memory
                    and room[3] >= 1
                ):
                    room[0] -= gpu
                    room[1] -= req.cpu
                    room[2] -= req.memory
                    room[3] -= 1
                    break
            else:
                return False
        return True

    @property
    def free_gpus(self) -> float:
        return self.total_gpus - self.allocated_gpus

    def fragmentation(self) -> float:
        """Share of the unallocated GPUs that sit on nodes where some GPU is already allocated (0 when none is free).

        Such GPUs (and the idle parts of shared GPUs) cannot serve a job that needs whole nodes."""
        free = self.free_gpus
        if free <= EPS:
            return 0.0
        return min(1.0, max(0.0, self.free_on_busy_nodes / free))

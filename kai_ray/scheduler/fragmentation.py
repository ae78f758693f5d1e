"""GPU fragmentation and the placement policies built on it: multi-resource best-fit and FGD.

Why these two: on a cluster shared by GPU-sharing, whole-GPU and CPU-only pods, bin-packing one resource strands the
other — CPU-only pods fill the CPUs of GPU nodes and leave their GPUs unusable, fractions scatter over many GPUs.
The FGD paper ("Beware of Fragmentation", USENIX ATC'23) measures this on the Alibaba GPU trace and proposes to
score a node by how much a placement *increases the expected fragmentation* of its GPUs under the workload's mix of
pod shapes. kai-ray implements both ideas over the session's node state:

* ``bestfit``: the node whose free CPU and GPU (each normalised by the largest node) would be smallest after the pod
  lands, with equal weights;
* ``fgd``: the node (and, for a fraction, the GPU) that minimises the fragmentation after placement minus before.

Fragmentation of a node for one pod shape (``cpu``, ``gpu`` per GPU, ``count`` GPUs): if the node could host the
shape (enough CPU and at least ``count`` GPUs with ``gpu`` free), its fragment is the free share of the GPUs that
cannot take ``gpu``; otherwise all its free GPU share is fragment. The node's expected fragmentation weighs the
shapes by how common they are among the pods the scheduler sees (the most frequent GPU shapes covering 60% of GPU
pods, as the paper's simulator does). Everything is vectorised over nodes: one placement costs a few numpy passes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from kai_ray.scheduler.session import CPU, EPS, GPU, Session

TYPICAL_SHARE = 0.6  # the shapes that cover this share of GPU pods make the workload mix (FGD's default)
SHAPE_STEP = 10  # ... taken ten shapes at a time, as the paper's simulator does


@dataclass
class Mix:
    cpu: np.ndarray  # millicores per shape
    gpu: np.ndarray  # GPU share needed on each GPU (1.0 for whole GPUs)
    count: np.ndarray  # GPUs per pod
    weight: np.ndarray  # frequency, sums to 1


def _shape(ses: Session, p: int) -> tuple[float, float, int] | None:
    g, c, _ = ses.p_req[p]
    frac = ses.p_frac[p]
    if frac:
        return (c, float(frac), 1)
    if ses.p_gpumem[p]:
        return None
    if g <= 0:
        return None
    return (c, 1.0, round(g))


def workload_mix(ses: Session) -> Mix:
    """The typical GPU pod shapes among every pod of the snapshot, with their frequencies (cached per session)."""
    cached: Mix | None = ses.frag_cache.get("mix")
    if cached is not None:
        return cached
    counts: Counter[tuple[float, float, int]] = Counter()
    for p in range(len(ses.pods)):
        shape = _shape(ses, p)
        if shape is not None:
            counts[shape] += 1
    total = sum(counts.values())
    ranked = counts.most_common()
    chosen: list[tuple[tuple[float, float, int], int]] = []
    covered = 0
    i = 0
    while total and covered < TYPICAL_SHARE * total and i < len(ranked):
        for shape, n in ranked[i : i + SHAPE_STEP]:
            chosen.append((shape, n))
            covered += n
        i += SHAPE_STEP
    if not chosen:
        chosen = [((0.0, 1.0, 1), 1)]
        covered = 1
    mix = Mix(
        cpu=np.array([s[0] for s, _ in chosen], dtype=np.float64),
        gpu=np.array([s[1] for s, _ in chosen], dtype=np.float64),
        count=np.array([s[2] for s, _ in chosen], dtype=np.float64),
        weight=np.array([n / covered for _, n in chosen], dtype=np.float64),
    )
    ses.frag_cache["mix"] = mix
    return mix


def gpu_slots(ses: Session) -> np.ndarray:
    """Free share of every GPU of every node, ``[nodes, max GPUs]``, largest first (0 pads): whole idle GPUs count
    1, a shared GPU its idle share. Rebuilt for the nodes touched since the last call."""
    slots: np.ndarray | None = ses.frag_cache.get("slots")
    n = len(ses.nodes)
    width = int(max(1.0, float(ses.alloc[GPU].max()) if n else 1.0))
    if slots is None:
        slots = np.zeros((n, width))
        dirty = list(range(n))
    else:
        dirty = sorted(ses.slot_dirty)
    for i in dirty:
        row = [1.0] * max(0, round(float(ses.free[GPU, i])))
        row += [max(0.0, 1.0 - used) for used, _ in ses.groups[i].values()]
        row.sort(reverse=True)
        row = row[:width] + [0.0] * (width - len(row))
        slots[i] = row
    ses.slot_dirty.clear()
    ses.frag_cache["slots"] = slots
    return slots


def _frag(slots: np.ndarray, cpu_free: np.ndarray, mix: Mix) -> np.ndarray:
    """Expected fragmentation of each row of ``slots`` (leading axes kept), summed over the mix."""
    total = slots.sum(axis=-1)
    out = np.zeros(total.shape)
    for k in range(mix.weight.size):
        need = mix.gpu[k]
        fits = slots + EPS >= need
        hostable = (fits.sum(axis=-1) >= mix.count[k]) & (cpu_free + EPS >= mix.cpu[k])
        small = np.where(fits, 0.0, slots).sum(axis=-1)
        out += mix.weight[k] * np.where(hostable, small, total)
    return out


def fgd_delta(ses: Session, p: int, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Fragmentation after placing pod ``p`` minus before, per node (inf where it cannot go), and for a fraction the
    slot value (free share of the GPU) that achieves it on each node."""
    mix = workload_mix(ses)
    slots = gpu_slots(ses)
    cpu = ses.free[CPU]
    before = _frag(slots, cpu, mix)
    c = ses.p_req[p][1]
    shape = _shape(ses, p)
    delta = np.full(cand.size, np.inf)
    if shape is None:  # CPU-only (or gpu-memory) pod: only its CPU changes the picture
        after = _frag(slots, cpu - c, mix)
        delta = np.where(cand, after - before, np.inf)
        return delta, None
    _, need, count = shape
    if need < 1.0:
        # try each GPU with room: its free share drops by the fraction
        take = slots + EPS >= need
        trial = np.repeat(slots[:, None, :], slots.shape[1], axis=1)
        idx = np.arange(slots.shape[1])
        trial[:, idx, idx] -= need
        after = _frag(np.maximum(trial, 0.0), (cpu - c)[:, None], mix)
        after = np.where(take, after, np.inf)
        best = after.argmin(axis=1)
        rows = np.arange(slots.shape[0])
        delta = np.where(cand, after[rows, best] - before, np.inf)
        return delta, slots[rows, best]
    # whole GPUs come from idle ones (the largest slots)
    after_slots = slots.copy()
    after_slots[:, : int(count)] = 0.0
    after = _frag(after_slots, cpu - c, mix)
    return np.where(cand, after - before, np.inf), None


def bestfit_term(ses: Session, p: int, cand: np.ndarray) -> np.ndarray:
    """Best fit on CPU and GPU: 9 for the node left with the least free (normalised) after placement."""
    g, c, _ = ses.p_req[p]
    slots = gpu_slots(ses)
    gpu_free = slots.sum(axis=1)
    cpu_free = ses.free[CPU]
    gmax = max(1.0, float(ses.alloc[GPU].max()))
    cmax = max(1.0, float(ses.alloc[CPU].max()))
    left = 0.5 * np.maximum(gpu_free - g, 0.0) / gmax + 0.5 * np.maximum(cpu_free - c, 0.0) / cmax
    return np.where(cand, 9.0 * (1.0 - np.clip(left, 0.0, 1.0)), 0.0)


def fgd_term(ses: Session, p: int, cand: np.ndarray) -> np.ndarray:
    """FGD: 9 for the node whose fragmentation grows least (or shrinks most), scaled among the candidates."""
    delta, _ = fgd_delta(ses, p, cand)
    ok = cand & np.isfinite(delta)
    if not ok.any():
        return np.zeros(cand.size)
    lo, hi = float(delta[ok].min()), float(delta[ok].max())
    if hi - lo <= EPS:
        return np.where(ok, 9.0, 0.0)
    return np.where(ok, 9.0 * (1.0 - (delta - lo) / (hi - lo)), 0.0)


def fgd_group(ses: Session, p: int, node: int) -> float | None:
    """For a fraction under FGD: the free share of the GPU to put it on (the one that fragments least)."""
    mask = np.zeros(len(ses.nodes), dtype=bool)
    mask[node] = True
    _, target = fgd_delta(ses, p, mask)
    return None if target is None else float(target[node])

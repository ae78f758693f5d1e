"""Queue and job ordering, as KAI orders them.

Queues are compared level by level (siblings under one parent) with KAI's proportion queue order: under fair share
first, starved (allocated + job <= deserved) first, higher queue priority, no allocation without allocatable share,
smaller DRF dominant share with and without the candidate job, smaller allocatable share, older queue. Jobs inside a
leaf queue: higher priority, then below-min before at-min before above-min (elastic), then older, then uid.

The heaps replicate Go's ``container/heap`` (push / pop / fix of the root) because KAI's queue order is not a
total order; using the same heap discipline keeps our choices close to KAI's when comparisons are not transitive.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from functools import partial
from typing import Any

from kai_ray.scheduler.fairshare import UNLIMITED, allocatable_share
from kai_ray.scheduler.session import EPS, JobInfo, Session, le
from kai_ray.scheduler.tasks import tasks_to_allocate

NO_SHARE_DRF_MULTIPLIER = 1000.0


class GoHeap:
    """A binary heap with an external ``less``; same sift rules as Go's container/heap."""

    __slots__ = ("items", "less")

    def __init__(self, less: Callable[[Any, Any], bool]) -> None:
        self.items: list[Any] = []
        self.less = less

    def __len__(self) -> int:
        return len(self.items)

    def push(self, x: Any) -> None:
        self.items.append(x)
        self._up(len(self.items) - 1)

    def pop(self) -> Any:
        items = self.items
        n = len(items) - 1
        items[0], items[n] = items[n], items[0]
        self._down(0, n)
        return items.pop()

    def peek(self) -> Any:
        return self.items[0]

    def fix_top(self) -> None:
        if self.items and not self._down(0, len(self.items)):
            self._up(0)

    def _up(self, j: int) -> None:
        items, less = self.items, self.less
        while j > 0:
            i = (j - 1) // 2
            if not less(items[j], items[i]):
                break
            items[i], items[j] = items[j], items[i]
            j = i

    def _down(self, i0: int, n: int) -> bool:
        items, less = self.items, self.less
        i = i0
        while True:
            j1 = 2 * i + 1
            if j1 >= n:
                break
            j = j1
            j2 = j1 + 1
            if j2 < n and less(items[j2], items[j1]):
                j = j2
            if not less(items[j], items[i]):
                break
            items[i], items[j] = items[j], items[i]
            i = j
        return i > i0


# ---------------------------------------------------------------------- jobs


def job_key(a: Any) -> tuple[int, int, float, str]:
    """The total order behind :func:`job_less` as a sort key (smaller goes first)."""
    return (-a.priority, a.elastic_state(), a.created_at, a.uid)


def victim_key(a: Any) -> tuple[int, int, float, float, str]:
    """The victims queue's order as a key, sorted in reverse (the first victim has the largest key): KAI's job order
    reversed, with kai-ray's work-at-risk (``JobInfo.risk``, :mod:`.workloss`) between elastic state and age, so
    among otherwise equal victims the one that loses least goes first. All risks 0 is KAI's order exactly."""
    return (-a.priority, a.elastic_state(), -a.risk, a.created_at, a.uid)


def _victim_first(a: Any, b: Any) -> bool:
    if a.priority != b.priority:
        return a.priority < b.priority
    ea, eb = a.elastic_state(), b.elastic_state()
    if ea != eb:
        return ea > eb
    if a.risk != b.risk:
        return a.risk < b.risk
    if a.created_at != b.created_at:
        return a.created_at > b.created_at
    return a.uid > b.uid


def job_less(ses: Session) -> Callable[[JobInfo, JobInfo], bool]:
    def less(a: JobInfo, b: JobInfo) -> bool:
        if a.priority != b.priority:
            return a.priority > b.priority
        ea, eb = a.elastic_state(), b.elastic_state()
        if ea != eb:
            return ea < eb
        if a.created_at != b.created_at:
            return a.created_at < b.created_at
        return a.uid < b.uid

    return less


def job_request(ses: Session, job: JobInfo | None) -> tuple[float, float, float]:
    """Resources of the job's next allocation step (KAI's GetTasksToAllocateInitResourceVector)."""
    if job is None:
        return (0.0, 0.0, 0.0)
    cached = job.cache.get("req")
    if cached is not None and cached[0] == job.version:
        return cached[1]
    g = c = m = 0.0
    mig = bool(ses.p_mig)
    for p in tasks_to_allocate(ses, job):
        r = ses.charged(p) if mig else ses.p_req[p]
        g += r[0]
        c += r[1]
        m += r[2]
    job.cache["req"] = (job.version, (g, c, m))
    return (g, c, m)


# ---------------------------------------------------------------------- queues


class QueueView:
    """Read-only accessors over the session's queue arrays for one queue index."""

    def __init__(self, ses: Session) -> None:
        self.ses = ses
        self.total = ses.capacity

    def allocatable(self, q: int, r: int) -> float:
        n = self.ses.tree.nodes[q]
        return allocatable_share(n.quota[r], self.ses.q_fair[q][r], n.limit[r])

    def over_utilized(self, q: int) -> bool:
        fair, alloc = self.ses.q_fair[q], self.ses.q_alloc[q]
        return all(fair[r] < alloc[r] for r in range(3))

    def in_quota_with(self, q: int, req: tuple[float, float, float]) -> bool:
        quota, alloc = self.ses.tree.nodes[q].quota, self.ses.q_alloc[q]
        return all(le(alloc[r] + req[r], quota[r]) for r in range(3))

    def zero_share_violation(self, q: int, req: tuple[float, float, float]) -> bool:
        alloc = self.ses.q_alloc[q]
        return any(self.allocatable(q, r) == 0 and alloc[r] + req[r] > 0 for r in range(3))

    def drf(
        self,
        q: int,
        req: tuple[float, float, float] = (0.0, 0.0, 0.0),
        minus: tuple[float, float, float] = (0.0, 0.0, 0.0),
    ) -> float:
        alloc = self.ses.q_alloc[q]
        best = 0.0
        for r in range(3):
            share = self.allocatable(q, r)
            if share == UNLIMITED:
                share = self.total[r]
            a = alloc[r] + req[r] - minus[r]
            v = a * NO_SHARE_DRF_MULTIPLIER if share == 0 else a / share
            best = max(best, v)
        return best


def _cmp_q(x: float, y: float) -> int:
    if x == UNLIMITED:
        return 0 if y == UNLIMITED else 1
    if y == UNLIMITED:
        return -1
    if abs(x - y) <= EPS * max(1.0, abs(y)):
        return 0
    return -1 if x < y else 1


def queue_cmp(
    view: QueueView,
    lq: int,
    rq: int,
    lreq: tuple[float, float, float],
    rreq: tuple[float, float, float],
    in_quota_priority: bool,
    lminus: tuple[float, float, float] = (0.0, 0.0, 0.0),
    rminus: tuple[float, float, float] = (0.0, 0.0, 0.0),
) -> int:
    """-1 when queue ``lq`` (with its candidate job needing ``lreq``) goes before ``rq``; KAI's rules in order."""
    nodes = view.ses.tree.nodes
    ln, rn = nodes[lq], nodes[rq]
    if (
        in_quota_priority
        and ln.priority != rn.priority
        and view.in_quota_with(lq, lreq)
        and view.in_quota_with(rq, rreq)
    ):
        return -1 if ln.priority > rn.priority else 1
    lo, ro = view.over_utilized(lq), view.over_utilized(rq)
    if lo != ro:
        return 1 if lo else -1
    ls, rs = view.in_quota_with(lq, lreq), view.in_quota_with(rq, rreq)
    if ls != rs:
        return -1 if ls else 1
    if ln.priority != rn.priority:
        return -1 if ln.priority > rn.priority else 1
    lz, rz = view.zero_share_violation(lq, lreq), view.zero_share_violation(rq, rreq)
    if lz != rz:
        return 1 if lz else -1
    ld, rd = view.drf(lq, lreq, lminus), view.drf(rq, rreq, rminus)
    if ld != rd:
        return -1 if ld < rd else 1
    ld, rd = view.drf(lq), view.drf(rq)
    if ld != rd:
        return -1 if ld < rd else 1
    la = [view.allocatable(lq, r) for r in range(3)]
    ra = [view.allocatable(rq, r) for r in range(3)]
    lc = [_cmp_q(a, b) for a, b in zip(la, ra, strict=True)]
    if any(c < 0 for c in lc) and all(c <= 0 for c in lc):
        return -1
    if any(c > 0 for c in lc) and all(c >= 0 for c in lc):
        return 1
    if ln.created_at != rn.created_at:
        return -1 if ln.created_at < rn.created_at else 1
    return -1 if ln.uid < rn.uid else 1


class _QNode:
    """A queue in the order's tree. The link up to the parent is weak, and the parent queues' heaps compare through a
    weak proxy of the order: a search leaves no reference cycle behind, so when it ends reference counting frees its
    heaps and everything in them (after a preemption search at 5,000 nodes, 40,000 victim entries) at once, instead
    of the cyclic collector scanning them later."""

    __slots__ = ("__weakref__", "_parent", "children", "is_leaf", "needs_reorder", "q")

    def __init__(self, q: int, children: GoHeap, is_leaf: bool) -> None:
        self.q = q
        self.children = children
        self.is_leaf = is_leaf
        self.needs_reorder = False
        self._parent: weakref.ref[_QNode] | None = None

    @property
    def parent(self) -> _QNode | None:
        return self._parent() if self._parent is not None else None

    @parent.setter
    def parent(self, node: _QNode) -> None:
        self._parent = weakref.ref(node)


_ZERO = (0.0, 0.0, 0.0)


class JobsOrderByQueues:
    """KAI's hierarchical job order: pick the best top-level queue, then its best child, ... then its best job.

    ``victims=True`` is KAI's victims queue: the order reversed (least deserving first), items are victim
    representatives (anything with a job's ordering fields, a ``queue`` and an ``alloc`` vector), and a queue is
    judged as if the representatives already popped from it, and its next one, were gone, so victims are taken
    from the queues in turn as their shares shrink."""

    def __init__(self, ses: Session, reverse: bool = False, victims: bool = False) -> None:
        self.ses = ses
        self.view = QueueView(ses)
        self.reverse = reverse or victims
        self.victims = victims
        self.in_quota_priority = ses.cfg.queue_priority_in_quota_reclaim
        jl = job_less(ses)
        self._job_less = _victim_first if victims else (lambda a, b: jl(b, a)) if self.reverse else jl
        self._queue_less = partial(JobsOrderByQueues._node_less, weakref.proxy(self))
        self.roots = GoHeap(self._queue_less)
        self.nodes: dict[int, _QNode] = {}
        self.popped: dict[int, list[float]] = {}  # victims: leaf queue -> resources of the representatives popped
        self.requests: dict[int, tuple[float, float, float]] = {}  # job idx -> request overriding its pending step

    @staticmethod
    def _best_leaf(node: _QNode) -> _QNode | None:
        while not node.is_leaf:
            if not node.children.items:
                return None
            node = node.children.peek()
        return node

    def _best_job(self, node: _QNode) -> JobInfo | None:
        leaf = self._best_leaf(node)
        return leaf.children.peek() if leaf is not None and leaf.children.items else None

    def _request(self, job: JobInfo | None) -> tuple[float, float, float]:
        if job is not None and job.idx in self.requests:
            return self.requests[job.idx]
        return job_request(self.ses, job)

    def _victims_of(self, node: _QNode) -> tuple[float, float, float]:
        leaf = self._best_leaf(node)
        if leaf is None:
            return _ZERO
        done = self.popped.get(leaf.q, [0.0, 0.0, 0.0])
        nxt = leaf.children.peek().alloc if leaf.children.items else _ZERO
        return (done[0] + nxt[0], done[1] + nxt[1], done[2] + nxt[2])

    def _node_less(self, a: _QNode, b: _QNode) -> bool:
        if not a.children.items:
            return not self.reverse
        if not b.children.items:
            return self.reverse
        if self.victims:
            va, vb = self._victims_of(a), self._victims_of(b)
            res = queue_cmp(self.view, a.q, b.q, _ZERO, _ZERO, self.in_quota_priority, va, vb) < 0
            return not res
        ja, jb = self._best_job(a), self._best_job(b)
        ra, rb = self._request(ja), self._request(jb)
        res = queue_cmp(self.view, a.q, b.q, ra, rb, self.in_quota_priority) < 0
        return not res if self.reverse else res

    def empty(self) -> bool:
        return not self.roots.items

    def __len__(self) -> int:
        return sum(len(n.children) for n in self.nodes.values() if n.is_leaf)

    def push(self, job: JobInfo) -> None:
        q = job.queue
        if q < 0:
            return
        node = self.nodes.get(q)
        new = node is None
        if node is None:
            node = _QNode(q, GoHeap(self._job_less), True)
            self.nodes[q] = node
        node.children.push(job)
        if new:
            self._link(node)
        self._mark(node)

    def extend(self, items: list[Any]) -> None:
        """Push many items at once: a leaf queue's heap starts as its items sorted by the job order (a sorted list
        is a valid heap), which costs one C-level sort instead of a Python comparison per heap step."""
        by_queue: dict[int, list[Any]] = {}
        for it in items:
            if it.queue >= 0:
                by_queue.setdefault(it.queue, []).append(it)
        for q, lst in by_queue.items():
            node = self.nodes.get(q)
            if node is not None or len(lst) < 2:
                for it in lst:
                    self.push(it)
                continue
            lst.sort(key=victim_key if self.victims else job_key, reverse=self.reverse)
            node = _QNode(q, GoHeap(self._job_less), True)
            node.children.items = lst
            self.nodes[q] = node
            self._link(node)
            self._mark(node)

    def _link(self, node: _QNode) -> None:
        tree = self.ses.tree
        parent = tree.nodes[node.q].parent
        if parent < 0:
            if node.parent is None:
                self.roots.push(node)
            return
        pnode = self.nodes.get(parent)
        pnew = pnode is None
        if pnode is None:
            pnode = _QNode(parent, GoHeap(self._queue_less), False)
            self.nodes[parent] = pnode
        if node.parent is None:
            node.parent = pnode
            pnode.children.push(node)
        if pnew:
            self._link(pnode)

    def _mark(self, node: _QNode | None) -> None:
        while node is not None:
            node.needs_reorder = True
            node = node.parent

    def _next(self, heap: GoHeap) -> _QNode | None:
        while heap.items:
            node: _QNode = heap.peek()
            if node.needs_reorder:
                heap.fix_top()
                node.needs_reorder = False
                continue
            if not node.children.items:
                return None
            return node
        return None

    def pop(self) -> JobInfo | None:
        heap = self.roots
        node = self._next(heap)
        while node is not None and not node.is_leaf:
            node = self._next(node.children)
        if node is None:
            return None
        job: JobInfo = node.children.pop()
        if self.victims:
            acc = self.popped.setdefault(node.q, [0.0, 0.0, 0.0])
            for r in range(3):
                acc[r] += job.alloc[r]  # type: ignore[attr-defined]
        self._after_pop(node)
        return job

    def _after_pop(self, node: _QNode) -> None:
        if not node.children.items:
            if node.parent is not None:
                node.parent.children.pop()
            else:
                self.roots.pop()
            del self.nodes[node.q]
            if node.parent is not None:
                self._after_pop(node.parent)
            return
        self._mark(node)

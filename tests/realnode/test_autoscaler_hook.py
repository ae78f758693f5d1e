"""kai-ray's Ray autoscaler hook on a real node: a RayCluster with in-tree autoscaling asks for more workers than its
queue has room for; it never gets more worker pods than the room, and gets the new room when the queue grows.

Real: the real-node lane (kube-apiserver, kubelet, containerd, kube-proxy, CoreDNS), KubeRay's operator (a host
process), a Ray head, Ray workers and Ray's autoscaler v2 sidecar in pods from the lane's Ray image, kai-ray's hook
installed into that sidecar (``examples/headline/sitecustomize.py``: KubeRay 1.6 has no ``autoscalerOptions.command``),
kai-ray's podgrouper and scheduler (in this process) publishing the headroom on the PodGroup. The manifest is
``examples/autoscaler/raycluster-cpu.yaml``. Stand-in: ``nvidia.com/gpu`` is bookkeeping (the node advertises 8).

A Ray driver submitted through the head's job API (``examples/autoscaler/ask.py``) asks for 4 GPUs
(``request_resources``) and logs the GPUs of the live Ray nodes as they change. The room grows twice: the queue's GPU
limit goes from 2 to 4, of which the node has room for 3 (another queue's pod holds the other 5 GPUs), and then that
pod is deleted.
Watches over the whole run record every worker pod and every ``replicas`` the RayCluster ever had, so a pod created
beyond the room and deleted again would be seen, not only the state at the end.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import urllib3
import yaml

pytestmark = [pytest.mark.realnode, pytest.mark.ray, pytest.mark.slow]

pytest.importorskip("kai_ray.testing.controlplane.realnode", reason="the real-node lane is not in this checkout")

from kai_ray.bench.e2e import install_defaults  # noqa: E402
from kai_ray.headroom.contract import SCALE_UP_CAPPED  # noqa: E402
from kai_ray.k8s.base.rest import (  # noqa: E402
    ApiError,
    Kube,
    events_path,
    iter_json_lines,
    pods_path,
    queues_path,
    ray_path,
)
from kai_ray.k8s.config import OperatorConfig  # noqa: E402
from kai_ray.k8s.podgrouping.operator import PodgrouperOperator  # noqa: E402
from kai_ray.k8s.scheduling.operator import build_scheduler  # noqa: E402
from kai_ray.testing.testbed import queue_body  # noqa: E402
from tests.realnode.helpers import logs, phase  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "autoscaler" / "raycluster-cpu.yaml"
APPS = (REPO / "examples" / "headline" / "sitecustomize.py", REPO / "examples" / "autoscaler" / "ask.py")
CLUSTER, GROUP = "autoscale", "gpu"
ROOM, MORE_ROOM, ASKED = 2, 3, 4  # the queue's GPU limit; the room once it is 4 (the node's free GPUs); the ask
TIMEOUT = 600.0  # a loaded 2-core CI machine starts Ray pods slowly
DRIVER = f"python /apps/ask.py --gpus {ASKED}"  # examples/autoscaler/ask.py, mounted into the head


class Follow:
    """A list+watch of one collection on its own thread: ``apply(kind, obj, at)`` sees every ADDED/MODIFIED/DELETED
    object, and ``SYNC`` with the whole list first and after an expired watch; ``at`` is ``time.monotonic()``."""

    def __init__(self, kube: Kube, path: str, query: dict[str, str], apply: Callable[[str, Any, float], None]) -> None:
        self.kube, self.path, self.query, self.apply = kube, path, query, apply
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"follow-{path}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                listing = self.kube.get(self.path, **self.query)
                self.apply("SYNC", listing["items"], time.monotonic())
                rv = listing["metadata"]["resourceVersion"]
                while not self._stop.is_set():
                    query = {**self.query, "watch": "true", "resourceVersion": rv, "timeoutSeconds": "5"}
                    resp = self.kube.open_stream(self.path, query, timeout=30)
                    for event in iter_json_lines(resp):
                        if event["type"] == "ERROR":
                            raise ApiError(int(event["object"].get("code") or 410), "watch", "expired")
                        rv = event["object"]["metadata"]["resourceVersion"]
                        if event["type"] != "BOOKMARK":
                            self.apply(event["type"], event["object"], time.monotonic())
            except (ApiError, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                self.errors.append(repr(exc))
                self._stop.wait(0.5)


class Workers:
    """Every worker pod of the cluster the watch ever reported: how many existed at each moment (Pending and
    terminating included), when each first ran, and the RayCluster's worker ``replicas`` over time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.live: dict[str, str] = {}
        self.counts: list[tuple[float, int]] = []
        self.running_at: dict[str, float] = {}
        self.created_at: dict[str, float] = {}
        self.replicas: list[tuple[float, int]] = []

    def pod(self, kind: str, pod: Any, at: float) -> None:
        if kind == "SYNC":
            with self.lock:
                listed = {p["metadata"]["name"] for p in pod}
                self.live = {name: phase for name, phase in self.live.items() if name in listed}
                if self.counts and self.counts[-1][1] != len(self.live):
                    self.counts.append((at, len(self.live)))
            for item in pod:
                self.pod("ADDED", item, at)
            return
        name, phase = pod["metadata"]["name"], (pod.get("status") or {}).get("phase", "")
        with self.lock:
            if kind == "DELETED" or phase in ("Succeeded", "Failed"):
                self.live.pop(name, None)
            else:
                self.live[name] = phase
                self.created_at.setdefault(name, at)
                if phase == "Running":
                    self.running_at.setdefault(name, at)
            if not self.counts or self.counts[-1][1] != len(self.live):
                self.counts.append((at, len(self.live)))

    def cluster(self, kind: str, rc: Any, at: float) -> None:
        if kind == "SYNC":
            for item in rc:
                self.cluster("ADDED", item, at)
            return
        groups = (rc.get("spec") or {}).get("workerGroupSpecs") or []
        replicas = next((int(g.get("replicas") or 0) for g in groups if g.get("groupName") == GROUP), 0)
        with self.lock:
            if kind != "DELETED" and (not self.replicas or self.replicas[-1][1] != replicas):
                self.replicas.append((at, replicas))

    def running(self) -> int:
        with self.lock:
            return sum(1 for phase in self.live.values() if phase == "Running")

    def most(self, series: list[tuple[float, int]], before: float = float("inf")) -> int:
        with self.lock:
            return max((n for t, n in series if t < before), default=0)


def _wait(what: str, check: Callable[[], Any], timeout: float = TIMEOUT, diag: Callable[[], str] = str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{diag()}")


def _manifest(namespace: str, queue: str, image: str) -> list[dict[str, Any]]:
    """The example's RayCluster, Role and RoleBinding in the test's namespace, queue and image (its Queue is made by
    the test under a parent of its own)."""
    text = EXAMPLE.read_text().replace("kai-ray-ray", image)
    docs = [d for d in yaml.safe_load_all(text) if d and d["kind"] != "Queue"]
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
        for subject in doc.get("subjects", []):
            subject["namespace"] = namespace
        if doc["kind"] == "RayCluster":
            doc["metadata"]["labels"]["kai.scheduler/queue"] = queue
    return docs


def _post_json(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        loaded: dict[str, Any] = json.loads(resp.read())
    return loaded


def _dashboard(kube: Kube, ns: str) -> str | None:
    """The head pod's job API (``http://<pod IP>:8265``), once it answers; the host reaches pod IPs over the CNI
    bridge."""
    heads = kube.get(pods_path(ns), labelSelector=f"ray.io/cluster={CLUSTER},ray.io/node-type=head")["items"]
    ip = next((p.get("status", {}).get("podIP") for p in heads if p.get("status", {}).get("phase") == "Running"), None)
    if not ip:
        return None
    try:
        with urllib.request.urlopen(f"http://{ip}:8265/api/version", timeout=5) as resp:
            return f"http://{ip}:8265" if resp.status == 200 else None
    except OSError:
        return None


def _driver_gpus(dashboard: str, job: str) -> list[tuple[float, int]]:
    """ask.py's ``{"t", "gpus"}`` lines from the job's log: the GPUs of the live Ray nodes, as the driver saw them."""
    with urllib.request.urlopen(f"{dashboard}/api/jobs/{job}/logs", timeout=30) as resp:
        log = json.loads(resp.read()).get("logs", "")
    out = []
    for line in log.splitlines():
        with contextlib.suppress(ValueError):
            rec = json.loads(line)
            if isinstance(rec, dict) and "gpus" in rec:
                out.append((float(rec["t"]), int(rec["gpus"])))
    return out


def _capped(kube: Kube, ns: str) -> list[str]:
    sel = f"involvedObject.name={CLUSTER},reason={SCALE_UP_CAPPED}"
    return [e.get("message", "") for e in kube.get(events_path(ns), fieldSelector=sel)["items"]]


def _times(workers: Workers, gpus: list[tuple[float, int]], since: float, since_wall: float, until: float) -> str:
    """When the worker created in ``[since, until)`` was created, ran, and its Ray node joined, from ``since``."""
    out = []
    for name in sorted(n for n, t in workers.created_at.items() if since <= t < until):
        ran = workers.running_at.get(name)
        out.append(
            f"{name} created {workers.created_at[name] - since:.1f}s, running "
            f"{'-' if ran is None else f'{ran - since:.1f}'}s"
        )
    joined = [t for t, n in gpus if t >= since_wall]
    return f"{'; '.join(out)}; Ray node joined {joined[0] - since_wall:.1f}s" if joined else "; ".join(out)


def test_the_autoscaler_never_gets_more_workers_than_the_queue_has_room_for_and_grows_with_it(
    real_node: Any, kube: Kube, namespace: str, make_pod: Callable[..., dict[str, Any]]
) -> None:
    ns, plane = namespace, real_node.plane
    plane.install_crds(kuberay=True)
    image = real_node.load_image("ray")
    install_defaults(kube, {"train": 50, "build": 100})
    root, queue, other = f"{ns}-root", f"{ns}-ray", f"{ns}-other"
    gpus_on_node = int(real_node.gpus)
    held = gpus_on_node - MORE_ROOM  # another queue's pod leaves the node room for 3 of the 4 workers
    kube.create(queues_path(), queue_body(root, gpu_quota=gpus_on_node))
    kube.create(queues_path(), queue_body(queue, gpu_quota=ROOM, gpu_limit=ROOM, parent=root))
    kube.create(queues_path(), queue_body(other, gpu_quota=held, gpu_limit=held, parent=root))
    data = {path.name: path.read_text() for path in APPS}
    kube.create(f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "kai-ray-autoscaler-hook"}, "data": data})
    common: dict[str, Any] = {
        "kubeconfig": str(plane.kubeconfig_path),
        "namespaces": (ns,),
        "node_selector": {"kubernetes.io/hostname": real_node.name},
        "leader_elect": False,
        "metrics_port": 0,
        "health_port": 0,
        "bind_address": "127.0.0.1",
        "schedule_period": 0.5,
    }
    operators: list[Any] = [
        PodgrouperOperator(OperatorConfig(**common)).start(),
        build_scheduler(OperatorConfig(**common)).start(),
    ]
    workers = Workers()
    follows: list[Follow] = []
    try:
        # Another team's pod holds 5 of the node's 8 GPUs within its own queue's quota (not reclaimable).
        labels = {"kai.scheduler/queue": other, "priorityClassName": "build"}
        filler = make_pod("filler", "trap 'exit 0' TERM; while :; do sleep 1; done", gpus=held, labels=labels)
        kube.create(pods_path(ns), filler)
        plane.start_kuberay_operator(batch_scheduler=None, watch_namespace=ns, extra_args=["--use-kubernetes-proxy"])
        selector = {"labelSelector": f"ray.io/cluster={CLUSTER},ray.io/node-type=worker"}
        follows.append(Follow(kube, pods_path(ns), selector, workers.pod))
        follows.append(
            Follow(kube, ray_path("RayCluster", ns), {"fieldSelector": f"metadata.name={CLUSTER}"}, workers.cluster)
        )
        rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces"
        for doc in _manifest(ns, queue, image):
            path = ray_path("RayCluster", ns) if doc["kind"] == "RayCluster" else f"{rbac}/{ns}/{doc['kind'].lower()}s"
            kube.create(path, doc)

        def diag() -> str:
            """The namespace's pods, what the watches saw, the hook's Events and the autoscaler's last log lines."""
            pods = kube.get(pods_path(ns))["items"]
            lines = [f"{p['metadata']['name']}: {p.get('status', {}).get('phase')}" for p in pods]
            lines += [f"counts {workers.counts}", f"replicas {workers.replicas}", *_capped(kube, ns)]
            for p in pods:
                if p["metadata"].get("labels", {}).get("ray.io/node-type") == "head":
                    with contextlib.suppress(ApiError):
                        lines += logs(kube, ns, p["metadata"]["name"], "autoscaler").splitlines()[-30:]
            return "\n".join(lines)

        def said(text: str) -> bool:
            return any(text in message for message in _capped(kube, ns))

        _wait("the filler pod running", lambda: phase(kube, ns, "filler") == "Running", diag=diag)
        dashboard = _wait("the head's job API", lambda: _dashboard(kube, ns), diag=diag)
        job = _post_json(f"{dashboard}/api/jobs/", {"entrypoint": DRIVER})["submission_id"]

        def ray_gpus() -> int | None:
            seen = _driver_gpus(dashboard, job)
            return seen[-1][1] if seen else None

        # (a) room for 2: the autoscaler asks for 4, gets 2, and is refused the rest at its later passes (the hook
        # repeats an unchanged decision's Event once a minute).
        _wait(f"{ROOM} worker pods running", lambda: workers.running() >= ROOM, diag=diag)
        _wait(f"the driver to see {ROOM} GPUs", lambda: ray_gpus() == ROOM, diag=diag)
        _wait(f"a ScaleUpCapped Event 'refused ({ROOM} now)'", lambda: said(f"refused ({ROOM} now)"), diag=diag)

        # (b) the queue's limit grows to 4, but the node has one free GPU: the hook caps the ask at 3 workers.
        limit_grew, limit_grew_wall = time.monotonic(), time.time()
        kube.merge_patch(queues_path(queue), {"spec": {"resources": {"gpu": {"limit": ASKED}}}})
        _wait(f"{MORE_ROOM} worker pods running", lambda: workers.running() >= MORE_ROOM, diag=diag)
        _wait(f"the driver to see {MORE_ROOM} GPUs", lambda: ray_gpus() == MORE_ROOM, diag=diag)
        at_node = f"capped at {MORE_ROOM} ({ROOM} now)"
        _wait(f"a ScaleUpCapped Event '{at_node}'", lambda: said(at_node), diag=diag)

        # (c) the filler goes: the fourth worker.
        freed, freed_wall = time.monotonic(), time.time()
        kube.delete(pods_path(ns, "filler"))
        _wait(f"{ASKED} worker pods running", lambda: workers.running() >= ASKED, diag=diag)
        _wait(f"the driver to see {ASKED} GPUs", lambda: ray_gpus() == ASKED, diag=diag)
        gpus = _driver_gpus(dashboard, job)
        capped = _capped(kube, ns)
    finally:
        for follow in follows:
            follow.stop()
        with contextlib.suppress(ApiError):
            kube.delete(ray_path("RayCluster", ns, CLUSTER))
        for op in reversed(operators):
            op.stop()
        plane.stop_component("kuberay-operator")
        for q in (queue, other, root):
            with contextlib.suppress(ApiError):
                kube.delete(queues_path(q))

    def shifted(series: list[tuple[float, int]], zero: float) -> list[tuple[float, int]]:
        return [(round(t - zero, 1), n) for t, n in series]

    print(f"\n[autoscaler] worker pods over time (s from the limit growing): {shifted(workers.counts, limit_grew)}")
    print(f"[autoscaler] replicas over time: {shifted(workers.replicas, limit_grew)}")
    print(f"[autoscaler] GPUs the driver saw: {shifted(gpus, limit_grew_wall)}")
    print(f"[autoscaler] limit 2 -> 4: {_times(workers, gpus, limit_grew, limit_grew_wall, freed)}")
    print(f"[autoscaler] filler deleted: {_times(workers, gpus, freed, freed_wall, float('inf'))}")
    print(f"[autoscaler] {len(capped)} ScaleUpCapped Events: {sorted(set(capped))}")
    print(f"[autoscaler] watch restarts: {[f.errors for f in follows]}")
    for until, room in ((limit_grew, ROOM), (freed, MORE_ROOM), (float("inf"), ASKED)):
        assert workers.most(workers.counts, before=until) == room, (room, workers.counts)
        assert workers.most(workers.replicas, before=until) == room, (room, workers.replicas)
    for until_wall, room in ((limit_grew_wall, ROOM), (freed_wall, MORE_ROOM), (float("inf"), ASKED)):
        assert max(n for t, n in gpus if t < until_wall) == room, (room, gpus)
    created = sorted(workers.created_at.values())
    assert len(created) == ASKED, f"no worker pod was created and removed again: {workers.created_at}"

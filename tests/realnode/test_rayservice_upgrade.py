"""Ray-native scheduling: a RayService upgrade in a full queue, performed by the real KubeRay operator, on real Ray pods.

KubeRay upgrades a RayService (``upgradeStrategy: NewCluster``) by starting a second RayCluster beside the active one
and switching traffic once that cluster's Serve app is healthy, which it learns from the Ray dashboard. On KWOK pods
(which run nothing) the first cluster never even becomes active, so only a node that runs Ray can show an upgrade end
to end. Here the service holds its queue's whole GPU quota, a lower-priority pod of the same queue takes the rest up
to the queue's limit, another queue holds the node's other GPUs: the queue and the node are full when the Ray pod
template changes. kai-ray must start the pending cluster as the service's upgrade surge (above quota, preempting the
lower-priority pod), never touch the active cluster, and let go of the surge once KubeRay deletes the old cluster.

Real: the real-node lane (kube-apiserver, kube-controller-manager, kubelet, containerd, kube-proxy), KubeRay's
operator v1.6 (a host process reaching the dashboards through the apiserver's service proxy), Ray Serve in the pods
(``examples/headline/rayservice-cpu.yaml`` and ``serve_app.py``), kai-ray's podgrouper and scheduler. Stand-in: the
GPUs (``nvidia.com/gpu`` is bookkeeping only).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from kai_ray import constants as c
from kai_ray.k8s.base.rest import ApiError, Kube, podgroups_path, pods_path, queues_path, ray_path
from kai_ray.testing.testbed import queue_body
from tests.k8s.helpers import wait_until

pytestmark = [pytest.mark.realnode, pytest.mark.ray, pytest.mark.slow, pytest.mark.raynative]

pytest.importorskip("kai_ray.testing.controlplane.realnode", reason="the real-node lane is not in this checkout")

from kai_ray.bench.e2e import install_defaults  # noqa: E402
from kai_ray.bench.headline import EXAMPLES, PRIORITY_CLASSES  # noqa: E402
from kai_ray.k8s.config import OperatorConfig  # noqa: E402
from kai_ray.k8s.podgrouping.operator import PodgrouperOperator  # noqa: E402
from kai_ray.k8s.scheduling.operator import build_scheduler  # noqa: E402

SERVICE = "upgrade-serve"
DEADLINE = 600.0  # Ray heads start in about a minute on an idle 2-core node; CI's is shared and loaded
HOLD = "trap 'exit 0' TERM; while :; do sleep 1; done"


def _service(ns: str, queue: str, image: str) -> dict[str, Any]:
    """The headline's CPU RayService (head + one 1-GPU worker), upgraded with a new cluster and its old cluster
    deleted 10 s after the switch (KubeRay's default waits 60 s)."""
    (doc,) = [d for d in yaml.safe_load_all((EXAMPLES / "rayservice-cpu.yaml").read_text()) if d]
    doc = json.loads(json.dumps(doc).replace('"kai-ray-ray"', json.dumps(image)))
    doc["metadata"].update(name=SERVICE, namespace=ns)
    doc["metadata"]["labels"]["kai.scheduler/queue"] = queue
    doc["spec"]["upgradeStrategy"] = {"type": "NewCluster"}
    doc["spec"]["rayClusterDeletionDelaySeconds"] = 10
    out: dict[str, Any] = doc
    return out


def _status(kube: Kube, ns: str) -> dict[str, Any]:
    found: dict[str, Any] = kube.get(ray_path("RayService", ns, SERVICE)).get("status") or {}
    return found


def _cluster(status: dict[str, Any], which: str) -> str:
    return str((status.get(which) or {}).get("rayClusterName") or "")


def _cluster_pods(kube: Kube, ns: str, cluster: str) -> dict[str, dict[str, Any]]:
    items = kube.get(pods_path(ns), labelSelector=f"ray.io/cluster={cluster}")["items"]
    return {p["metadata"]["name"]: p for p in items}


def _gone(kube: Kube, path: str) -> bool:
    try:
        kube.get(path)
    except ApiError as exc:
        if exc.not_found:
            return True
        raise
    return False


def _answer(kube: Kube, ns: str) -> str | None:
    """POST one request through the RayService's Service (its ClusterIP, through kube-proxy); the cluster that the
    Service selects when predictions come back, else None."""
    try:
        svc = kube.get(f"/api/v1/namespaces/{ns}/services/{SERVICE}-serve-svc")
    except ApiError:
        return None
    ip = svc["spec"].get("clusterIP")
    if not ip or ip == "None":
        return None
    body = json.dumps({"features": [5.1, 3.5, 1.4, 0.2]}).encode()
    req = urllib.request.Request(f"http://{ip}:8000/", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            if "predictions" not in json.loads(resp.read()):
                return None
    except (OSError, ValueError):
        return None
    return str((svc["spec"].get("selector") or {}).get("ray.io/cluster") or "?")


def _queue_gpus(kube: Kube, name: str) -> float | None:
    allocated = (kube.get(queues_path(name)).get("status") or {}).get("allocated") or {}
    value = allocated.get(c.GPU_RESOURCE)
    return float(value) if value is not None else None


class Watch:
    """Samples, every half second, what must never happen to the active cluster before KubeRay switches traffic
    away from it (a pod of it deleted, replaced or evicted) and how the Service answers while the upgrade runs. The
    switch is read before the pods, so KubeRay's deletion of the old cluster (at least 10 s after it) never counts."""

    def __init__(self, kube: Kube, ns: str, old: str, old_pods: dict[str, str]) -> None:
        self.kube, self.ns, self.old, self.old_pods = kube, ns, old, old_pods  # name -> uid
        self.switched = False
        self.disturbed: list[str] = []
        self.answers = 0
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="upgrade-watch", daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(15)

    def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(ApiError):
                self.switched = (
                    self.switched or _cluster(_status(self.kube, self.ns), "activeServiceStatus") != self.old
                )
            if not self.switched:
                with contextlib.suppress(ApiError):
                    live = {p["metadata"]["name"]: p for p in self.kube.get(pods_path(self.ns))["items"]}
                    for name, uid in self.old_pods.items():
                        pod = live.get(name)
                        if pod is None or pod["metadata"]["uid"] != uid:
                            self.disturbed.append(f"{name} gone or replaced")
                        elif pod["metadata"].get("deletionTimestamp"):
                            self.disturbed.append(f"{name} terminating")
            if _answer(self.kube, self.ns):
                self.answers += 1
            else:
                self.failures += 1
            self._stop.wait(0.5)


@pytest.fixture
def kai_ray_and_kuberay(real_node: Any, kube: Kube, namespace: str) -> Iterator[str]:
    """kai-ray's podgrouper and scheduler in this process and KubeRay's operator as a host process, for this
    namespace; yields the Ray image's reference."""
    plane = real_node.plane
    plane.install_crds(kuberay=True)
    image = real_node.load_image("ray")
    install_defaults(kube, PRIORITY_CLASSES)
    data = {f: (EXAMPLES / f).read_text() for f in ("serve_app.py", "sitecustomize.py")}
    kube.create(f"/api/v1/namespaces/{namespace}/configmaps", {"metadata": {"name": "headline-serve"}, "data": data})
    common: dict[str, Any] = {
        "kubeconfig": str(plane.kubeconfig_path),
        "namespaces": (namespace,),
        "node_selector": {"kubernetes.io/hostname": real_node.name},
        "leader_elect": False,
        "metrics_port": 0,
        "health_port": 0,
        "bind_address": "127.0.0.1",
        "schedule_period": 0.5,
    }
    operators = [
        PodgrouperOperator(OperatorConfig(**common)).start(),
        build_scheduler(OperatorConfig(**common)).start(),
    ]
    try:
        plane.start_kuberay_operator(
            batch_scheduler=None, watch_namespace=namespace, extra_args=["--use-kubernetes-proxy"]
        )
        yield image
    finally:
        with contextlib.suppress(ApiError):
            kube.delete(ray_path("RayService", namespace, SERVICE))
        plane.stop_component("kuberay-operator")
        for op in reversed(operators):
            op.stop()


def test_a_rayservice_upgrade_in_a_full_queue_completes_with_kuberay(
    real_node: Any,
    kube: Kube,
    namespace: str,
    kai_ray_and_kuberay: str,
    make_pod: Callable[..., dict[str, Any]],
) -> None:
    ns, gpus = namespace, int(real_node.gpus)
    parent, serve, other = f"{ns}-ml", f"{ns}-serve", f"{ns}-other"
    kube.create(queues_path(), queue_body(parent, gpu_quota=gpus))
    kube.create(queues_path(), queue_body(serve, gpu_quota=1, gpu_limit=2, parent=parent))
    kube.create(queues_path(), queue_body(other, gpu_quota=gpus - 2, parent=parent))
    try:
        _run(kube, ns, gpus, serve, other, kai_ray_and_kuberay, make_pod)
    finally:
        with contextlib.suppress(ApiError):
            kube.delete(ray_path("RayService", ns, SERVICE))
        for q in (serve, other, parent):
            with contextlib.suppress(ApiError):
                kube.delete(queues_path(q))


def _run(
    kube: Kube, ns: str, gpus: int, serve: str, other: str, image: str, make_pod: Callable[..., dict[str, Any]]
) -> None:
    def pod(name: str, n: int, queue: str, priority: str) -> dict[str, Any]:
        return make_pod(name, HOLD, gpus=n, labels={"kai.scheduler/queue": queue, "priorityClassName": priority})

    # Another team holds every GPU but the two the serving queue may use (its quota 1, its limit 2).
    kube.create(pods_path(ns), pod("other-team", gpus - 2, other, "build"))
    svc = kube.create(ray_path("RayService", ns), _service(ns, serve, image))
    uid = svc["metadata"]["uid"]
    main_pg = f"pg-{SERVICE}-{uid}"
    old = wait_until(
        "the RayService's first cluster to be active",
        lambda: _cluster(_status(kube, ns), "activeServiceStatus"),
        DEADLINE,
        1.0,
    )
    wait_until("the service to answer through its Service", lambda: _answer(kube, ns) == old, DEADLINE, 1.0)
    # The lower-priority work of the same queue takes the queue's second GPU (over quota, up to the limit): the
    # queue and the node are now full.
    kube.create(pods_path(ns), pod("training", 1, serve, "train"))
    wait_until(
        "the training pod to run",
        lambda: (kube.get(pods_path(ns, "training")).get("status") or {}).get("phase") == "Running",
        DEADLINE,
        0.5,
    )
    wait_until("the serving queue at its limit", lambda: _queue_gpus(kube, serve) == 2.0, 120, 0.5)
    old_pods = {n: p["metadata"]["uid"] for n, p in _cluster_pods(kube, ns, old).items()}
    assert len(old_pods) == 2
    assert {
        (p["metadata"].get("annotations") or {}).get(c.PODGROUP_ANNOTATION)
        for p in _cluster_pods(kube, ns, old).values()
    } == {main_pg}

    with Watch(kube, ns, old, old_pods) as watch:
        # The upgrade: a new environment variable in the Ray pods' template makes KubeRay prepare a new cluster.
        spec = copy.deepcopy(kube.get(ray_path("RayService", ns, SERVICE))["spec"]["rayClusterConfig"])
        for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
            group["template"]["spec"]["containers"][0].setdefault("env", []).append({"name": "RELEASE", "value": "2"})
        kube.merge_patch(ray_path("RayService", ns, SERVICE), {"spec": {"rayClusterConfig": spec}})

        def pending() -> str:
            name = _cluster(_status(kube, ns), "pendingServiceStatus")
            return name if name and name != old else ""

        new = wait_until("KubeRay's pending cluster", pending, 300, 0.2)
        t_pending = time.monotonic()
        surge_pg = f"pg-{new}-{uid}"

        def surge_running() -> bool:
            live = _cluster_pods(kube, ns, new)
            stamped = {(p["metadata"].get("annotations") or {}).get(c.PODGROUP_ANNOTATION) for p in live.values()}
            return len(live) == 2 and stamped == {surge_pg} and all(p["spec"].get("nodeName") for p in live.values())

        wait_until("the pending cluster's pods placed as the upgrade surge", surge_running, DEADLINE, 0.5)
        t_surge = time.monotonic()
        surge = kube.get(podgroups_path(ns, surge_pg))
        assert surge["metadata"]["annotations"][c.UPGRADE_SURGE_OF] == main_pg
        wait_until("the training pod preempted", lambda: _gone(kube, pods_path(ns, "training")), 300, 0.5)

        def switched() -> bool:
            return _cluster(_status(kube, ns), "activeServiceStatus") == new

        wait_until("KubeRay to switch traffic to the new cluster", switched, DEADLINE, 0.5)
        t_switch = time.monotonic()
        wait_until("the old RayCluster deleted", lambda: _gone(kube, ray_path("RayCluster", ns, old)), 300, 0.5)
        wait_until("the old cluster's pods gone", lambda: not _cluster_pods(kube, ns, old), 300, 0.5)
        t_old_gone = time.monotonic()
        wait_until("an answer through the Service from the new cluster", lambda: _answer(kube, ns) == new, 300, 0.5)

    main = kube.get(podgroups_path(ns, main_pg))
    assert c.LAST_EVICTION not in (main["metadata"].get("annotations") or {}), "the active cluster was evicted"
    assert not watch.disturbed, f"the active cluster was disturbed before the switch: {watch.disturbed[:5]}"
    wait_until(
        "the surge released (the queue back to the service's one GPU)",
        lambda: _queue_gpus(kube, serve) == 1.0,
        120,
        0.5,
    )
    wait_until(
        "the new cluster's PodGroup no longer marked as a surge",
        lambda: (
            (kube.get(podgroups_path(ns, surge_pg))["metadata"].get("annotations") or {}).get(c.UPGRADE_SURGE_OF) == ""
        ),
        120,
        0.5,
    )
    figures = {
        "pending_to_surge_running_s": round(t_surge - t_pending, 1),
        "pending_to_traffic_switched_s": round(t_switch - t_pending, 1),
        "switch_to_old_cluster_gone_s": round(t_old_gone - t_switch, 1),
        "service_answers_during_upgrade": watch.answers,
        "service_failures_during_upgrade": watch.failures,
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    print("\nrayservice upgrade figures:", json.dumps(figures))

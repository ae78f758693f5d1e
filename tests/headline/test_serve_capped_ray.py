"""Serve's autoscaling asks Ray for a GPU worker; kai-ray's hook holds Ray's autoscaler to the queue's headroom.

The headline's RayService autoscales its app between 1 and 2 replicas, one per GPU worker (rayservice-cpu.yaml). Under
load Serve wants a second replica, which cannot be placed, so Ray's autoscaler wants a second ``gpu`` worker. While
the scheduler publishes no headroom for it the hook caps the scale-up (a ScaleUpCapped Event on the RayCluster, no
worker pod created to sit Pending) and Serve keeps answering with one replica; once the scheduler publishes room,
KubeRay creates the pod, it joins Ray and Serve runs its second replica there.

What is real: the kube-apiserver with KubeRay's CRDs and the KubeRay operator creating pods from ``replicas``;
``python -m kai_ray.autoscaler`` (Ray's autoscaler v2 with kai-ray's KubeRay provider) as a subprocess; the PodGroup
holding the published headroom; a Ray head whose pending Serve replica is the demand; Ray Serve with the shipped
deployment options; HTTP clients. What stands in: the pods are KWOK's and run nothing, so for each worker pod KubeRay
creates the test starts a local Ray node carrying that pod's name as ``RAY_CLOUD_INSTANCE_ID`` (what KubeRay sets in
the pod); the test publishes the headroom the scheduler would; Serve's delays are shortened.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kai_ray import constants as c
from kai_ray.autoscaler.providers import podgroup_name_for
from kai_ray.headroom import contract as hr
from kai_ray.k8s.base.rest import Kube, events_path, podgroups_path, pods_path, ray_path
from kai_ray.testing.controlplane.harness import ControlPlane
from tests.autoscaler.conftest import OBJECT_STORE
from tests.autoscaler.helpers import podgroup, raycluster, start_autoscaler, stop_process, worker_group
from tests.headline.serve_load import (
    APP,
    QUIET,
    SHORT_DELAYS,
    Load,
    free_port,
    running_replicas,
    seconds_until,
    serve_environment,
    shipped_deployment,
)
from tests.k8s.helpers import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.kuberay, pytest.mark.slow, pytest.mark.controlplane]

GROUP = "gpu"
LOAD_BOUND_S = 240.0


def _publish(kube: Kube, ns: str, pg: str, pods: int, room: int) -> None:
    ann = hr.headroom_annotations({GROUP: hr.SubgroupHeadroom(pods, room)})
    kube.merge_patch(podgroups_path(ns, pg), {"metadata": {"annotations": ann}})


def _worker_pods(kube: Kube, ns: str) -> list[str]:
    items = kube.get(pods_path(ns), labelSelector="ray.io/cluster=rc,ray.io/node-type=worker")["items"]
    return sorted(p["metadata"]["name"] for p in items if not p["metadata"].get("deletionTimestamp"))


def _replicas(kube: Kube, ns: str) -> int:
    return int(kube.get(ray_path("RayCluster", ns, "rc"))["spec"]["workerGroupSpecs"][0].get("replicas", 0))


def _capped_events(kube: Kube, ns: str) -> list[str]:
    items = kube.get(events_path(ns), fieldSelector="involvedObject.name=rc")["items"]
    return [str(e["message"]) for e in items if e["reason"] == hr.SCALE_UP_CAPPED]


def test_serves_scale_up_waits_for_headroom_then_grows_onto_the_new_worker(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    ray_cluster: Callable[..., Any],
    ray_env: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ray
    from ray import serve

    ns = namespace
    serve_environment(monkeypatch, fast_metrics=True)
    monkeypatch.setenv("RAY_enable_autoscaler_v2", "1")
    monkeypatch.setenv("ENABLE_DETERMINISTIC_HEAD_POD_NAME", "true")  # KubeRay's head pod is rc-head, our head's id
    serve_app = importlib.import_module("serve_app")
    shipped = shipped_deployment()
    scaling = {**shipped["autoscaling_config"], **SHORT_DELAYS}
    low, high = scaling["min_replicas"], scaling["max_replicas"]

    head = ray_cluster(env_vars={"RAY_CLOUD_INSTANCE_ID": "rc-head", "RAY_NODE_TYPE_NAME": "headgroup"})

    def join(pod: str) -> None:
        """The Ray node KubeRay's pod would start: one logical GPU, the pod's name as its instance id."""
        env = {"RAY_CLOUD_INSTANCE_ID": pod, "RAY_NODE_TYPE_NAME": GROUP}
        head.add_node(num_cpus=0, num_gpus=1, object_store_memory=OBJECT_STORE, env_vars=env)

    group = worker_group(GROUP, low, low, high, gpus=1)
    group["rayStartParams"] = {"num-cpus": "0", "num-gpus": "1"}
    body = raycluster("rc", group)
    body["spec"]["headGroupSpec"]["rayStartParams"] = {"num-cpus": "0"}
    body["spec"]["autoscalerOptions"] = {"version": "v2", "idleTimeoutSeconds": 600}

    control_plane.start_kuberay_operator(batch_scheduler=None, watch_namespace=ns)
    proc: subprocess.Popen[bytes] | None = None
    load: Load | None = None
    log_path = ray_env / "autoscaler.log"
    try:
        rc = kube.create(ray_path("RayCluster", ns), body)
        pg = podgroup_name_for(rc)
        limits = {c.SUBGROUP_MAX: json.dumps({"headgroup": 1, GROUP: high})}
        kube.create(podgroups_path(ns), podgroup(pg, annotations=limits))
        (first,) = wait_until("KubeRay's first worker pod", lambda: _worker_pods(kube, ns), 90, 0.5)
        _publish(kube, ns, pg, pods=low, room=0)  # the queue is full: the scheduler has no room for another
        join(first)
        head.wait_for_nodes()

        ray.init(address=head.address)
        port = free_port()
        url = f"http://127.0.0.1:{port}/"
        serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
        deployment = serve_app.Classifier.options(
            ray_actor_options=shipped["ray_actor_options"], autoscaling_config=scaling, logging_config=QUIET
        )
        serve.run(deployment.bind(), name=APP, route_prefix="/", blocking=False)
        seconds_until(f"{low} running replica(s)", lambda: running_replicas(serve) == low, 180)
        proc = start_autoscaler(str(control_plane.kubeconfig_path), ns, head.gcs_address, log_path)

        load = Load(url, threads=3 * high * int(scaling["target_ongoing_requests"]), seconds=LOAD_BOUND_S, rows=64)
        load.start()
        t_load = time.monotonic()
        try:
            capped = wait_until("a ScaleUpCapped Event on the RayCluster", lambda: _capped_events(kube, ns), 120, 0.5)
        except AssertionError:
            raise AssertionError(f"autoscaler log:\n{log_path.read_text(errors='replace')[-3000:]}") from None
        t_capped = time.monotonic()
        assert any(f"scale-up to {high} pods refused ({low} now)" in m and "headroom" in m for m in capped), capped
        for _ in range(16):  # several autoscaler rounds (1 s each) while capped: nothing beyond the headroom
            assert _replicas(kube, ns) == low and _worker_pods(kube, ns) == [first]
            assert running_replicas(serve) == low
            time.sleep(0.5)

        # The scheduler finds room for one more GPU worker: the hook lets Ray's scale-up through.
        _publish(kube, ns, pg, pods=low, room=high - low)
        t_room = time.monotonic()
        seconds_until("the autoscaler to follow the new headroom", lambda: _replicas(kube, ns) == high, 90)
        pods = wait_until(
            f"{high} worker pods", lambda: [p for p in [_worker_pods(kube, ns)] if len(p) == high], 90, 0.5
        )
        (second,) = [p for p in pods[0] if p != first]
        join(second)
        grown = seconds_until(f"{high} running replicas", lambda: running_replicas(serve) == high, 120)
        result = load.stop()
        load = None
        assert not result.failed, result.failed[:5]
        assert proc.poll() is None, log_path.read_text(errors="replace")[-3000:]
        print(
            f"\nServe under load: capped {t_capped - t_load:.1f}s after the load began ({len(capped)} ScaleUpCapped "
            f"Events, '{capped[0]}'); room published -> {high} replicas {time.monotonic() - t_room:.1f}s "
            f"(replica running {grown:.1f}s after the node joined); {result.ok} requests, 0 failed, "
            f"{result.retries} retries, p99 {result.percentile(99) * 1000:.0f} ms"
        )
    finally:
        if load is not None:
            load.stop()
        stop_process(proc)
        serve.shutdown()
        control_plane.stop_component("kuberay-operator")

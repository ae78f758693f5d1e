"""The autoscaler hook driven by Ray's own autoscaler (v1 and v2), end to end, with real parts everywhere we can.

What is real: a Ray head (GCS + raylet) whose pending tasks are the demand; ``python -m kai_ray.autoscaler`` (Ray's
monitor with kai-ray's KubeRay providers) as a subprocess; the kube-apiserver with KubeRay's CRDs; the KubeRay
operator creating pods from ``replicas``; the PodGroup holding the published headroom. What is not: the KWOK pods run
no containers, so the workers KubeRay creates never join Ray (the autoscaler keeps asking, and keeps being capped).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from kai_ray import constants as c
from kai_ray.autoscaler.providers import podgroup_name_for
from kai_ray.headroom import contract as hr
from kai_ray.k8s.base.rest import Kube, events_path, podgroups_path, pods_path, ray_path
from kai_ray.testing.controlplane.harness import ControlPlane
from tests.autoscaler.helpers import podgroup, raycluster, start_autoscaler, stop_process, wait_until, worker_group

pytestmark = [pytest.mark.ray, pytest.mark.kuberay, pytest.mark.slow, pytest.mark.controlplane]


def _publish(kube: Kube, ns: str, pg: str, pods: int, room: int) -> None:
    ann = hr.headroom_annotations({"workers": hr.SubgroupHeadroom(pods, room)})
    kube.merge_patch(podgroups_path(ns, pg), {"metadata": {"annotations": ann}})


def _workers(kube: Kube, ns: str) -> list[dict[str, Any]]:
    items = kube.get(pods_path(ns), labelSelector="ray.io/cluster=rc,ray.io/node-type=worker")["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _watch(kube: Kube, ns: str, seconds: float, seen: dict[str, int]) -> None:
    """Poll for ``seconds``, keeping the highest replicas and worker-pod counts seen."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        rc = kube.get(ray_path("RayCluster", ns, "rc"))
        seen["replicas"] = max(seen.get("replicas", 0), int(rc["spec"]["workerGroupSpecs"][0].get("replicas", 0)))
        seen["pods"] = max(seen.get("pods", 0), len(_workers(kube, ns)))
        time.sleep(0.2)


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_ray_autoscaler_never_scales_beyond_headroom(
    version: str,
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    ray_cluster: Any,
    ray_env: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ray

    ns = namespace
    if version == "v2":
        monkeypatch.setenv("RAY_enable_autoscaler_v2", "1")
    # v2 matches Ray nodes to pods by RAY_CLOUD_INSTANCE_ID: give KubeRay's head pod a known name and our head that id.
    monkeypatch.setenv("ENABLE_DETERMINISTIC_HEAD_POD_NAME", "true")
    head = ray_cluster(env_vars={"RAY_CLOUD_INSTANCE_ID": "rc-head", "RAY_NODE_TYPE_NAME": "headgroup"})
    group = worker_group("workers", 0, 0, 6)
    group["rayStartParams"] = {"num-cpus": "1"}
    body = raycluster("rc", group)
    body["spec"]["headGroupSpec"]["rayStartParams"] = {"num-cpus": "0"}
    body["spec"]["autoscalerOptions"] = {"version": version, "idleTimeoutSeconds": 600}

    control_plane.start_kuberay_operator(batch_scheduler=None, watch_namespace=ns)
    proc: subprocess.Popen[bytes] | None = None
    log_path = ray_env / "autoscaler.log"
    try:
        rc = kube.create(ray_path("RayCluster", ns), body)
        pg = podgroup_name_for(rc)
        kube.create(
            podgroups_path(ns),
            podgroup(pg, annotations={c.SUBGROUP_MAX: json.dumps({"headgroup": 1, "workers": 6})}),
        )
        _publish(kube, ns, pg, pods=0, room=2)

        ray.init(address=head.address)

        @ray.remote(num_cpus=1)
        def work() -> int:
            return 1

        demand = [work.remote() for _ in range(5)]  # 5 one-CPU tasks; the head has none: 5 workers wanted

        proc = start_autoscaler(str(control_plane.kubeconfig_path), ns, head.gcs_address, log_path)

        def replicas() -> int:
            return int(kube.get(ray_path("RayCluster", ns, "rc"))["spec"]["workerGroupSpecs"][0].get("replicas", 0))

        def log_tail() -> str:
            return log_path.read_text(errors="replace")[-3000:]

        try:
            assert wait_until(
                "KubeRay's head pod", lambda: kube.get(pods_path(ns), fieldSelector="metadata.name=rc-head")["items"]
            )
            wait_until("the autoscaler to scale up to the headroom", lambda: replicas() == 2, timeout=90)
        except AssertionError:
            Path("/tmp/kai-autoscaler-v2.log").write_text(log_path.read_text(errors="replace"))
            raise AssertionError(f"autoscaler log:\n{log_tail()}") from None
        seen: dict[str, int] = {}
        _watch(kube, ns, 8.0, seen)  # several autoscaler rounds, each asking for 5
        assert seen == {"replicas": 2, "pods": 2}, seen
        capped = wait_until(
            "a ScaleUpCapped Event on the RayCluster",
            lambda: [
                e
                for e in kube.get(events_path(ns), fieldSelector="involvedObject.name=rc")["items"]
                if e["reason"] == hr.SCALE_UP_CAPPED
            ],
            30,
        )
        assert "capped at 2" in capped[0]["message"] and "headroom" in capped[0]["message"]

        # The scheduler finds room for one more: the hook follows, and still no pod beyond it.
        _publish(kube, ns, pg, pods=2, room=1)
        wait_until("the autoscaler to follow the new headroom", lambda: replicas() == 3, timeout=60)
        seen = {}
        _watch(kube, ns, 6.0, seen)
        assert seen == {"replicas": 3, "pods": 3}, seen
        print(f"\n{version}: 5 workers wanted; pods created beyond the headroom: {seen['pods'] - 3}")
        assert proc.poll() is None, log_tail()
        del demand
    finally:
        stop_process(proc)
        control_plane.stop_component("kuberay-operator")

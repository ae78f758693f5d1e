"""The headline's training as a SidecarMode RayJob on a real node: ``examples/headline/rayjob-training-sidecar-cpu.yaml``
(changed in namespace, queue, image, checkpoint directory and step count) is one gang that kai-ray schedules, trains
and completes; KubeRay submits the job from a container of the head pod, so no submitter Job or pod exists.

Real: the real-node lane (kubelet, containerd, kube-controller-manager, kube-proxy, CoreDNS), KubeRay's operator (a
host process reaching Ray's dashboard through the apiserver's service proxy), Ray heads, workers and the job in pods
from the lane's Ray image, kai-ray's podgrouper and scheduler in this process. Stand-in: ``nvidia.com/gpu`` is
bookkeeping. The stage (queues, ConfigMaps, operators) is :class:`kai_ray.bench.headline.Story`'s.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

pytestmark = [pytest.mark.realnode, pytest.mark.ray, pytest.mark.slow]

pytest.importorskip("kai_ray.testing.controlplane.realnode", reason="the real-node lane is not in this checkout")

from kai_ray.bench.headline import Story, StoryConfig, example_manifest, read_progress  # noqa: E402
from kai_ray.k8s.base.rest import ApiError, podgroups_path, pods_path, ray_path  # noqa: E402
from tests.k8s.helpers import wait_until  # noqa: E402

NAME = "headline-train-sidecar"
STEPS = 60  # a few seconds of training once the workers are up: the lane's wall time goes to starting Ray pods
TIMEOUT = 600.0  # CI's loaded 2-core machine: Ray pods take minutes to start there


def test_sidecar_rayjob_is_one_gang_scheduled_by_kai_ray_trains_and_succeeds(
    real_node: Any, kube: Any, namespace: str
) -> None:
    story = Story(real_node, kube, namespace, StoryConfig(), lambda msg: print(f"[sidecar] {msg}"))
    try:
        story.setup()
        job = example_manifest(
            "rayjob-training-sidecar-cpu.yaml", namespace, story.q_training, story.ray_image, story.ckpt_root
        )
        assert job["spec"]["submissionMode"] == "SidecarMode" and "submitterPodTemplate" not in job["spec"]
        job["spec"]["entrypoint"] = job["spec"]["entrypoint"].replace("--steps 3000", f"--steps {STEPS}")
        kube.create(ray_path("RayJob", namespace), job)
        ckpt = story.ckpt_root / NAME

        pg = wait_until(
            "the RayJob's PodGroup",
            lambda: next(
                (
                    g
                    for g in kube.get(podgroups_path(namespace))["items"]
                    if any(
                        r["kind"] == "RayJob" and r["name"] == NAME for r in g["metadata"].get("ownerReferences", [])
                    )
                ),
                None,
            ),
            TIMEOUT,
            0.5,
        )
        assert pg["spec"]["minMember"] == 2, "one gang: the head (submitter inside) and minReplicas workers"
        assert "submitter" not in {sg["name"] for sg in pg["spec"].get("subGroups") or []}

        seen: list[int] = []

        def training_moves() -> dict[str, Any] | None:
            p = read_progress(ckpt) or {}
            step = p.get("step")
            if isinstance(step, int) and (not seen or step != seen[-1]):
                seen.append(step)
            return p if len(seen) >= 3 else None

        wait_until("the training's step counter to rise", training_moves, TIMEOUT, 0.2)
        heads = story.ray_pods("RayJob", NAME, "head")
        ray_pods = heads + story.ray_pods("RayJob", NAME, "worker")
        assert len(heads) == 1 and len(ray_pods) >= 2, [p["metadata"]["name"] for p in ray_pods]
        for pod in ray_pods:  # scheduled by kai-ray, as members of the RayJob's PodGroup
            assert pod["spec"]["schedulerName"] == "kai-scheduler" and pod["spec"].get("nodeName"), pod["metadata"]
            assert pod["metadata"]["annotations"]["pod-group-name"] == pg["metadata"]["name"]
        commands = [" ".join([*c.get("command", []), *c.get("args", [])]) for c in heads[0]["spec"]["containers"]]
        assert any("ray job submit" in cmd for cmd in commands), f"KubeRay submits from the head pod: {commands}"

        def finished() -> dict[str, Any] | None:
            training_moves()
            status = kube.get(ray_path("RayJob", namespace, NAME)).get("status") or {}
            if status.get("jobStatus") in ("FAILED", "STOPPED") or status.get("jobDeploymentStatus") == "Failed":
                raise AssertionError(f"the RayJob did not succeed: {status}")
            return status if status.get("jobDeploymentStatus") == "Complete" else None

        status = wait_until("the RayJob to complete", finished, TIMEOUT, 0.5)
        assert status["jobStatus"] == "SUCCEEDED", status
        done = read_progress(ckpt) or {}
        print(f"\n[sidecar] steps seen {seen[:3]}...{seen[-3:]}, final progress step {done.get('step')}")
        assert done.get("done") and done.get("step") == STEPS and done.get("starts") == 1, done
        assert seen == sorted(seen), "the step counter never goes back"
        assert (ckpt / "checkpoint.npz").is_file(), "train.py checkpointed to the hostPath directory"

        jobs = kube.get(f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]
        assert jobs == [], "SidecarMode: KubeRay creates no submitter Job"
        submitters = kube.get(pods_path(namespace), labelSelector="batch.kubernetes.io/job-name")["items"]
        assert submitters == [], "and so no submitter pod"
    finally:
        with contextlib.suppress(ApiError):
            kube.delete(ray_path("RayJob", namespace, NAME))
        story.close()

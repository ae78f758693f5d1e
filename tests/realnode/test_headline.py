"""The headline on a real node: KubeRay creates real Ray pods from the lane's Ray image; a RayService arriving on a
full node preempts the training RayJob in its own queue; the training (a Ray Train v2 job) takes the drain's
preemption notice, writes a just-in-time checkpoint and keeps training on the workers left, the service answers HTTP,
the training grows back when the service goes, and a whole-gang preemption suspends the RayJob, which resumes from
its checkpoint.

Real: kube-apiserver, etcd, kube-controller-manager, kube-proxy, CoreDNS, kubelet, containerd, runc and the CNI bridge
(the real-node lane); KubeRay's operator (a host process reaching Ray's dashboards through the apiserver's service
proxy); Ray 2.60 heads, workers, jobs, Ray Train v2, Serve and the in-tree autoscaler with kai-ray's hook in pods;
kai-ray's podgrouper and scheduler (in this process) draining Ray nodes over the bridge. Stand-ins: the GPUs
(``nvidia.com/gpu`` is bookkeeping; a busybox pod of another queue holds the GPUs the training does not use, and a
busybox inference gang plays the burst that needs the whole training gang's GPUs). The story and its figures are
:class:`kai_ray.bench.headline.Story`, which ``kai-ray bench headline`` runs too; this test asserts what must hold,
the figures are printed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytestmark = [pytest.mark.realnode, pytest.mark.ray, pytest.mark.slow]

pytest.importorskip("kai_ray.testing.controlplane.realnode", reason="the real-node lane is not in this checkout")

from kai_ray.bench.headline import Story, StoryConfig  # noqa: E402

CHECKPOINT_EVERY = 5  # examples/headline/rayjob-training-cpu.yaml leaves train_v2.py's default


def test_inference_preempts_training_which_shrinks_keeps_training_grows_back_and_resumes(
    real_node: Any, kube: Any, namespace: str
) -> None:
    story = Story(real_node, kube, namespace, StoryConfig(semantics="kai-ray"), lambda msg: print(f"[headline] {msg}"))
    try:
        fig = story.run()
    finally:
        story.close()
    print("\nheadline figures:", json.dumps(fig.as_dict()))
    assert fig.serve_first_answer_seconds is not None and fig.served_through_service
    assert fig.shrink_drained, "the preempted worker's Ray node is drained through the GCS before the pod goes"
    assert fig.jit_checkpoints >= 1, "Ray Train's preemption notice reached the training, which checkpointed"
    assert fig.training_step_went_back == 0, "the smaller run starts from the just-in-time checkpoint: no step redone"
    assert fig.pods_recreated_by_kuberay == 0, "KubeRay recreates no worker pod while the service runs"
    assert fig.grow_back_seconds is not None
    assert "Suspended" in fig.job_states and "Failed" not in fig.job_states, fig.job_states
    assert not fig.training_failed and fig.resumed_from_step is not None
    # Ray Train v2 restarts its worker group at the shrink (from the just-in-time checkpoint) and when it grows back
    # (from the latest checkpoint): each redoes at most the steps since a checkpoint. The steps redone at the resume
    # are a figure: without the suspend's notice the workers step on until their pods stop, past the last checkpoint
    # the controller committed.
    redone = (fig.steps_redone_at_shrink, fig.steps_redone_at_grow_back)
    assert max(redone) <= CHECKPOINT_EVERY, fig.progress_points

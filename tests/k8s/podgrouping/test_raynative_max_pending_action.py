"""Ray-native scheduling: a bad ``kai-ray.io/max-pending-action`` is refused where Ray objects enter kai-ray (the podgrouper), with
a Warning Event on the object naming the field, and the placeholder PodGroup carries it; fixed, the object is grouped
(real kube-apiserver, KubeRay's CRDs; the pods KubeRay would create are created by the test)."""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray import constants as c
from kai_ray.k8s.base.rest import Kube, ray_path
from tests.k8s.helpers import events, wait_until
from tests.k8s.podgrouping.test_podgrouper_operator import _cluster_spec, _create_ray, _kuberay_pods, _pg_for, _worker

pytestmark = [pytest.mark.raynative, pytest.mark.controlplane]


def test_a_bad_max_pending_action_is_named_on_the_ray_object(kube: Kube, namespace: str, run_podgrouper: Any) -> None:
    run_podgrouper()
    bad = _create_ray(
        kube,
        namespace,
        "RayCluster",
        "late",
        _cluster_spec(_worker("gpu", replicas=1, min_replicas=1)),
        annotations={c.MAX_PENDING_TIME: "10m", c.MAX_PENDING_ACTION: "kill"},
    )
    want = "RayCluster late: metadata.annotations[kai-ray.io/max-pending-action]: 'kill' is not one of"
    ev = wait_until(
        "a Warning Event on the RayCluster naming the field",
        lambda: next((e for e in events(kube, namespace, "late", "PodGroupError") if want in e["message"]), None),
    )
    assert ev["type"] == "Warning" and ev["involvedObject"]["kind"] == "RayCluster"
    _kuberay_pods(kube, namespace, bad)
    placeholder = wait_until("the placeholder PodGroup", lambda: _pg_for(kube, namespace, "late"))
    assert want in placeholder["metadata"]["annotations"][c.INVALID]

    cur = kube.get(ray_path("RayCluster", namespace, "late"))
    cur["metadata"]["annotations"][c.MAX_PENDING_ACTION] = "suspend"
    kube.replace(ray_path("RayCluster", namespace, "late"), cur)
    pg = wait_until(
        "the PodGroup once the object is fixed",
        lambda: (lambda g: g if g and c.INVALID not in g["metadata"]["annotations"] else None)(
            _pg_for(kube, namespace, "late")
        ),
    )
    assert pg["metadata"]["annotations"][c.MAX_PENDING_ACTION] == "suspend"

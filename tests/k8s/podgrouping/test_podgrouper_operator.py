"""The podgrouper operator against the real kube-apiserver with KubeRay's real CRDs.

The KubeRay operator does not run here: the test creates the Ray CRs and then the pods KubeRay would create for them
(``kai_ray.podgrouper.expand_pods``: KubeRay's labels, owned by the real RayCluster), so owner resolution, PodGroup
writes and pod stamping go through the real API server.
"""

from __future__ import annotations

from typing import Any

from kai_ray.api.loader import parse_object
from kai_ray.api.ray import RayJob
from kai_ray.k8s.base.rest import Kube, events_path, podgroups_path, pods_path, ray_path
from kai_ray.k8s.podgrouping.operator import PodgrouperOperator
from tests.k8s.helpers import kuberay_pods, pod_body, pods, wait_until

QUEUE = "kai.scheduler/queue"


def _worker(name: str, replicas: int, min_replicas: int, max_replicas: int = 10, gpus: int = 1) -> dict[str, Any]:
    return {
        "groupName": name,
        "replicas": replicas,
        "minReplicas": min_replicas,
        "maxReplicas": max_replicas,
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "ray-worker",
                        "image": "rayproject/ray:2.49.0",
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                    }
                ]
            }
        },
    }


def _cluster_spec(*workers: dict[str, Any]) -> dict[str, Any]:
    return {
        "headGroupSpec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "ray-head", "image": "rayproject/ray:2.49.0", "resources": {"limits": {"cpu": "1"}}}
                    ]
                }
            }
        },
        "workerGroupSpecs": list(workers),
    }


def _create_ray(kube: Kube, ns: str, kind: str, name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    body = {"apiVersion": "ray.io/v1", "kind": kind, "metadata": {"name": name, **meta}, "spec": spec}
    created: dict[str, Any] = kube.create(ray_path(kind, ns), body)
    return created


def _kuberay_pods(kube: Kube, ns: str, cluster: dict[str, Any]) -> list[str]:
    """Create the pods KubeRay would create for ``cluster``, owned by it."""
    return kuberay_pods(kube, ns, cluster)


def _pg_for(kube: Kube, ns: str, owner_name: str) -> dict[str, Any] | None:
    for pg in kube.get(podgroups_path(ns))["items"]:
        if pg["metadata"]["name"].startswith(f"pg-{owner_name}-"):
            result: dict[str, Any] = pg
            return result
    return None


def _annotation(pod: dict[str, Any]) -> str | None:
    return (pod["metadata"].get("annotations") or {}).get("pod-group-name")


def test_bare_pod_gets_a_single_pod_group_and_skip_is_respected(
    kube: Kube, namespace: str, run_podgrouper: Any
) -> None:
    op: PodgrouperOperator = run_podgrouper()
    kube.create(pods_path(namespace), pod_body("byo", labels={"kai.scheduler/skip-podgrouper": "true"}))
    kube.create(pods_path(namespace), pod_body("other", scheduler="default-scheduler"))
    solo = kube.create(
        pods_path(namespace), pod_body("solo", 2, labels={QUEUE: "team-a", "priorityClassName": "build"})
    )
    expected = f"pg-solo-{solo['metadata']['uid']}"
    wait_until("the pod to be stamped", lambda: _annotation(pods(kube, namespace)["solo"]) == expected)
    pg = kube.get(podgroups_path(namespace, expected))
    assert pg["spec"]["minMember"] == 1
    assert pg["spec"]["queue"] == "team-a"
    assert pg["spec"]["priorityClassName"] == "build"
    assert pg["metadata"]["ownerReferences"][0]["uid"] == solo["metadata"]["uid"]
    assert op.queue.wait_idle(10)
    now = pods(kube, namespace)
    assert _annotation(now["byo"]) is None and _annotation(now["other"]) is None
    assert [g["metadata"]["name"] for g in kube.get(podgroups_path(namespace))["items"]] == [expected]


def test_raycluster_becomes_one_gang_and_kai_fields_are_preserved(
    kube: Kube, namespace: str, run_podgrouper: Any
) -> None:
    run_podgrouper()
    rc = _create_ray(
        kube,
        namespace,
        "RayCluster",
        "llm",
        _cluster_spec(_worker("gpu", replicas=2, min_replicas=2)),
        labels={QUEUE: "team-a", "priorityClassName": "train"},
    )
    pg = wait_until("the PodGroup of the RayCluster", lambda: _pg_for(kube, namespace, "llm"))
    assert pg["metadata"]["name"] == f"pg-llm-{rc['metadata']['uid']}"
    assert pg["spec"]["minMember"] == 3
    assert {sg["name"]: sg["minMember"] for sg in pg["spec"]["subGroups"]} == {"headgroup": 1, "gpu": 2}
    assert pg["spec"]["queue"] == "team-a"
    assert pg["metadata"]["ownerReferences"][0]["kind"] == "RayCluster"

    names = _kuberay_pods(kube, namespace, rc)
    wait_until("every pod to be stamped", lambda: all(_annotation(pods(kube, namespace)[n]) for n in names))
    stamped = pods(kube, namespace)
    for n in names:
        assert _annotation(stamped[n]) == pg["metadata"]["name"]
        sub = stamped[n]["metadata"]["labels"]["kai.scheduler/subgroup-name"]
        assert sub == ("headgroup" if n.endswith("-head") else "gpu")

    # A user (or KAI) sets markUnschedulable; then the CR's queue label and worker minimum change.
    kube.merge_patch(podgroups_path(namespace, pg["metadata"]["name"]), {"spec": {"markUnschedulable": True}})
    cur = kube.get(ray_path("RayCluster", namespace, "llm"))
    cur["metadata"]["labels"][QUEUE] = "team-b"
    cur["spec"]["workerGroupSpecs"][0]["minReplicas"] = 3
    cur["spec"]["workerGroupSpecs"][0]["replicas"] = 3
    kube.replace(ray_path("RayCluster", namespace, "llm"), cur)
    pg = wait_until(
        "the PodGroup to follow the new minimum",
        lambda: (lambda g: g if g and g["spec"]["minMember"] == 4 else None)(_pg_for(kube, namespace, "llm")),
    )
    assert pg["spec"]["queue"] == "team-a", "the queue never changes after creation"
    assert pg["spec"]["markUnschedulable"] is True
    assert pg["metadata"]["labels"][QUEUE] == "team-a"


def test_rayjob_pods_are_grouped_under_the_rayjob(kube: Kube, namespace: str, run_podgrouper: Any) -> None:
    run_podgrouper()
    spec = _cluster_spec(_worker("gpu", replicas=2, min_replicas=0))
    job = _create_ray(
        kube,
        namespace,
        "RayJob",
        "train",
        {"entrypoint": "python train.py", "submissionMode": "HTTPMode", "rayClusterSpec": spec},
        labels={QUEUE: "team-a"},
    )
    rc = _create_ray(
        kube,
        namespace,
        "RayCluster",
        "train-raycluster-x1",
        spec,
        labels={QUEUE: "team-a"},
        ownerReferences=[
            {
                "apiVersion": "ray.io/v1",
                "kind": "RayJob",
                "name": "train",
                "uid": job["metadata"]["uid"],
                "controller": True,
            }
        ],
    )
    names = _kuberay_pods(kube, namespace, rc)
    wait_until("every pod to be stamped", lambda: all(_annotation(pods(kube, namespace)[n]) for n in names))
    expected = f"pg-train-{job['metadata']['uid']}"
    assert {_annotation(p) for p in pods(kube, namespace).values()} == {expected}
    groups = kube.get(podgroups_path(namespace))["items"]
    assert [g["metadata"]["name"] for g in groups] == [expected], "one PodGroup, named after the RayJob"
    assert groups[0]["spec"]["minMember"] == 3  # head + replicas (minReplicas 0 gangs the whole count, as KAI)
    assert groups[0]["metadata"]["ownerReferences"][0]["kind"] == "RayJob"
    model = parse_object({**job, "kind": "RayJob"})
    assert isinstance(model, RayJob)


def test_bad_ray_cr_gets_an_event_and_the_operator_keeps_going(kube: Kube, namespace: str, run_podgrouper: Any) -> None:
    op: PodgrouperOperator = run_podgrouper()
    bad = _create_ray(
        kube,
        namespace,
        "RayCluster",
        "bad",
        _cluster_spec(_worker("gpu", replicas=1, min_replicas=1)),
        annotations={"kai.scheduler/topology-required-placement": "rack"},  # a level without a topology
    )
    ev = wait_until(
        "a Warning Event on the RayCluster",
        lambda: [
            e
            for e in kube.get(events_path(namespace))["items"]
            if e["involvedObject"].get("name") == "bad" and e["reason"] == "PodGroupError"
        ],
    )
    assert ev[0]["type"] == "Warning"
    assert ev[0]["involvedObject"]["kind"] == "RayCluster"
    assert "kai.scheduler/topology" in ev[0]["message"]
    _kuberay_pods(kube, namespace, bad)
    solo = kube.create(pods_path(namespace), pod_body("solo"))
    wait_until(
        "a good pod to be grouped meanwhile",
        lambda: _annotation(pods(kube, namespace)["solo"]) == f"pg-solo-{solo['metadata']['uid']}",
    )
    assert op.queue.wait_idle(10)
    # A placeholder PodGroup carries the reason (the scheduler reports it as a condition) and schedules nothing.
    placeholder = wait_until("the placeholder PodGroup", lambda: _pg_for(kube, namespace, "bad"))
    assert "kai.scheduler/topology" in placeholder["metadata"]["annotations"]["kai-ray.io/invalid"]
    assert op.metrics.value("kai_ray_reconcile_errors_total", {"kind": "ray"}) == 0, "bad input is not retried"

    cur = kube.get(ray_path("RayCluster", namespace, "bad"))
    cur["metadata"]["annotations"]["kai.scheduler/topology"] = "dc"
    kube.replace(ray_path("RayCluster", namespace, "bad"), cur)
    pg = wait_until(
        "the PodGroup once the CR is fixed",
        lambda: (lambda g: g if g and (g["spec"].get("topologyConstraint") or {}).get("topology") else None)(
            _pg_for(kube, namespace, "bad")
        ),
    )
    assert pg["spec"]["topologyConstraint"] == {"topology": "dc", "requiredTopologyLevel": "rack"}
    assert "kai-ray.io/invalid" not in pg["metadata"]["annotations"], "the reason goes once the object is fixed"


def test_kai_coexistence_marks_ray_owners_and_pods_for_kais_podgrouper(
    kube: Kube, namespace: str, run_podgrouper: Any
) -> None:
    """In KAI-coexistence mode the Ray top owner and every stamped pod carry kai.scheduler/skip-podgrouper (so KAI's
    own podgrouper leaves them alone), while kai-ray still groups them: its own mark is not a request to skip. A user's
    skip label still is. ``--default-priority`` overrides the per-kind default."""
    op: PodgrouperOperator = run_podgrouper(kai_coexistence=True, default_priority={"RayCluster": "build"})
    skip, by = "kai.scheduler/skip-podgrouper", "kai-ray.io/skip-podgrouper-by"
    rc = _create_ray(
        kube, namespace, "RayCluster", "mixed", _cluster_spec(_worker("gpu", 1, 1)), labels={QUEUE: "team-a"}
    )
    marked = wait_until(
        "the RayCluster to be marked for KAI's podgrouper",
        lambda: (lambda o: o if (o["metadata"].get("annotations") or {}).get(skip) == "true" else None)(
            kube.get(ray_path("RayCluster", namespace, "mixed"))
        ),
    )
    assert marked["metadata"]["annotations"][by] == "kai-ray-podgrouper"
    pg = wait_until("the PodGroup of the RayCluster", lambda: _pg_for(kube, namespace, "mixed"))
    assert pg["spec"]["priorityClassName"] == "build"
    names = _kuberay_pods(kube, namespace, rc)
    wait_until("every pod to be stamped", lambda: all(_annotation(pods(kube, namespace)[n]) for n in names))
    wait_until(
        "every stamped pod to carry the mark",
        lambda: all((pods(kube, namespace)[n]["metadata"].get("annotations") or {}).get(skip) == "true" for n in names),
    )
    for n in names:
        assert _annotation(pods(kube, namespace)[n]) == pg["metadata"]["name"]
    marks = wait_until(  # counted once the patch's answer is back, which may be after the watch shows it
        "the mark to be counted",
        lambda: op.metrics.registry.get_sample_value("kai_ray_podgrouper_owners_marked_total"),
    )
    assert marks == 1, "the owner is marked once, not again on every reconcile"

    # A user's own skip label on another RayCluster is still respected: no PodGroup, no mark.
    _create_ray(
        kube,
        namespace,
        "RayCluster",
        "byo",
        _cluster_spec(_worker("gpu", 1, 1)),
        labels={QUEUE: "team-a", skip: "true"},
    )
    wait_until("the podgrouper to see it", lambda: op.ray["RayCluster"][0].get(f"{namespace}/byo"))
    assert op.queue.wait_idle(10)
    assert _pg_for(kube, namespace, "byo") is None
    assert by not in (kube.get(ray_path("RayCluster", namespace, "byo"))["metadata"].get("annotations") or {})

"""The headline promise end to end, with the real KubeRay operator.

What is real: kube-apiserver + etcd; KWOK GPU nodes (4 x 8 fake `nvidia.com/gpu`); KubeRay's operator built from the
`github.com/ray-project/kuberay/ray-operator` Go module and run with `--batch-scheduler=kai-scheduler`, turning our
example RayJob and RayService into RayClusters and pods, suspending the RayJob and resuming it; kai-ray's podgrouper
and scheduler operators with their default settings (suspend-based preemption for RayJobs, resume on admission). The
manifests are `examples/rayjob-training.yaml` and `examples/rayservice-vllm.yaml`, changed only in namespace and
queue names.

What is not exercised: Ray itself never runs inside KWOK pods (no containers), so the RayJob never submits its job
and the RayService never becomes ready to serve; no GPU exists. No kube-controller-manager runs, so a thread in the
test plays its garbage collector: it deletes the pods of a RayCluster that is gone (KubeRay deletes a suspended
RayJob's RayCluster and relies on the collector for its pods) and the RayClusters of a RayService that is gone.
"""

from __future__ import annotations

import contextlib
import copy
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray.k8s.base.rest import ApiError, Kube, podgroups_path, pods_path, ray_path
from kai_ray.k8s.ray.elastic import SUSPEND_ANNOTATION
from kai_ray.testing.controlplane.harness import ControlPlane
from tests.k8s.helpers import condition, events, gpu_use, wait_until

pytestmark = [pytest.mark.controlplane, pytest.mark.kuberay, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ORIGIN = "ray.io/originated-from-cr-name"


def _example(name: str, namespace: str, queue: str) -> dict[str, Any]:
    doc = copy.deepcopy(yaml.safe_load((EXAMPLES / name).read_text()))
    doc["metadata"]["namespace"] = namespace
    doc["metadata"]["labels"]["kai.scheduler/queue"] = queue
    return doc


def _ray_pods(kube: Kube, ns: str, owner_name: str) -> list[dict[str, Any]]:
    """Pods of the RayCluster(s) that a RayJob/RayService named ``owner_name`` created."""
    items = kube.get(pods_path(ns), labelSelector=f"{ORIGIN}={owner_name}")["items"]
    if not items:  # older KubeRay: select through the clusters' names
        clusters = kube.get(ray_path("RayCluster", ns))["items"]
        names = {
            c["metadata"]["name"]
            for c in clusters
            if any(r.get("name") == owner_name for r in c["metadata"].get("ownerReferences", []))
        }
        items = [
            p
            for p in kube.get(pods_path(ns))["items"]
            if p["metadata"].get("labels", {}).get("ray.io/cluster") in names
        ]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _bound(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p["spec"].get("nodeName")]


def _podgroup_of(kube: Kube, ns: str, owner_kind: str, owner_name: str) -> dict[str, Any] | None:
    for pg in kube.get(podgroups_path(ns))["items"]:
        refs = pg["metadata"].get("ownerReferences") or []
        if any(r["kind"] == owner_kind and r["name"] == owner_name for r in refs):
            return pg
    return None


def _diagnosis(kube: Kube, namespace: str, job: str) -> str:
    """What a failed wait leaves to read: pods, the RayJob's status, PodGroups, RayClusters and recent Events."""
    pods = [
        (
            p["metadata"]["name"],
            p["spec"].get("nodeName"),
            (p["metadata"].get("annotations") or {}).get("pod-group-name"),
        )
        for p in kube.get(pods_path(namespace))["items"]
    ]
    job_now = kube.get(ray_path("RayJob", namespace, job))
    pgs = [(g["metadata"]["name"], g.get("status")) for g in kube.get(podgroups_path(namespace))["items"]]
    clusters = [(c["metadata"]["name"], c.get("status")) for c in kube.get(ray_path("RayCluster", namespace))["items"]]
    evs = [(e.get("reason"), e["involvedObject"].get("name"), e.get("message")) for e in events(kube, namespace)][-15:]
    return (
        f"pods={pods}\njob spec suspend={job_now['spec'].get('suspend')} status={job_now.get('status')}\n"
        f"podgroups={pgs}\nrayclusters={clusters}\nevents={evs}"
    )


class GarbageCollector:
    """What kube-controller-manager's garbage collector does here, for the objects of this test's namespace: pods
    whose controlling RayCluster is gone, and RayClusters whose RayService or RayJob is gone (or being deleted), are
    deleted. It also watches every node's GPU use, so the test can check that no node was ever over-committed."""

    def __init__(self, kube: Kube, ns: str) -> None:
        self.kube, self.ns = kube, ns
        self.max_gpu: dict[str, float] = {}
        self.collected: list[str] = []
        self.job_states: dict[str, set[str]] = {}  # RayJob -> every jobDeploymentStatus seen
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="test-gc", daemon=True)

    def __enter__(self) -> GarbageCollector:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _uids(self, kind: str) -> set[str]:
        return {
            o["metadata"]["uid"]
            for o in self.kube.get(ray_path(kind, self.ns))["items"]
            if not o["metadata"].get("deletionTimestamp")
        }

    def _owner_gone(self, ref: dict[str, Any]) -> bool:
        """Checked by name just before deleting, as the real garbage collector does: an owner created after this
        sweep listed its kind (and before it listed the dependants) is not in the list, yet very much there."""
        try:
            owner = self.kube.get(ray_path(str(ref.get("kind")), self.ns, str(ref.get("name"))))
        except ApiError as exc:
            return bool(exc.not_found)
        meta = owner.get("metadata") or {}
        return meta.get("uid") != ref.get("uid") or bool(meta.get("deletionTimestamp"))

    def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(ApiError):
                self.sweep()
            self._stop.wait(0.3)

    def sweep(self) -> None:
        for job in self.kube.get(ray_path("RayJob", self.ns))["items"]:
            state = (job.get("status") or {}).get("jobDeploymentStatus")
            if state:
                self.job_states.setdefault(job["metadata"]["name"], set()).add(state)
        owners = self._uids("RayService") | self._uids("RayJob")
        for rc in self.kube.get(ray_path("RayCluster", self.ns))["items"]:
            refs = [r for r in rc["metadata"].get("ownerReferences") or [] if r.get("controller")]
            if (
                refs
                and refs[0]["uid"] not in owners
                and not rc["metadata"].get("deletionTimestamp")
                and self._owner_gone(refs[0])
            ):
                with contextlib.suppress(ApiError):
                    self.kube.delete(ray_path("RayCluster", self.ns, rc["metadata"]["name"]))
                    self.collected.append(f"RayCluster/{rc['metadata']['name']}")
        clusters = self._uids("RayCluster")
        for pod in self.kube.get(pods_path(self.ns))["items"]:
            refs = [r for r in pod["metadata"].get("ownerReferences") or [] if r.get("controller")]
            if (
                refs
                and refs[0].get("kind") == "RayCluster"
                and refs[0]["uid"] not in clusters
                and self._owner_gone(refs[0])
            ):
                with contextlib.suppress(ApiError):
                    self.kube.delete(pods_path(self.ns, pod["metadata"]["name"]), {"gracePeriodSeconds": 0})
                    self.collected.append(f"Pod/{pod['metadata']['name']}")
        for node, used in gpu_use(self.kube, [self.ns]).items():
            self.max_gpu[node] = max(self.max_gpu.get(node, 0.0), used)


@pytest.fixture
def gc(kube: Kube, namespace: str):
    with GarbageCollector(kube, namespace) as collector:
        yield collector


@pytest.fixture
def kuberay(control_plane: ControlPlane, namespace: str):
    control_plane.start_kuberay_operator(batch_scheduler="kai-scheduler", watch_namespace=namespace)
    yield
    control_plane.stop_component("kuberay-operator")


@pytest.mark.parametrize("shutdown", [True, False], ids=["shutdown-after-job-finishes", "without-it"])
def test_inference_preempts_training_and_training_comes_back(
    shutdown: bool,
    kube: Kube,
    namespace: str,
    queues: Any,
    node_pool: Any,
    run_podgrouper: Any,
    run_scheduler: Any,
    priority_classes: Any,
    kuberay: None,
    gc: GarbageCollector,
) -> None:
    _, selector = node_pool(4, gpus=8)
    queues("ml-platform", gpu_quota=32)
    training_q = queues("training", gpu_quota=16, parent="ml-platform", priority=50)
    serving_q = queues("serving", gpu_quota=16, parent="ml-platform", priority=200)
    run_podgrouper()
    sched = run_scheduler(node_selector=selector)

    # 1. The training RayJob's cluster is gang-scheduled onto the fake GPUs: head + 4 workers x 8 GPUs = 32 GPUs.
    job = _example("rayjob-training.yaml", namespace, training_q)
    if not shutdown:  # KubeRay refuses to suspend such a job; kai-ray sets the field for the suspension
        del job["spec"]["shutdownAfterJobFinishes"]
    kube.create(ray_path("RayJob", namespace), job)
    name = job["metadata"]["name"]
    try:
        training = wait_until(
            "KubeRay to create the training pods and kai-ray to bind all 5",
            lambda: (lambda ps: ps if len(ps) == 5 and len(_bound(ps)) == 5 else None)(
                _ray_pods(kube, namespace, name)
            ),
            120,
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_diagnosis(kube, namespace, name)}") from None
    assert all(p["spec"]["schedulerName"] == "kai-scheduler" for p in training)
    assert all(p["metadata"]["labels"].get("kai.scheduler/queue") == training_q for p in training)
    train_pg = wait_until("the RayJob's PodGroup", lambda: _podgroup_of(kube, namespace, "RayJob", name))
    assert train_pg["spec"]["minMember"] == 5 and train_pg["spec"]["queue"] == training_q
    assert {p["metadata"]["annotations"].get("pod-group-name") for p in training} == {train_pg["metadata"]["name"]}
    assert sum(gpu_use(kube, [namespace]).values()) == 32

    # 2. The vLLM RayService arrives on the full cluster. kai-ray reclaims the training gang by suspending the RayJob
    #    (KubeRay >= 1.5 does not recreate a RayJob's head: deleting its pods would fail the job for good); KubeRay
    #    deletes the training cluster, and the serving pods are bound in the room it leaves.
    t_serve = time.monotonic()
    svc = _example("rayservice-vllm.yaml", namespace, serving_q)
    kube.create(ray_path("RayService", namespace), svc)
    svc_name = svc["metadata"]["name"]
    serving = wait_until(
        "the RayService's head and 4-GPU worker to be bound",
        lambda: (lambda ps: ps if len(_bound(ps)) == 2 else None)(_ray_pods(kube, namespace, svc_name)),
        120,
    )
    serve_s = time.monotonic() - t_serve
    assert {p["metadata"]["labels"]["ray.io/node-type"] for p in serving} == {"head", "worker"}
    serve_pg = wait_until("the RayService's PodGroup", lambda: _podgroup_of(kube, namespace, "RayService", svc_name))
    assert serve_pg["spec"]["priorityClassName"] == "inference"
    assert serve_pg["spec"]["preemptibility"] == "non-preemptible"
    assert all(v <= 8 for v in gpu_use(kube, [namespace]).values()), "no node is ever over-committed"
    serve_key = f"{namespace}/{serve_pg['metadata']['name']}"
    train_pg_name = train_pg["metadata"]["name"]
    evicted = wait_until(
        "the training PodGroup to say who evicted it",
        lambda: condition(kube.get(podgroups_path(namespace, train_pg_name)), "Evicted"),
        60,
    )
    assert evicted["reason"] in ("Reclaimed", "Preempted") and serve_key in evicted["message"]
    evs = wait_until(
        "an Event naming the preemptor",
        lambda: [e for e in events(kube, namespace) if e.get("reason") in ("Reclaimed", "Preempted")],
    )
    assert any(serve_key in e["message"] for e in evs)
    suspended = wait_until(
        "the RayJob to be suspended and its cluster's pods gone",
        lambda: (lambda j: j if j["spec"].get("suspend") and not _ray_pods(kube, namespace, name) else None)(
            kube.get(ray_path("RayJob", namespace, name))
        ),
        60,
    )
    record = json.loads(
        wait_until(  # written right after the suspend patch, which KubeRay may act on first
            "the suspend record on the PodGroup",
            lambda: kube.get(podgroups_path(namespace, train_pg_name))["metadata"]["annotations"].get(
                SUSPEND_ANNOTATION
            ),
        )
    )
    assert record["owner"] == f"RayJob/{name}" and record["reason"] in ("Reclaimed", "Preempted")
    assert serve_key in record["message"], record
    wait_until(
        "KubeRay to report the RayJob Suspended (not Failed)",
        lambda: (
            (kube.get(ray_path("RayJob", namespace, name)).get("status") or {}).get("jobDeploymentStatus")
            == "Suspended"
        ),
        60,
    )
    assert suspended["spec"]["suspend"] is True
    wait_until(
        "the suspend to be counted for the training queue",
        lambda: sched.metrics.value("kai_ray_suspends_total", {"queue_name": training_q, "result": "ok"}) >= 1,
    )

    # While suspended, KubeRay creates nothing for the RayJob (the recreate loop that pod deletion starts).
    seen: set[str] = set()
    end = time.monotonic() + 8
    while time.monotonic() < end:
        seen |= {
            p["metadata"]["uid"] for p in kube.get(pods_path(namespace), labelSelector=f"{ORIGIN}={name}")["items"]
        }
        time.sleep(0.3)
    print(
        f"\nserving bound {serve_s:.1f} s after the RayService was created; training pods recreated while "
        f"suspended: {len(seen)}"
    )
    assert seen == set(), "no training pod is recreated while the RayJob is suspended"
    assert len(_bound(_ray_pods(kube, namespace, svc_name))) == 2

    # 3. The RayService goes away (the test's collector deletes its cluster and pods); kai-ray admits the suspended
    #    gang again, lifts the suspend, and KubeRay's fresh cluster for the RayJob is bound whole.
    t_back = time.monotonic()
    kube.delete(ray_path("RayService", namespace, svc_name))
    try:
        wait_until(
            "the training gang to run whole again",
            lambda: len(_bound(_ray_pods(kube, namespace, name))) == 5,
            120,
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_diagnosis(kube, namespace, name)}") from None
    print(f"training bound whole again {time.monotonic() - t_back:.1f} s after the RayService was deleted")
    job_now = kube.get(ray_path("RayJob", namespace, name))
    assert not job_now["spec"].get("suspend")
    assert (job_now.get("status") or {}).get("jobDeploymentStatus") != "Failed"
    seen_states = set(gc.job_states.get(name, set()))
    assert not seen_states & {"Failed", "ValidationFailed"}, f"the RayJob went {seen_states}"
    assert "Suspended" in seen_states
    assert job_now["spec"].get("shutdownAfterJobFinishes") == (True if shutdown else None), "the user's own value"
    wait_until(  # removed right after the resume patch, which KubeRay may act on first
        "the suspend record to be removed",
        lambda: (
            SUSPEND_ANNOTATION
            not in kube.get(podgroups_path(namespace, train_pg_name))["metadata"].get("annotations", {})
        ),
    )
    assert all(v <= 8 for v in gpu_use(kube, [namespace]).values())
    assert all(v <= 8 for v in gc.max_gpu.values()), f"a node was over-committed at some point: {gc.max_gpu}"
    # One suspend and one resume: the gang did not flap.
    assert sched.reclaimer is not None and sched.gangs is not None
    gangs = sched.gangs
    wait_until("the resume to be recorded", lambda: gangs.resumed)
    assert [(r.kind, r.target, r.ok) for r in sched.reclaimer.records] == [("suspend", f"{namespace}/{name}", True)]
    assert [job for job, _ in gangs.resumed] == [f"{namespace}/{train_pg_name}"]

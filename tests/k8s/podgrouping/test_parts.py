"""The podgrouper operator's parts that need no API server: work keys, pod fingerprints, deferred stamps, which pods
a Ray object's change reaches, owner kinds along a chain, and the grouper's settings from the operator's."""

from __future__ import annotations

import time
from typing import Any

from kai_ray import constants as c
from kai_ray.api.meta import Pod
from kai_ray.k8s.config import OperatorConfig
from kai_ray.k8s.podgrouping.operator import grouper_config
from kai_ray.k8s.podgrouping.owners import owner_kinds
from kai_ray.k8s.podgrouping.pod_stamps import STAMP_HOLDOFF, DeferredStamp, PodStamps, pod_fingerprint
from kai_ray.k8s.podgrouping.podgroup_writer import PodGroupWriter
from kai_ray.k8s.podgrouping.ray_reconcile import _belongs, _restamp
from kai_ray.k8s.podgrouping.watches import Watches, slim_job
from kai_ray.k8s.podgrouping.work import parse_work, pod_work, ray_work
from kai_ray.podgrouper import PodgrouperConfig
from kai_ray.podgrouper.defaultgrouper import single_pod_group
from kai_ray.podgrouper.upgrade import own_podgroup_name


def raw_pod(name: str = "p", **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", **meta},
        "spec": {"schedulerName": c.SCHEDULER_NAME, "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Pending"},
    }


def test_work_keys_round_trip() -> None:
    assert parse_work(pod_work("ns/p")) == ("Pod", "ns/p")
    assert parse_work(ray_work("RayJob", "ns/j")) == ("RayJob", "ns/j")


def test_a_fingerprint_reads_what_grouping_reads_and_nothing_else() -> None:
    pod = raw_pod()
    bound = {**pod, "spec": {**pod["spec"], "nodeName": "n1"}, "status": {"phase": "Running"}}
    assert pod_fingerprint(bound) == pod_fingerprint(pod)
    assert pod_fingerprint(raw_pod(labels={"a": "b"})) != pod_fingerprint(pod)
    assert pod_fingerprint(raw_pod(annotations={"a": "b"})) != pod_fingerprint(pod)


def stamps(kai_coexistence: bool = False) -> PodStamps:
    # No stamp is written in these tests (every pod's stamp is deferred or skipped), so no API server is needed.
    return PodStamps(None, Watches(), None, kai_coexistence=kai_coexistence)  # type: ignore[arg-type]


def test_a_pod_that_is_its_own_owner_has_its_stamp_deferred_and_its_events_wait() -> None:
    s, raw = stamps(), raw_pod()
    pod = Pod.model_validate(raw)
    pg = single_pod_group(pod, PodgrouperConfig())
    assert s.stamp_or_defer("ns/p", raw, pod, pg, submitter=False) == DeferredStamp("ns/p", pg)
    assert s.up_to_date("ns/p", raw), "an event for the unchanged pod needs no reconcile while its stamp waits"
    assert not s.up_to_date("ns/p", raw_pod(labels={"new": "label"})), "a change is reconciled"
    assert not s.write_deferred(DeferredStamp("ns/p", pg)), "the pod is not in the cache: nothing to write"
    assert not s.up_to_date("ns/p", raw), "dropped once written or gone"


def test_deferred_stamps_wait_for_a_lull_at_most_their_delay() -> None:
    s = stamps()
    now = time.monotonic()
    assert s.may_go(queue_busy=False, last_group_write=now - 2 * STAMP_HOLDOFF)
    assert not s.may_go(queue_busy=True, last_group_write=0.0), "nothing waits long yet"
    assert not s.may_go(queue_busy=False, last_group_write=now), "a PodGroup was just created"


def test_a_ray_objects_change_reaches_its_own_pods_only() -> None:
    cluster = {"metadata": {"name": "rc", "namespace": "ns", "uid": "u1"}}
    desired = single_pod_group(Pod.model_validate(raw_pod()), PodgrouperConfig())
    name = desired.metadata.name
    mine = raw_pod("a", labels={c.RAY_CLUSTER: "rc"})
    stamped = raw_pod("b", labels={c.RAY_CLUSTER: "rc"}, annotations={c.PODGROUP_ANNOTATION: name})
    elsewhere = raw_pod("c", labels={c.RAY_CLUSTER: "rc"}, annotations={c.PODGROUP_ANNOTATION: "another"})
    other = raw_pod("d", labels={c.RAY_CLUSTER: "other"})
    assert _restamp(mine, cluster, "RayCluster", desired, "ns")
    assert _restamp(stamped, cluster, "RayCluster", desired, "ns")
    assert not _restamp(elsewhere, cluster, "RayCluster", desired, "ns"), "stamped into another gang"
    assert not _restamp(other, cluster, "RayCluster", desired, "ns")
    assert not _restamp(mine, cluster, "RayCluster", desired, "other-ns")


def test_a_rayservice_reaches_its_clusters_pods_and_their_surge_group() -> None:
    service = {
        "metadata": {"name": "svc", "namespace": "ns", "uid": "u2"},
        "status": {"activeServiceStatus": {"rayClusterName": "svc-raycluster-a"}},
    }
    desired = single_pod_group(Pod.model_validate(raw_pod()), PodgrouperConfig())
    surge = own_podgroup_name("svc-raycluster-b", "u2")
    active = raw_pod("a", labels={c.RAY_CLUSTER: "svc-raycluster-a"})
    surged = raw_pod("b", labels={c.RAY_CLUSTER: "svc-raycluster-b"}, annotations={c.PODGROUP_ANNOTATION: surge})
    assert _belongs(active, service, "RayService")
    assert _restamp(surged, service, "RayService", desired, "ns"), "a surge's pods hear of the switch"
    assert not _belongs(raw_pod("c", labels={c.RAY_CLUSTER: "elsewhere"}), service, "RayService")


def test_owner_kinds_are_read_from_the_references_nearest_first() -> None:
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": True}
    job_ref = {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "rj", "uid": "v", "controller": True}
    chain = [raw_pod(ownerReferences=[ref]), {"metadata": {"name": "j", "ownerReferences": [job_ref]}}, {}]
    assert owner_kinds(chain) == [("batch/v1", "Job"), ("ray.io/v1", "RayJob")]


def test_a_job_is_kept_as_the_owner_chain_reads_it() -> None:
    job = {"metadata": {"name": "j", "namespace": "ns", "uid": "u", "managedFields": [{}]}, "spec": {"template": {}}}
    assert slim_job(job) == {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ns",
                                                                                   "uid": "u"}}  # fmt: skip


def test_the_grouper_settings_follow_the_operators() -> None:
    config = OperatorConfig(scheduler_name="mine", queue_label_key="example.com/q", max_gang_pods=7)
    got = grouper_config(config)
    assert (got.scheduler_name, got.queue_label_key, got.max_gang_pods) == ("mine", "example.com/q", 7)


def test_our_own_write_is_read_until_the_watch_has_it() -> None:
    writer = PodGroupWriter(None, Watches(), PodgrouperConfig(), None)  # type: ignore[arg-type]
    mine = {"metadata": {"name": "g", "namespace": "ns", "resourceVersion": "5"}}
    writer._remember("ns/g", mine)
    assert writer.get("ns/g") == mine
    writer.seen("UPSERT", "ns/g", {"metadata": {"resourceVersion": "5"}})
    assert writer.get("ns/g") is None, "forgotten once the watch caught up (the empty cache answers now)"

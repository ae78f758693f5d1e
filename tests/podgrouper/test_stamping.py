from __future__ import annotations

from kai_ray import constants as c
from kai_ray.api import Pod, parse_object
from kai_ray.podgrouper import expand_pods, group, is_submitter, stamp
from tests.podgrouper.raydocs import cluster_spec, ray_doc, worker


def _pod(group_label: str | None, **labels: str) -> Pod:
    lab = dict(labels)
    if group_label is not None:
        lab[c.RAY_GROUP] = group_label
    return Pod.model_validate({"metadata": {"name": "p", "labels": lab}})


def test_members_get_podgroup_annotation_and_subgroup_label():
    pg = group(parse_object(ray_doc("RayCluster", cluster_spec(worker("gpu", 2)))))
    st = stamp(_pod("gpu"), pg)
    assert st.annotations == {c.PODGROUP_ANNOTATION: pg.metadata.name}
    assert st.labels == {c.SUBGROUP_LABEL: "gpu"}
    assert stamp(_pod("headgroup"), pg).labels == {c.SUBGROUP_LABEL: "headgroup"}


def test_renamed_groups_resolve_through_the_mapping():
    pg = group(parse_object(ray_doc("RayCluster", cluster_spec(worker("GPU_Workers")))))
    label = stamp(_pod("GPU_Workers"), pg).labels[c.SUBGROUP_LABEL]
    assert label != "GPU_Workers"
    assert label in {sg.name for sg in pg.spec.sub_groups}


def test_submitter_pod_lands_in_submitter_subgroup_only_for_k8sjobmode():
    job = parse_object(ray_doc("RayJob", cluster_spec(worker("w"))))
    pg = group(job)
    assert stamp(_pod(c.RAY_SUBMITTER_GROUP), pg).labels == {c.SUBGROUP_LABEL: c.SUBMITTER_SUBGROUP}
    rc = group(parse_object(ray_doc("RayCluster", cluster_spec(worker("w")))))
    assert stamp(_pod(c.RAY_SUBMITTER_GROUP), rc).labels == {}


def test_submitter_found_by_its_owners_without_any_label():
    job = group(parse_object(ray_doc("RayJob", cluster_spec(worker("w")))))
    bare = _pod(None, **{"batch.kubernetes.io/job-name": "rj"})
    assert stamp(bare, job, submitter=True).labels == {c.SUBGROUP_LABEL: c.SUBMITTER_SUBGROUP}
    assert stamp(bare, job).labels == {}
    assert stamp(_pod("w"), job, submitter=True).labels == {c.SUBGROUP_LABEL: c.SUBMITTER_SUBGROUP}
    rc = group(parse_object(ray_doc("RayCluster", cluster_spec(worker("w")))))
    assert stamp(bare, rc, submitter=True).labels == {}, "a RayCluster's group has no submitter subgroup"


def test_is_submitter_reads_the_owner_chain_pod_job_rayjob():
    job, rayjob = ("batch/v1", "Job"), ("ray.io/v1", "RayJob")
    assert is_submitter([job, rayjob])
    assert is_submitter([job, ("ray.io/v1alpha1", "RayJob")])
    assert not is_submitter([job])
    assert not is_submitter([rayjob])
    assert not is_submitter([job, ("ray.io/v1", "RayCluster")])
    assert not is_submitter([job, ("example.com/v1", "RayJob")])
    assert not is_submitter([("batch/v1beta1", "Job"), rayjob])
    assert not is_submitter([("ray.io/v1", "RayCluster"), rayjob])
    assert not is_submitter([])


def test_unknown_group_gets_no_subgroup_label():
    pg = group(parse_object(ray_doc("RayCluster", cluster_spec(worker("w")))))
    assert stamp(_pod("other"), pg).labels == {}
    assert stamp(_pod(None), pg).labels == {}


def test_missing_on_reports_only_what_differs_and_patch_shape():
    pg = group(parse_object(ray_doc("RayCluster", cluster_spec(worker("w")))))
    pod = _pod("w")
    full = stamp(pod, pg)
    pod.metadata.annotations.update(full.annotations)
    pod.metadata.labels.update(full.labels)
    assert not full.missing_on(pod)
    assert full.as_patch() == {"metadata": {"annotations": full.annotations, "labels": full.labels}}


def test_every_expanded_pod_finds_its_subgroup():
    spec = cluster_spec(worker("GPU_Workers", 2, numOfHosts=2), worker("cpu", 1), autoscaling=True)
    job = parse_object(ray_doc("RayJob", spec, labels={c.QUEUE_LABEL: "q"}))
    pg = group(job)
    pods = expand_pods(job)
    assert len(pods) == 1 + 4 + 1 + 1  # head, 2x2 gpu hosts, 1 cpu, submitter
    for pod in pods:
        assert c.SUBGROUP_LABEL in stamp(pod, pg).labels, pod.metadata.name
        assert pod.metadata.labels[c.QUEUE_LABEL] == "q"
    head = pods[0]
    assert [ct.name for ct in head.spec.containers][-1] == "autoscaler"

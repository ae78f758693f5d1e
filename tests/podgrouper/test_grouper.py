"""One test per podgrouper rule."""

from __future__ import annotations

import json

import pytest

from kai_ray import constants as c
from kai_ray.api import Pod, parse_object
from kai_ray.podgrouper import GroupingError, PodgrouperConfig, group
from tests.podgrouper.raydocs import cluster_spec, ray_doc, worker


def pg_of(doc, **kw):
    return group(parse_object(doc), **kw)


def mins(pg):
    return {sg.name: sg.min_member for sg in pg.spec.sub_groups}


def test_name_owner_reference_and_head_subgroup():
    pg = pg_of(ray_doc("RayCluster", cluster_spec(worker("gpu", 2)), name="rc", uid="abc"))
    assert pg.metadata.name == "pg-rc-abc"
    assert pg.metadata.namespace == "ns"
    ref = pg.metadata.owner_references[0]
    assert (ref.kind, ref.name, ref.uid, ref.api_version) == ("RayCluster", "rc", "abc", "ray.io/v1")
    assert mins(pg) == {"headgroup": 1, "gpu": 2}
    assert pg.spec.min_member == 3
    assert pg.validate_spec() == []


def test_min_replicas_times_hosts_when_min_positive():
    pg = pg_of(ray_doc("RayCluster", cluster_spec(worker("w", 4, minReplicas=2, maxReplicas=8, numOfHosts=4))))
    assert mins(pg)["w"] == 8
    assert pg.spec.min_member == 9


def test_replicas_times_hosts_when_min_zero():
    pg = pg_of(ray_doc("RayCluster", cluster_spec(worker("w", 3, minReplicas=0, numOfHosts=2))))
    assert mins(pg)["w"] == 6


def test_suspended_group_and_empty_group_contribute_nothing():
    pg = pg_of(
        ray_doc("RayCluster", cluster_spec(worker("a", 2, suspend=True), worker("b", 0, minReplicas=0), worker("c", 1)))
    )
    assert mins(pg) == {"headgroup": 1, "c": 1}
    assert pg.spec.min_member == 2


def test_replicas_clamped_into_min_max_like_kuberay():
    above = pg_of(ray_doc("RayCluster", cluster_spec(worker("w", 10, maxReplicas=3))))
    assert mins(above)["w"] == 3
    below = pg_of(ray_doc("RayCluster", cluster_spec(worker("w", 1, minReplicas=2, maxReplicas=5))))
    assert mins(below)["w"] == 2
    # min above max: KubeRay refuses the cluster (creates no pod), so does kai-ray, naming the field
    with pytest.raises(GroupingError, match=r"workerGroupSpecs\[0\]\.minReplicas: 6 is greater than maxReplicas 4"):
        pg_of(ray_doc("RayCluster", cluster_spec(worker("w", 1, minReplicas=6, maxReplicas=4))))


def test_max_member_autoscaling_on_uses_max_replicas():
    doc = ray_doc(
        "RayCluster",
        cluster_spec(
            worker("a", 1, minReplicas=1, maxReplicas=5, numOfHosts=2), worker("b", 2, maxReplicas=3), autoscaling=True
        ),
    )
    pg = pg_of(doc)
    assert pg.metadata.annotations[c.MAX_MEMBER] == str(1 + 10 + 3)
    assert json.loads(pg.metadata.annotations[c.SUBGROUP_MAX]) == {"headgroup": 1, "a": 10, "b": 3}


def test_max_member_autoscaling_off_uses_replicas():
    pg = pg_of(ray_doc("RayCluster", cluster_spec(worker("a", 2, minReplicas=1, maxReplicas=5), autoscaling=False)))
    assert pg.metadata.annotations[c.MAX_MEMBER] == "3"
    assert json.loads(pg.metadata.annotations[c.SUBGROUP_MAX])["a"] == 2


def test_autoscaled_group_starting_at_zero_keeps_a_subgroup_for_later_pods():
    pg = pg_of(ray_doc("RayCluster", cluster_spec(worker("a", 0, minReplicas=0, maxReplicas=4), autoscaling=True)))
    assert mins(pg)["a"] == 0
    assert pg.spec.min_member == 1
    assert json.loads(pg.metadata.annotations[c.SUBGROUP_MAX])["a"] == 4


def test_queue_from_owner_label_then_pod_then_default():
    doc = ray_doc("RayCluster", cluster_spec(worker("w")), labels={c.QUEUE_LABEL: "team-a"})
    assert pg_of(doc).spec.queue == "team-a"
    pod = Pod.model_validate({"metadata": {"name": "p", "labels": {c.QUEUE_LABEL: "team-b"}}})
    plain = ray_doc("RayCluster", cluster_spec(worker("w")))
    assert pg_of(plain, pod=pod).spec.queue == "team-b"
    assert pg_of(doc, pod=pod).spec.queue == "team-a"
    assert pg_of(plain).spec.queue == "default-queue"


def test_queue_label_key_is_configurable():
    doc = ray_doc("RayCluster", cluster_spec(worker("w")), labels={"runai/queue": "legacy"})
    assert pg_of(doc, config=PodgrouperConfig(queue_label_key="runai/queue")).spec.queue == "legacy"


@pytest.mark.parametrize("kind,expected", [("RayService", "inference"), ("RayJob", "train"), ("RayCluster", "train")])
def test_priority_defaults_per_kind(kind, expected):
    pg = pg_of(ray_doc(kind, cluster_spec(worker("w"))))
    assert pg.spec.priority_class_name == expected


def test_priority_defaults_are_configurable_and_kai_mode_is_all_train():
    doc = ray_doc("RayService", cluster_spec(worker("w")))
    assert pg_of(doc, config=PodgrouperConfig.kai_compatible()).spec.priority_class_name == "train"
    custom = PodgrouperConfig(default_priority={"RayService": "build"})
    assert pg_of(doc, config=custom).spec.priority_class_name == "build"


def test_priority_resolution_order():
    spec = cluster_spec(worker("w"))
    spec["headGroupSpec"]["template"]["spec"]["priorityClassName"] = "build"
    assert pg_of(ray_doc("RayJob", spec)).spec.priority_class_name == "build"
    pod = Pod.model_validate(
        {
            "metadata": {"name": "p", "labels": {"priorityClassName": "build-preemptible"}},
            "spec": {"priorityClassName": "inference"},
        }
    )
    assert pg_of(ray_doc("RayJob", spec), pod=pod).spec.priority_class_name == "build-preemptible"
    labelled = ray_doc("RayJob", spec, labels={"priorityClassName": "inference"})
    assert pg_of(labelled, pod=pod).spec.priority_class_name == "inference"
    ray_label = ray_doc("RayJob", spec, labels={"priorityClassName": "inference", c.RAY_PRIORITY_LABEL: "train"})
    assert pg_of(ray_label, pod=pod).spec.priority_class_name == "train"


def test_preemptibility_label_then_derived_from_priority():
    assert pg_of(ray_doc("RayJob", cluster_spec(worker("w")))).spec.preemptibility == "preemptible"
    assert pg_of(ray_doc("RayService", cluster_spec(worker("w")))).spec.preemptibility == "non-preemptible"
    build = ray_doc("RayJob", cluster_spec(worker("w")), labels={"priorityClassName": "build"})
    assert pg_of(build).spec.preemptibility == "non-preemptible"
    forced = ray_doc("RayService", cluster_spec(worker("w")), labels={c.PREEMPTIBILITY_LABEL: "preemptible"})
    assert pg_of(forced).spec.preemptibility == "preemptible"
    unknown = ray_doc("RayJob", cluster_spec(worker("w")), labels={"priorityClassName": "my-class"})
    assert pg_of(unknown).spec.preemptibility is None


def test_bad_preemptibility_label_names_the_field():
    doc = ray_doc("RayJob", cluster_spec(worker("w")), labels={c.PREEMPTIBILITY_LABEL: "maybe"})
    with pytest.raises(GroupingError, match=r"kai.scheduler/preemptibility"):
        pg_of(doc)


def test_topology_annotations_on_owner_and_group_template():
    spec = cluster_spec(worker("w", 2))
    spec["workerGroupSpecs"][0]["template"]["metadata"] = {
        "annotations": {c.TOPOLOGY: "dc", c.TOPOLOGY_REQUIRED: "rack"}
    }
    doc = ray_doc("RayCluster", spec, annotations={c.TOPOLOGY: "dc", c.TOPOLOGY_PREFERRED: "zone"})
    pg = pg_of(doc)
    assert pg.spec.topology_constraint.topology == "dc"
    assert pg.spec.topology_constraint.preferred_topology_level == "zone"
    w = next(sg for sg in pg.spec.sub_groups if sg.name == "w")
    assert w.topology_constraint.required_topology_level == "rack"


def test_topology_level_without_topology_is_an_error():
    doc = ray_doc("RayCluster", cluster_spec(worker("w")), annotations={c.TOPOLOGY_REQUIRED: "rack"})
    with pytest.raises(GroupingError, match="kai.scheduler/topology"):
        pg_of(doc)


def test_non_dns_group_names_are_mapped_deterministically():
    doc = ray_doc("RayCluster", cluster_spec(worker("GPU_Workers"), worker("gpu-workers")))
    pg1, pg2 = pg_of(doc), pg_of(doc)
    assert pg1.to_dict() == pg2.to_dict()
    names = [sg.name for sg in pg1.spec.sub_groups]
    assert "gpu-workers" in names and len(set(names)) == 3
    assert pg1.validate_spec() == []
    mapping = json.loads(pg1.metadata.annotations[c.SUBGROUP_NAMES])
    assert mapping["GPU_Workers"] in names


def test_preemption_delay_and_staleness_from_owner_annotations():
    doc = ray_doc("RayJob", cluster_spec(worker("w")), annotations={c.PREEMPTION_DELAY: "30s", c.STALENESS_GRACE: "2m"})
    pg = pg_of(doc)
    assert (pg.spec.preemption_delay, pg.spec.staleness_grace_period) == ("30s", "2m")


def test_rayjob_k8sjobmode_gets_submitter_subgroup_outside_the_gang():
    pg = pg_of(ray_doc("RayJob", cluster_spec(worker("w", 2))))
    assert mins(pg)["submitter"] == 0
    assert pg.spec.min_member == 3
    http = ray_doc("RayJob", cluster_spec(worker("w", 2)))
    http["spec"]["submissionMode"] = "HTTPMode"
    assert "submitter" not in mins(pg_of(http))


def test_rayjob_and_rayservice_use_the_live_cluster_when_given():
    live = parse_object(ray_doc("RayCluster", cluster_spec(worker("w", 5)), name="live"))
    pg = group(parse_object(ray_doc("RayService", cluster_spec(worker("w", 1)))), cluster=live)
    assert mins(pg)["w"] == 5
    assert pg.metadata.owner_references[0].kind == "RayService"


def test_labels_and_annotations_copied_from_top_owner_with_top_owner_metadata():
    doc = ray_doc("RayService", cluster_spec(worker("w")), labels={"team": "serving"}, annotations={"x": "y"})
    pg = pg_of(doc)
    assert pg.metadata.labels["team"] == "serving"
    assert pg.metadata.annotations["x"] == "y"
    assert "kind: RayService" in pg.metadata.annotations[c.TOP_OWNER_METADATA]


@pytest.mark.parametrize(
    "mutate,field",
    [
        (lambda d: d["spec"].pop("headGroupSpec"), "spec.headGroupSpec"),
        (lambda d: d["spec"]["workerGroupSpecs"].append(worker("w")), "workerGroupSpecs[1].groupName"),
    ],
)
def test_bad_cluster_specs_name_the_field(mutate, field):
    doc = ray_doc("RayCluster", cluster_spec(worker("w")))
    mutate(doc)
    with pytest.raises(GroupingError, match=field.replace("[", r"\[").replace("]", r"\]")):
        pg_of(doc)


def test_rayjob_with_cluster_selector_is_a_clear_error():
    doc = ray_doc("RayJob", cluster_spec(worker("w")))
    doc["spec"] = {"entrypoint": "x", "clusterSelector": {"ray.io/cluster": "shared"}}
    with pytest.raises(GroupingError, match="spec.rayClusterSpec"):
        pg_of(doc)


@pytest.mark.parametrize(
    ("where", "resources", "message"),
    [
        ("worker", {"limits": {"nvidia.com/gpu": "-8"}}, "'-8' is negative"),
        ("worker", {"limits": {"nvidia.com/gpu": 2.5}}, "2.5 is not a whole number"),
        ("head", {"requests": {"cpu": "4"}, "limits": {"cpu": "2"}}, "'4' is above the limit '2'"),
        ("submitter", {"requests": {"memory": "-1Gi"}}, "'-1Gi' is negative"),
    ],
)
def test_resources_kubernetes_would_refuse_make_the_object_ungroupable(where, resources, message):
    """The podgrouper, which every entry point goes through, refuses a Ray CR whose pods Kubernetes would
    refuse, naming the field (the operator turns it into a placeholder PodGroup and a Warning Event)."""
    doc = ray_doc("RayJob", cluster_spec(worker("gpu", 2)), name="job")
    spec = doc["spec"]["rayClusterSpec"]
    ctr = {"name": "c", "resources": resources}
    field = {
        "worker": "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0]",
        "head": "spec.rayClusterSpec.headGroupSpec.template.spec.containers[0]",
        "submitter": "spec.submitterPodTemplate.spec.containers[0]",
    }[where]
    if where == "worker":
        spec["workerGroupSpecs"][0]["template"]["spec"]["containers"] = [ctr]
    elif where == "head":
        spec["headGroupSpec"]["template"]["spec"]["containers"] = [ctr]
    else:
        doc["spec"]["submitterPodTemplate"] = {"spec": {"containers": [ctr]}}
    with pytest.raises(GroupingError) as err:
        pg_of(doc)
    assert str(err.value).startswith(f"RayJob job: {field}.resources."), err.value
    assert message in str(err.value)
    fraction = ray_doc("RayCluster", cluster_spec(worker("gpu", 1)), name="rc")
    fraction["spec"]["workerGroupSpecs"][0]["template"]["metadata"] = {"annotations": {c.GPU_FRACTION: "1.5"}}
    with pytest.raises(GroupingError, match=r"annotations\[gpu-fraction\]: '1.5' is not in \(0, 1\]"):
        pg_of(fraction)

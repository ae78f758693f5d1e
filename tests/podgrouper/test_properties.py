"""Property tests over random valid Ray CRs."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from kai_ray import constants as c
from kai_ray.api import parse_object
from kai_ray.api.podgroup import DNS_LABEL
from kai_ray.podgrouper import group

group_names = st.text(alphabet="abcXYZ_-019", min_size=1, max_size=12).filter(
    lambda s: s not in ("headgroup", "submitter")
)


@st.composite
def worker_groups(draw):
    names = draw(st.lists(group_names, min_size=0, max_size=4, unique_by=lambda s: s))
    groups = []
    for name in names:
        wg = {"groupName": name, "template": {"spec": {"containers": [{"name": "w"}]}}}
        for key, hi in (("replicas", 6), ("minReplicas", 4), ("maxReplicas", 8), ("numOfHosts", 3)):
            value = draw(st.none() | st.integers(min_value=0 if key != "numOfHosts" else 1, max_value=hi))
            if value is not None:
                wg[key] = value
        if wg.get("minReplicas", 0) > wg.get("maxReplicas", wg.get("minReplicas", 0)):
            wg["minReplicas"], wg["maxReplicas"] = wg["maxReplicas"], wg["minReplicas"]  # KubeRay refuses min > max
        if draw(st.booleans()) and draw(st.booleans()):
            wg["suspend"] = True
        groups.append(wg)
    return groups


@st.composite
def ray_crs(draw):
    kind = draw(st.sampled_from(["RayCluster", "RayJob", "RayService"]))
    spec = {
        "headGroupSpec": {"template": {"spec": {"containers": [{"name": "head"}]}}},
        "workerGroupSpecs": draw(worker_groups()),
    }
    auto = draw(st.none() | st.booleans())
    if auto is not None:
        spec["enableInTreeAutoscaling"] = auto
    body = {"RayCluster": spec, "RayJob": {"rayClusterSpec": spec}, "RayService": {"rayClusterConfig": spec}}[kind]
    return {
        "apiVersion": "ray.io/v1",
        "kind": kind,
        "metadata": {"name": "x", "namespace": "n", "uid": draw(st.uuids()).hex},
        "spec": body,
    }


@settings(max_examples=300, deadline=None)
@given(ray_crs())
def test_podgroup_invariants(doc):
    obj = parse_object(doc)
    pg = group(obj)
    subs = pg.spec.sub_groups
    assert pg.spec.min_member == sum(sg.min_member for sg in subs)
    max_member = int(pg.metadata.annotations[c.MAX_MEMBER])
    assert pg.spec.min_member <= max_member
    sub_max = json.loads(pg.metadata.annotations[c.SUBGROUP_MAX])
    for sg in subs:
        assert DNS_LABEL.match(sg.name) and len(sg.name) <= 63
        assert sg.min_member <= sub_max[sg.name]
    assert pg.validate_spec() == []
    # deterministic and idempotent
    again = group(parse_object(doc))
    assert again.to_dict() == pg.to_dict()
    assert group(parse_object(obj.to_dict())).to_dict() == pg.to_dict()

"""API models: KAI field names, lossless round trips, and the webhook checks."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from kai_ray.api import ManifestError, PodGroup, Queue, parse_object, queue_cycles
from kai_ray.api.quantity import QuantityError, parse_quantity

QUEUE = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: team-a, labels: {x: y}}
spec:
  parentQueue: dept
  priority: 120
  displayName: Team A
  resources:
    gpu: {quota: 8, limit: -1, overQuotaWeight: 2}
    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    memory: {quota: 1000, limit: 0, overQuotaWeight: 1}
  futureField: {keep: me}
status:
  allocated: {nvidia.com/gpu: "4"}
"""

PODGROUP = """
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata: {name: pg, namespace: ns}
spec:
  minMember: 3
  queue: team-a
  priorityClassName: train
  preemptibility: preemptible
  markUnschedulable: true
  schedulingBackoff: 1
  preemptionDelay: 30s
  topologyConstraint: {topology: dc, requiredTopologyLevel: rack}
  subGroups:
  - {name: headgroup, minMember: 1}
  - {name: workers, minMember: 2, topologyConstraint: {topology: dc, preferredTopologyLevel: zone}}
  somethingNew: 1
status:
  schedulingConditions:
  - type: UnschedulableOnNodePool
    nodePool: default
    transitionID: "3"
    reasons: [{reason: OverLimit, message: m}]
"""


@pytest.mark.parametrize("text", [QUEUE, PODGROUP])
def test_round_trip_keeps_every_field(text):
    raw = yaml.safe_load(text)
    obj = parse_object(raw)
    assert obj.to_dict() == raw


def test_queue_fields_and_units():
    q = parse_object(yaml.safe_load(QUEUE))
    assert isinstance(q, Queue)
    assert q.spec.parent_queue == "dept" and q.spec.resources.gpu.over_quota_weight == 2
    assert q.spec.resources.memory.limit == 0  # literal zero, not "unset"
    assert [e.field for e in q.validate_spec()] == ["spec.resources.memory.quota"]  # quota 1000 > limit 0


def test_queue_webhook_checks():
    q = Queue.model_validate({"metadata": {"name": "q"}, "spec": {}})
    assert [e.field for e in q.validate_spec()] == ["spec.resources"]
    bad = Queue.model_validate(
        {
            "metadata": {"name": "q"},
            "spec": {
                "parentQueue": "q",
                "resources": {
                    "gpu": {"quota": -2, "limit": -5},
                    "cpu": {"quota": 10, "limit": 5, "overQuotaWeight": -1},
                },
            },
        }
    )
    fields = {e.field for e in bad.validate_spec()}
    assert fields == {
        "spec.resources.gpu.quota",
        "spec.resources.gpu.limit",
        "spec.resources.cpu.quota",
        "spec.resources.cpu.overQuotaWeight",
        "spec.parentQueue",
    }


def test_queue_cycles_and_missing_parents():
    def q(name, parent=None):
        return Queue.model_validate({"metadata": {"name": name}, "spec": {"parentQueue": parent, "resources": {}}})

    errors = queue_cycles([q("a", "b"), q("b", "a"), q("c", "nope"), q("d")])
    text = " ".join(str(e) for e in errors)
    assert "cycle" in text and "'nope' not found" in text
    assert not queue_cycles([q("root"), q("leaf", "root")])


def test_podgroup_webhook_checks():
    pg = parse_object(yaml.safe_load(PODGROUP))
    assert isinstance(pg, PodGroup) and pg.validate_spec() == []
    bad = PodGroup.model_validate(
        {
            "spec": {
                "minMember": 1,
                "minSubGroup": 1,
                "schedulingBackoff": 3,
                "subGroups": [
                    {"name": "Bad_Name", "minMember": 1},
                    {"name": "x", "parent": "y"},
                    {"name": "y", "parent": "x", "minMember": 1},
                    {"name": "z", "parent": "missing", "minMember": 1},
                    {"name": "y", "minMember": 1},
                ],
            }
        }
    )
    fields = [e.field for e in bad.validate_spec()]
    assert "spec.minSubGroup" in fields
    assert "spec.schedulingBackoff" in fields
    assert "spec.subGroups[0].name" in fields
    assert "spec.subGroups[3].parent" in fields
    assert "spec.subGroups[4].name" in fields  # duplicate
    assert any("cycle" in str(e) for e in bad.validate_spec())


def test_type_errors_name_the_field():
    doc = yaml.safe_load(PODGROUP)
    doc["spec"]["minMember"] = "three"
    with pytest.raises(ManifestError, match=r"\(PodGroup pg\): spec\.minMember: 'three' is not a whole number$"):
        parse_object(doc)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s.update(minMember=1.5), "spec.minMember: 1.5 is not a whole number"),
        (lambda s: s.update(subGroups={"a": 1}), "spec.subGroups: expected a list, got a mapping"),
        (lambda s: s.update(queue=["q"]), "spec.queue: expected a string, got a list"),
    ],
)
def test_errors_speak_yaml_not_pydantic_or_python(change: Any, message: str) -> None:
    doc = yaml.safe_load(PODGROUP)
    change(doc["spec"])
    with pytest.raises(ManifestError) as exc:
        parse_object(doc)
    assert str(exc.value).endswith(message), str(exc.value)
    for python in ("Input should", "dict", "list[", "str", "int"):
        assert python not in str(exc.value).replace("a list", "").replace("a string", ""), str(exc.value)


@pytest.mark.parametrize(
    "text,value",
    [("500m", 0.5), ("2Gi", 2 * 2**30), ("1e3", 1000.0), ("64", 64.0), ("1.5", 1.5), (8, 8.0), ("100M", 1e8)],
)
def test_quantities(text, value):
    assert parse_quantity(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["", "abc", "1Xi", "--1"])
def test_bad_quantities(text):
    with pytest.raises(QuantityError):
        parse_quantity(text)

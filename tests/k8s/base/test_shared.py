"""Watched objects' repeated strings and parts held once: values unchanged, equal strings and equal parts one
object, the table of parts bounded."""

from __future__ import annotations

import copy
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from kai_ray.k8s.base.shared import SharedParts, intern_strings

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_interning_changes_no_value(value: Any) -> None:
    before = copy.deepcopy(value)
    assert intern_strings(value) == before


def test_equal_strings_of_two_decoded_objects_become_one() -> None:
    body = b'{"metadata": {"namespace": "team-a", "resourceVersion": "12", "labels": {"app": "trainer"}},'
    body += b' "spec": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}}'
    a, b = intern_strings(orjson.loads(body)), intern_strings(orjson.loads(body))
    assert a["metadata"]["namespace"] is b["metadata"]["namespace"]
    assert a["metadata"]["labels"]["app"] is b["metadata"]["labels"]["app"]
    assert a["spec"]["tolerations"][0]["operator"] is b["spec"]["tolerations"][0]["operator"]


def test_equal_parts_are_one_object_and_different_ones_stay_apart() -> None:
    parts = SharedParts()
    one = {"spec": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}}
    two = copy.deepcopy(one)
    other = {"spec": {"tolerations": [{"key": "tpu", "operator": "Exists"}]}}
    for obj in (one, two, other):
        parts.share(obj, ("spec", "tolerations"))
    assert one["spec"]["tolerations"] is two["spec"]["tolerations"]
    assert other["spec"]["tolerations"] is not one["spec"]["tolerations"]
    assert other == {"spec": {"tolerations": [{"key": "tpu", "operator": "Exists"}]}}


def test_a_missing_path_or_a_scalar_is_left_alone() -> None:
    parts = SharedParts()
    obj: dict[str, Any] = {"spec": "not a mapping", "status": {"phase": "Running"}}
    parts.share(obj, ("spec", "tolerations"))
    parts.share(obj, ("status", "phase"))
    parts.share(obj, ("metadata", "labels"))
    assert obj == {"spec": "not a mapping", "status": {"phase": "Running"}}
    assert len(parts) == 0


def test_the_table_starts_over_at_its_limit_and_what_was_handed_out_is_kept() -> None:
    parts = SharedParts(limit=3)
    held = [parts.get({"n": i}) for i in range(3)]
    assert len(parts) == 3
    fourth = parts.get({"n": 3})
    assert len(parts) == 1, "the table started over"
    assert held == [{"n": 0}, {"n": 1}, {"n": 2}] and fourth == {"n": 3}
    again = parts.get({"n": 0})
    assert again == held[0]


def test_sharing_all_parts_interns_the_rest_and_the_held_parts() -> None:
    parts = SharedParts()
    body = b'{"metadata": {"namespace": "team-a", "labels": {"app": "trainer"}}, "spec": {"nodeName": "n1"}}'
    a = parts.share_all(orjson.loads(body), (("metadata", "labels"),))
    b = parts.share_all(orjson.loads(body), (("metadata", "labels"),))
    assert a == b == orjson.loads(body)
    assert a["metadata"]["labels"] is b["metadata"]["labels"]
    assert a["metadata"]["namespace"] is b["metadata"]["namespace"]
    assert a["spec"]["nodeName"] is b["spec"]["nodeName"]

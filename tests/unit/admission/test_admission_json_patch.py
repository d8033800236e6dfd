"""RFC 6902 diff correctness: apply the generated patch and compare."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorfusion.domain.json_patch import (
    escape_pointer_token,
    json_equal,
    json_patch_diff,
    pointer,
)
from tests.hypothesis_budget import examples

from .admission_builders import apply_patch


def test_pointer_escaping() -> None:
    assert escape_pointer_token("a/b~c") == "a~1b~0c"
    assert escape_pointer_token("~1") == "~01"
    assert pointer("metadata", "annotations", "tensor-fusion.ai/gpupool") == (
        "/metadata/annotations/tensor-fusion.ai~1gpupool"
    )
    assert pointer("spec", "containers", 0) == "/spec/containers/0"


@pytest.mark.parametrize(
    ("old", "new", "patch"),
    [
        ({"a": 1}, {"a": 1}, []),
        ({"a": 1}, {"a": 2}, [{"op": "replace", "path": "/a", "value": 2}]),
        ({"a": 1}, {}, [{"op": "remove", "path": "/a"}]),
        ({}, {"a/b": {"c": 1}}, [{"op": "add", "path": "/a~1b", "value": {"c": 1}}]),
        ({"a": [1, 2]}, {"a": [1, 2, 3]}, [{"op": "add", "path": "/a/2", "value": 3}]),
        (
            {"a": [1, 2, 3]},
            {"a": [1]},
            [{"op": "remove", "path": "/a/2"}, {"op": "remove", "path": "/a/1"}],
        ),
        ({"a": 1}, {"a": True}, [{"op": "replace", "path": "/a", "value": True}]),
        ({"a": 1}, {"a": 1.0}, [{"op": "replace", "path": "/a", "value": 1.0}]),
        ({"a": {"b": 1}}, {"a": [1]}, [{"op": "replace", "path": "/a", "value": [1]}]),
        (1, 2, [{"op": "replace", "path": "", "value": 2}]),
    ],
)
def test_diff_examples(old: Any, new: Any, patch: list[dict[str, Any]]) -> None:
    assert json_patch_diff(old, new) == patch
    assert json_equal(apply_patch(old, patch), new)


def test_patch_values_are_copies() -> None:
    new = {"a": {"b": [1]}}
    patch = json_patch_diff({}, new)
    new["a"]["b"].append(2)
    assert patch[0]["value"] == {"b": [1]}


def test_json_equal_is_type_strict() -> None:
    assert json_equal({"a": [1, "x"]}, {"a": [1, "x"]})
    assert not json_equal(True, 1)
    assert not json_equal(0, False)
    assert not json_equal({"a": 1}, {"a": 1, "b": 2})
    assert not json_equal([1], [1, 2])


KEYS = st.text(alphabet="ab/~c-.", min_size=0, max_size=4)
SCALARS = st.none() | st.booleans() | st.integers(-3, 3) | st.text(alphabet="xy", max_size=2)
JSON = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=examples(400), deadline=None)
@given(JSON, JSON)
def test_applying_the_diff_gives_the_new_document(old: Any, new: Any) -> None:
    patch = json_patch_diff(old, new)
    assert json_equal(apply_patch(old, patch), new)
    if json_equal(old, new):
        assert patch == []

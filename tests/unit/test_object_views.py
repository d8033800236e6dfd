"""Typed reads of API objects given as JSON mappings."""

from __future__ import annotations

from typing import Any

from tensorfusion.domain.object_views import (
    annotations_of,
    controller_of,
    creation_timestamp_of,
    deletion_timestamp_of,
    generation_of,
    is_deleting,
    labels_of,
    name_of,
    namespace_of,
    owner_references_of,
    resource_version_of,
    status_of,
    uid_of,
)

OWNER = {"kind": "ReplicaSet", "name": "web-1", "controller": True}
POD: dict[str, Any] = {
    "metadata": {
        "name": "web-1-a",
        "namespace": "ml",
        "uid": "u-1",
        "resourceVersion": "42",
        "generation": 3,
        "labels": {"app": "web"},
        "annotations": {"note": "x"},
        "creationTimestamp": "2027-01-15T08:00:00Z",
        "deletionTimestamp": "2027-01-15T09:00:00Z",
        "ownerReferences": [{"kind": "Node", "name": "n"}, OWNER],
    },
    "status": {"phase": "Running"},
}


def test_fields_are_read_without_copying() -> None:
    assert (name_of(POD), namespace_of(POD), uid_of(POD)) == ("web-1-a", "ml", "u-1")
    assert (resource_version_of(POD), generation_of(POD)) == ("42", 3)
    assert labels_of(POD) is POD["metadata"]["labels"]
    assert annotations_of(POD) == {"note": "x"}
    assert creation_timestamp_of(POD) == "2027-01-15T08:00:00Z"
    assert deletion_timestamp_of(POD) == "2027-01-15T09:00:00Z" and is_deleting(POD)
    assert owner_references_of(POD) is POD["metadata"]["ownerReferences"]
    assert controller_of(POD) is OWNER
    assert status_of(POD) == {"phase": "Running"}


def test_absent_or_ill_typed_fields_read_as_empty() -> None:
    for obj in (None, {}, {"metadata": None}, {"metadata": "x", "status": []}):
        assert (name_of(obj), namespace_of(obj), uid_of(obj), resource_version_of(obj)) == (
            ("", "", "", "")
        )
        assert generation_of(obj) is None and not is_deleting(obj)
        assert labels_of(obj) == {} and annotations_of(obj) == {} and status_of(obj) == {}
        assert owner_references_of(obj) == () and controller_of(obj) is None
    odd = {"metadata": {"generation": True, "ownerReferences": ["x", {"controller": True}]}}
    assert generation_of(odd) is None
    assert controller_of(odd) == {"controller": True}

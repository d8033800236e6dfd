"""ObjectStore: the events each change of the informer's cache makes."""

from __future__ import annotations

from typing import Any

import pytest

from tensorfusion.runtime.informer_store import (
    EventKind,
    InformerEvent,
    ObjectKey,
    ObjectStore,
)


def obj(
    name: str, version: str, *, namespace: str | None = "ns", uid: str = "", **data: str
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "resourceVersion": version, "uid": uid or name}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}


def summary(events: list[InformerEvent]) -> list[tuple[str, str, str | None, bool]]:
    """(kind, key, resourceVersion of obj, final_state_unknown) of each event."""
    return [
        (e.kind.value, str(e.key), e.obj["metadata"]["resourceVersion"], e.final_state_unknown)
        for e in events
    ]


def test_a_key_is_namespace_and_name() -> None:
    assert ObjectKey.of(obj("a", "1")) == ObjectKey("ns", "a")
    assert str(ObjectKey("ns", "a")) == "ns/a"
    cluster_scoped = ObjectKey.of(obj("node-1", "1", namespace=None))
    assert cluster_scoped == ObjectKey("", "node-1")
    assert str(cluster_scoped) == "node-1"


@pytest.mark.parametrize(
    "broken",
    [{"kind": "ConfigMap"}, {"metadata": {"namespace": "ns"}}, {"metadata": {"name": ""}}],
)
def test_an_object_without_a_name_has_no_key(broken: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"object has no metadata\.name"):
        ObjectKey.of(broken)


def test_upsert_adds_then_modifies_with_the_old_object() -> None:
    store = ObjectStore()
    first, second = obj("a", "1", value="x"), obj("a", "2", value="y")
    assert store.upsert(first) == [InformerEvent(EventKind.ADDED, ObjectKey("ns", "a"), first)]
    assert store.upsert(second) == [
        InformerEvent(EventKind.MODIFIED, ObjectKey("ns", "a"), second, old=first)
    ]
    assert store.get(ObjectKey("ns", "a")) is second
    assert len(store) == 1
    assert ObjectKey("ns", "a") in store


def test_upsert_of_the_same_version_changes_nothing() -> None:
    store = ObjectStore()
    first = obj("a", "1")
    store.upsert(first)
    assert store.upsert(obj("a", "1")) == []
    assert store.get(ObjectKey("ns", "a")) is first


def test_a_new_uid_under_the_same_name_is_a_delete_then_an_add() -> None:
    store = ObjectStore()
    old, new = obj("a", "1", uid="uid-1"), obj("a", "5", uid="uid-2")
    store.upsert(old)
    assert store.upsert(new) == [
        InformerEvent(EventKind.DELETED, ObjectKey("ns", "a"), old, final_state_unknown=True),
        InformerEvent(EventKind.ADDED, ObjectKey("ns", "a"), new),
    ]
    assert store.get(ObjectKey("ns", "a")) is new


def test_delete_reports_the_final_state_and_ignores_unknown_keys() -> None:
    store = ObjectStore()
    store.upsert(obj("a", "1"))
    final = obj("a", "3")
    assert store.delete(final) == [InformerEvent(EventKind.DELETED, ObjectKey("ns", "a"), final)]
    assert store.get(ObjectKey("ns", "a")) is None
    assert store.delete(obj("never-seen", "4")) == []
    assert len(store) == 0


def test_replace_deletes_what_vanished_first_then_follows_the_list() -> None:
    store = ObjectStore()
    for item in [obj("gone", "1"), obj("same", "2"), obj("changed", "3"), obj("also-gone", "4")]:
        store.upsert(item)
    events = store.replace([obj("new", "9"), obj("changed", "8"), obj("same", "2")])
    assert summary(events) == [
        ("DELETED", "ns/gone", "1", True),
        ("DELETED", "ns/also-gone", "4", True),
        ("ADDED", "ns/new", "9", False),
        ("MODIFIED", "ns/changed", "8", False),
    ]
    assert sorted(map(str, store.keys())) == ["ns/changed", "ns/new", "ns/same"]
    assert [value["metadata"]["name"] for value in store.values()] == ["same", "changed", "new"]
    assert [str(key) for key, _ in store.items()] == ["ns/same", "ns/changed", "ns/new"]


def test_replace_of_an_empty_store_adds_in_list_order() -> None:
    store = ObjectStore()
    events = store.replace([obj("b", "1"), obj("a", "2", namespace=None)])
    assert summary(events) == [("ADDED", "ns/b", "1", False), ("ADDED", "a", "2", False)]

"""The informer's cache: API objects by (namespace, name), and the events each change makes.

Pure bookkeeping, no I/O. Objects are the API's JSON objects as plain dicts, stored as given and
handed out as read-only ``Mapping`` views of the same dicts: callers must copy before changing
one. Every change returns the events it makes, in order:

- :meth:`ObjectStore.upsert`: ADDED for a new key; MODIFIED (with the old object) when the
  resourceVersion differs; nothing when it is the same; DELETED then ADDED when the UID differs
  (the object was deleted and created again under the same name);
- :meth:`ObjectStore.delete`: DELETED with the object's final state, nothing for an unknown key;
- :meth:`ObjectStore.replace` (a relist): DELETED, marked ``final_state_unknown``, for every key
  the list no longer has, then :meth:`ObjectStore.upsert` for each listed object in list order.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["EventKind", "InformerEvent", "ObjectKey", "ObjectStore"]


@dataclass(frozen=True, slots=True, order=True)
class ObjectKey:
    """Namespace (empty for cluster-scoped objects) and name of an object."""

    namespace: str
    name: str

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectKey:
        """The key of an API object; ValueError when it has no ``metadata.name``."""
        metadata = obj.get("metadata")
        name = metadata.get("name") if isinstance(metadata, Mapping) else None
        if not isinstance(name, str) or not name:
            raise ValueError(f"object has no metadata.name: {_describe(obj)}")
        namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
        return cls(namespace if isinstance(namespace, str) else "", name)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


class EventKind(enum.Enum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


@dataclass(frozen=True, slots=True)
class InformerEvent:
    """One change of the cache, as handlers receive it."""

    kind: EventKind
    key: ObjectKey
    obj: Mapping[str, Any]
    """The object now; for DELETED its last state known."""
    old: Mapping[str, Any] | None = None
    """For MODIFIED the previous object, else None."""
    final_state_unknown: bool = False
    """For DELETED found by a relist (or a UID change): ``obj`` is the last state seen, the
    object may have changed before it was deleted."""

    def changed(self, facts: Callable[[Mapping[str, Any]], object]) -> bool:
        """Whether the event is anything but a MODIFIED that left `facts(object)` as it was."""
        if self.kind is not EventKind.MODIFIED or self.old is None:
            return True
        return facts(self.old) != facts(self.obj)


class ObjectStore:
    """Objects by key, changed only through methods that return the events they make."""

    def __init__(self) -> None:
        self._objects: dict[ObjectKey, dict[str, Any]] = {}

    def get(self, key: ObjectKey) -> Mapping[str, Any] | None:
        return self._objects.get(key)

    def keys(self) -> list[ObjectKey]:
        return list(self._objects)

    def values(self) -> list[Mapping[str, Any]]:
        return list(self._objects.values())

    def items(self) -> list[tuple[ObjectKey, Mapping[str, Any]]]:
        return list(self._objects.items())

    def __len__(self) -> int:
        return len(self._objects)

    def __contains__(self, key: object) -> bool:
        return key in self._objects

    def upsert(self, obj: dict[str, Any]) -> list[InformerEvent]:
        """Store an added or modified object."""
        key = ObjectKey.of(obj)
        old = self._objects.get(key)
        if old is not None:
            version = _metadata_field(obj, "resourceVersion")
            if version is not None and version == _metadata_field(old, "resourceVersion"):
                return []
        self._objects[key] = obj
        if old is None:
            return [InformerEvent(EventKind.ADDED, key, obj)]
        old_uid, uid = _metadata_field(old, "uid"), _metadata_field(obj, "uid")
        if old_uid is not None and uid is not None and old_uid != uid:
            return [
                InformerEvent(EventKind.DELETED, key, old, final_state_unknown=True),
                InformerEvent(EventKind.ADDED, key, obj),
            ]
        return [InformerEvent(EventKind.MODIFIED, key, obj, old=old)]

    def delete(self, obj: dict[str, Any]) -> list[InformerEvent]:
        """Remove a deleted object; ``obj`` is its final state."""
        key = ObjectKey.of(obj)
        if self._objects.pop(key, None) is None:
            return []
        return [InformerEvent(EventKind.DELETED, key, obj)]

    def replace(self, objects: Iterable[dict[str, Any]]) -> list[InformerEvent]:
        """Make the store hold exactly ``objects`` (the result of a list)."""
        listed = {ObjectKey.of(obj): obj for obj in objects}
        events = [
            InformerEvent(EventKind.DELETED, key, self._objects.pop(key), final_state_unknown=True)
            for key in [key for key in self._objects if key not in listed]
        ]
        for obj in listed.values():
            events.extend(self.upsert(obj))
        return events


def _metadata_field(obj: Mapping[str, Any], field: str) -> str | None:
    metadata = obj.get("metadata")
    value = metadata.get(field) if isinstance(metadata, Mapping) else None
    return value if isinstance(value, str) and value else None


def _describe(obj: Mapping[str, Any]) -> str:
    text = repr(dict(obj)) if isinstance(obj, Mapping) else repr(obj)
    return text if len(text) <= 200 else text[:197] + "..."

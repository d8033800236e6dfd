"""Typed reads of a Kubernetes object given as a plain JSON mapping.

Cheap on purpose (hot paths): no copying, no validation; an absent or ill-typed field reads as
empty ("" for strings, an empty mapping for maps, None for optional values).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = [
    "Obj",
    "annotations_of",
    "controller_of",
    "creation_timestamp_of",
    "deletion_timestamp_of",
    "generation_of",
    "is_deleting",
    "labels_of",
    "metadata_of",
    "name_of",
    "namespace_of",
    "owner_references_of",
    "resource_version_of",
    "status_of",
    "uid_of",
]

Obj = Mapping[str, Any]
_EMPTY: Final[Mapping[str, Any]] = {}


def metadata_of(obj: Obj | None) -> Mapping[str, Any]:
    """`metadata` (empty when absent)."""
    metadata = obj.get("metadata") if obj is not None else None
    return metadata if isinstance(metadata, Mapping) else _EMPTY


def name_of(obj: Obj | None) -> str:
    """`metadata.name` ("" when absent)."""
    return str(metadata_of(obj).get("name") or "")


def namespace_of(obj: Obj | None) -> str:
    """`metadata.namespace` ("" when absent)."""
    return str(metadata_of(obj).get("namespace") or "")


def uid_of(obj: Obj | None) -> str:
    """`metadata.uid` ("" when absent)."""
    return str(metadata_of(obj).get("uid") or "")


def resource_version_of(obj: Obj | None) -> str:
    """`metadata.resourceVersion` ("" when absent)."""
    return str(metadata_of(obj).get("resourceVersion") or "")


def generation_of(obj: Obj | None) -> int | None:
    """`metadata.generation` (None when absent or not an integer)."""
    generation = metadata_of(obj).get("generation")
    return generation if isinstance(generation, int) and not isinstance(generation, bool) else None


def labels_of(obj: Obj | None) -> Mapping[str, str]:
    """`metadata.labels` (empty when absent)."""
    labels = metadata_of(obj).get("labels")
    return labels if isinstance(labels, Mapping) else _EMPTY


def annotations_of(obj: Obj | None) -> Mapping[str, str]:
    """`metadata.annotations` (empty when absent)."""
    annotations = metadata_of(obj).get("annotations")
    return annotations if isinstance(annotations, Mapping) else _EMPTY


def creation_timestamp_of(obj: Obj | None) -> Any:
    """`metadata.creationTimestamp` as stored (None when absent)."""
    return metadata_of(obj).get("creationTimestamp")


def deletion_timestamp_of(obj: Obj | None) -> Any:
    """`metadata.deletionTimestamp` as stored (None when absent)."""
    return metadata_of(obj).get("deletionTimestamp")


def is_deleting(obj: Obj | None) -> bool:
    """Whether the object carries a `deletionTimestamp`."""
    return metadata_of(obj).get("deletionTimestamp") is not None


def owner_references_of(obj: Obj | None) -> Sequence[Mapping[str, Any]]:
    """`metadata.ownerReferences` (empty when absent; entries that are not maps left out)."""
    references = metadata_of(obj).get("ownerReferences")
    if not isinstance(references, list | tuple):
        return ()
    if all(isinstance(reference, Mapping) for reference in references):
        return references
    return [reference for reference in references if isinstance(reference, Mapping)]


def controller_of(obj: Obj | None) -> Mapping[str, Any] | None:
    """The owner reference marked `controller: true`, if any."""
    for reference in owner_references_of(obj):
        if reference.get("controller") is True:
            return reference
    return None


def status_of(obj: Obj | None) -> Mapping[str, Any]:
    """`status` (empty when absent)."""
    status = obj.get("status") if obj is not None else None
    return status if isinstance(status, Mapping) else _EMPTY

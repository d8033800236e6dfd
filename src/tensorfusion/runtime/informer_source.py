"""What an informer reads from: a list with its resourceVersion, and a watch from one.

:class:`ObjectSource` is the seam between the informer's logic and the API server;
``informer_lightkube.LightkubeSource`` is the real one, tests use fakes. Objects are the JSON
objects of the API as plain dicts.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "ApiAnswerError",
    "Listing",
    "ObjectSource",
    "ResourceExpiredError",
    "WatchEvent",
    "WatchType",
]


class ResourceExpiredError(Exception):
    """The resourceVersion is too old for the API server (410 Gone): list again."""


class ApiAnswerError(Exception):
    """The API server answered a list or a watch with an error status (429 while it throttles a
    starting client, 5xx): an answer the informer expects and retries, logged in one line."""

    def __init__(self, code: int | None, text: str) -> None:
        super().__init__(text)
        self.code = code


class WatchType(enum.Enum):
    """The ``type`` of a watch event (ERROR events are raised as exceptions by the source)."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    BOOKMARK = "BOOKMARK"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One event of a watch: its type and the object (for BOOKMARK only its metadata)."""

    type: WatchType
    obj: dict[str, Any]

    @property
    def resource_version(self) -> str | None:
        metadata = self.obj.get("metadata")
        version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
        return version if isinstance(version, str) and version else None


@dataclass(frozen=True, slots=True)
class Listing:
    """Every object of a list, and the resourceVersion the list was taken at."""

    objects: list[dict[str, Any]]
    resource_version: str


class ObjectSource(Protocol):
    """Lists and watches one resource type (with its namespace and selectors)."""

    @property
    def description(self) -> str:
        """Names the resource and selection in logs, e.g. ``pods in all namespaces``."""
        ...

    async def list(self) -> Listing:
        """All objects now; raises on failure."""
        ...

    def watch(self, resource_version: str) -> AsyncIterator[WatchEvent]:
        """Changes after ``resource_version``, in order, until the watch ends.

        Raises :class:`ResourceExpiredError` when that version is too old, and any other
        exception when the watch fails.
        """
        ...

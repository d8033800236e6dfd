"""Writes only the leader may make: fenced, cut off in time, retried on conflict.

Every write goes through `runtime.fence.fenced_call` (runtime.md, *Fencing*): the elector's
`fence()` raises `NotLeaderError` once leadership is not known to last (nothing is sent), else
returns the seconds it is known to last, and the request is cut off then. `patch_fresh` and
`replace_fresh` build the write from the object as last read and send it with that object's
`resourceVersion`, so a write based on an outdated read is refused with 409 by the API server and
built again from a fresh read.

Events go through `note()`: fenced too (a follower writes none), never raising.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

from tensorfusion.adapters.kube.events import EventSink, InvolvedObject
from tensorfusion.adapters.kube.object_client import KubeError, ObjectClient
from tensorfusion.domain.object_views import Obj, metadata_of, resource_version_of
from tensorfusion.runtime.fence import Fence, fenced_call
from tensorfusion.runtime.leader_election import NotLeaderError

__all__ = [
    "CONFLICT_ATTEMPTS",
    "EventSink",
    "Fence",
    "FencedWriter",
    "WriteStats",
    "involved",
]

_log = logging.getLogger(__name__)
T = TypeVar("T")

CONFLICT_ATTEMPTS: Final = 5
"""Attempts of one write that keeps meeting 409 (each with a fresh read) before giving up."""


def involved(kind: str, obj: Obj, api_version: str = "tensor-fusion.ai/v1") -> InvolvedObject:
    """The Event's subject for an object given as a dict."""
    metadata = metadata_of(obj)
    return InvolvedObject(
        kind=kind,
        name=str(metadata.get("name") or ""),
        namespace=str(metadata.get("namespace") or ""),
        uid=str(metadata.get("uid") or ""),
        api_version=str(obj.get("apiVersion") or api_version),
    )


@dataclass(slots=True)
class WriteStats:
    """Counters of one writer, for `/metrics`."""

    writes: int = 0
    """Writes the API server accepted."""
    conflicts: int = 0
    """409 answers, each followed by a fresh read (API retries)."""
    failures: int = 0
    """Writes that failed otherwise (the caller retries with backoff)."""
    fenced: int = 0
    """Writes refused because leadership is not known to last."""


class FencedWriter:
    """Leader-only writes over an `ObjectClient`; reads go straight to it."""

    def __init__(
        self,
        client: ObjectClient,
        fence: Fence,
        *,
        events: EventSink | None = None,
        conflict_attempts: int = CONFLICT_ATTEMPTS,
    ) -> None:
        self.client = client
        self.stats = WriteStats()
        self._fence = fence
        self._events = events
        self._attempts = conflict_attempts

    async def read(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        """The object from the API server (not fenced), None when it does not exist."""
        return await self.client.get(kind, name, namespace)

    async def _fenced(self, call: Callable[[], Awaitable[T]]) -> T:
        try:
            result = await fenced_call(self._fence, lambda _left: call())
        except NotLeaderError:
            self.stats.fenced += 1
            raise
        except KubeError as error:
            if error.code == 409:
                self.stats.conflicts += 1
            else:
                self.stats.failures += 1
            raise
        except Exception:
            self.stats.failures += 1
            raise
        self.stats.writes += 1
        return result

    async def create(self, kind: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create an object (KubeError 409 when it exists)."""
        return await self._fenced(lambda: self.client.create(kind, body))

    async def patch(
        self,
        kind: str,
        name: str,
        body: Mapping[str, Any],
        *,
        namespace: str = "",
        status: bool = False,
    ) -> dict[str, Any] | None:
        """Merge-patch an object; None when it does not exist."""
        try:
            return await self._fenced(
                lambda: self.client.patch(kind, name, body, namespace=namespace, status=status)
            )
        except KubeError as error:
            if error.code == 404:
                return None
            raise

    async def delete(self, kind: str, name: str, namespace: str = "") -> bool:
        """Delete an object; False when it did not exist."""
        return await self._fenced(lambda: self.client.delete(kind, name, namespace))

    async def patch_fresh(
        self,
        kind: str,
        name: str,
        build: Callable[[Obj], Mapping[str, Any] | None],
        *,
        namespace: str = "",
        status: bool = False,
        cached: Obj | None = None,
    ) -> Obj | None:
        """Merge-patch built by `build(object)` from `cached` (else a fresh read), sent with that
        object's resourceVersion; on 409 read again and build again.

        `build` returns the patch, or None / {} when the object is as wanted. Returns the object
        written (or as read when nothing was written); None when it does not exist.
        """
        current = cached
        for _ in range(self._attempts):
            if current is None:
                current = await self.read(kind, name, namespace)
                if current is None:
                    return None
            patch = build(current)
            if not patch:
                return current
            version = resource_version_of(current)
            body = dict(patch)
            if version:
                body["metadata"] = {**dict(body.get("metadata") or {}), "resourceVersion": version}
            try:
                written = await self._fenced(
                    functools.partial(
                        self.client.patch, kind, name, body, namespace=namespace, status=status
                    )
                )
            except KubeError as error:
                if error.code == 404:
                    return None
                if error.code != 409:
                    raise
                current = None
                continue
            return written
        raise KubeError(409, f"{kind} {name}: still conflicting after {self._attempts} attempts")

    async def replace_fresh(
        self,
        kind: str,
        name: str,
        build: Callable[[Obj], Mapping[str, Any] | None],
        *,
        namespace: str = "",
        cached: Obj | None = None,
    ) -> Obj | None:
        """Update built by `build(object)` (a whole body carrying the object's resourceVersion,
        or None when up to date) from `cached` (else a fresh read); on 409 read and build again."""
        current = cached
        for _ in range(self._attempts):
            if current is None:
                current = await self.read(kind, name, namespace)
                if current is None:
                    return None
            body = build(current)
            if body is None:
                return current
            try:
                return await self._fenced(functools.partial(self.client.replace, kind, body))
            except KubeError as error:
                if error.code == 404:
                    return None
                if error.code != 409:
                    raise
                current = None
        raise KubeError(409, f"{kind} {name}: still conflicting after {self._attempts} attempts")

    async def note(
        self,
        subject: InvolvedObject,
        type_: Literal["Normal", "Warning"],
        reason: str,
        message: str,
    ) -> None:
        """Record an Event (only while leading); never raises."""
        if self._events is None:
            return
        try:
            self._fence()
        except NotLeaderError:
            return
        try:
            await self._events.record(subject, type_, reason, message)
        except Exception:  # a recorder never takes its caller down
            _log.exception("event %s on %s %s not recorded", reason, subject.kind, subject.name)

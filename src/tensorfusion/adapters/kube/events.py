"""Kubernetes Events on our objects, deduplicated the way `kubectl describe` shows them.

The same (object, type, reason, message) within the aggregation window raises the count of
the Event already written instead of adding one, as client-go's event correlator does.
Recording never raises: a failed write is logged and counted, and the caller goes on.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal, Protocol

import orjson
from lightkube import AsyncClient
from lightkube.models.core_v1 import ObjectReference

from tensorfusion.adapters.kube.client import raw_http
from tensorfusion.domain.object_views import name_of
from tensorfusion.domain.timestamps import format_rfc3339

__all__ = ["EventRecorder", "EventSink", "InvolvedObject"]

_log = logging.getLogger(__name__)
_CACHE_SIZE: Final = 4096
CLUSTER_SCOPED_NAMESPACE: Final = "default"
AGGREGATION_WINDOW_S: Final = 600.0
"""An identical event within this window raises the count of the one written."""


@dataclass(frozen=True, slots=True)
class InvolvedObject:
    """The object an Event is about."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = ""

    def reference(self) -> ObjectReference:
        """The `involvedObject` of the Event."""
        return ObjectReference(
            kind=self.kind, name=self.name, namespace=self.namespace or None,
            uid=self.uid or None, apiVersion=self.api_version or None,
        )  # fmt: skip


@dataclass(slots=True)
class _Written:
    name: str
    namespace: str
    count: int
    first: datetime
    last: datetime


@dataclass(slots=True)
class _Turn:
    """The lock of one Event's occurrences, and how many callers hold or wait for it."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


def _utc_now() -> datetime:
    return datetime.now(UTC)


class EventSink(Protocol):
    """Where Events go (an `EventRecorder`; fakes in tests): records one, never raises."""

    async def record(
        self,
        involved: InvolvedObject,
        type_: Literal["Normal", "Warning"],
        reason: str,
        message: str,
    ) -> None: ...


class EventWriteError(Exception):
    """The API server refused an Event write (status and message)."""


class EventRecorder:
    """Writes Events as `component`; a cluster-scoped object's go to namespace `default`, the
    only one the API server accepts for them (as client-go does)."""

    def __init__(
        self, client: AsyncClient, component: str, now: Callable[[], datetime] = _utc_now
    ) -> None:
        self._client = client
        self._component = component
        self._now = now
        self._written: OrderedDict[tuple[str, ...], _Written] = OrderedDict()
        self._turns: dict[tuple[str, ...], _Turn] = {}
        self.failures = 0

    async def record(
        self,
        involved: InvolvedObject,
        type_: Literal["Normal", "Warning"],
        reason: str,
        message: str,
    ) -> None:
        """Record one occurrence; never raises. Occurrences of one Event are recorded one at a
        time (callers may record at once), so that repeats raise its count."""
        key = (involved.kind, involved.namespace, involved.name, involved.uid, type_, reason,
               message)  # fmt: skip
        turn = self._turns.get(key)
        if turn is None:
            turn = self._turns[key] = _Turn()
        turn.users += 1
        try:
            async with turn.lock:
                await self._record(key, involved, type_, reason, message)
        finally:
            turn.users -= 1
            if not turn.users:
                del self._turns[key]

    async def _record(
        self,
        key: tuple[str, ...],
        involved: InvolvedObject,
        type_: Literal["Normal", "Warning"],
        reason: str,
        message: str,
    ) -> None:
        now = self._now()
        known = self._written.get(key)
        try:
            if known is not None and (now - known.last).total_seconds() < AGGREGATION_WINDOW_S:
                await self._bump(known, now)
                self._written.move_to_end(key)
                return
            self._written[key] = await self._create(involved, type_, reason, message, now)
            while len(self._written) > _CACHE_SIZE:
                self._written.popitem(last=False)
        except EventWriteError as error:
            self.failures += 1
            _log.warning("event %s on %s %s not written: %s", reason, involved.kind,
                         involved.name, error)  # fmt: skip
        except Exception:  # a recorder never takes its caller down
            self.failures += 1
            _log.exception("event %s on %s %s not written", reason, involved.kind, involved.name)

    async def _create(
        self, involved: InvolvedObject, type_: str, reason: str, message: str, now: datetime
    ) -> _Written:
        namespace = involved.namespace or CLUSTER_SCOPED_NAMESPACE
        stamp = format_rfc3339(now.timestamp())
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{involved.name}.", "namespace": namespace},
            "involvedObject": involved.reference().to_dict(),  # type: ignore[no-untyped-call]
            "type": type_, "reason": reason, "message": message[:1024], "count": 1,
            "firstTimestamp": stamp, "lastTimestamp": stamp,
            "source": {"component": self._component}, "reportingComponent": self._component,
        }  # fmt: skip
        created = await self._send("POST", f"/api/v1/namespaces/{namespace}/events", event)
        name = name_of(created)
        return _Written(name, namespace, 1, now, now)

    async def _bump(self, written: _Written, now: datetime) -> None:
        written.count += 1
        written.last = now
        await self._send(
            "PATCH", f"/api/v1/namespaces/{written.namespace}/events/{written.name}",
            {"count": written.count, "lastTimestamp": format_rfc3339(now.timestamp())},
            content_type="application/merge-patch+json",
        )  # fmt: skip

    async def _send(
        self, method: str, path: str, body: Mapping[str, Any], *,
        content_type: str = "application/json",
    ) -> dict[str, Any]:  # fmt: skip
        # Plain HTTP with orjson: an Event per pod bound must cost little (lightkube would
        # build and read back whole models).
        response = await raw_http(self._client).request(
            method, path, content=orjson.dumps(body), headers={"Content-Type": content_type}
        )
        if response.status_code >= 300:
            try:
                detail = str(orjson.loads(response.content).get("message") or response.text)
            except orjson.JSONDecodeError:
                detail = response.text
            raise EventWriteError(f"{response.status_code}: {detail}")
        answer: dict[str, Any] = orjson.loads(response.content)
        return answer

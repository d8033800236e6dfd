"""Kubernetes Events on our objects, deduplicated the way `kubectl describe` shows them.

The same (object, type, reason, message) within the aggregation window raises the count of
the Event already written instead of adding one, as client-go's event correlator does.
Recording never raises: a failed write is logged and counted, and the caller goes on.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Literal

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event

__all__ = ["EventRecorder", "InvolvedObject"]

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


def _utc_now() -> datetime:
    return datetime.now(UTC)


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
        self.failures = 0

    async def record(
        self,
        involved: InvolvedObject,
        type_: Literal["Normal", "Warning"],
        reason: str,
        message: str,
    ) -> None:
        """Record one occurrence; never raises."""
        key = (involved.kind, involved.namespace, involved.name, involved.uid, type_, reason,
               message)  # fmt: skip
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
        except ApiError as error:
            self.failures += 1
            _log.warning("event %s on %s %s not written: %s", reason, involved.kind,
                         involved.name, error.status.message)  # fmt: skip
        except Exception:  # a recorder never takes its caller down
            self.failures += 1
            _log.exception("event %s on %s %s not written", reason, involved.kind, involved.name)

    async def _create(
        self, involved: InvolvedObject, type_: str, reason: str, message: str, now: datetime
    ) -> _Written:
        namespace = involved.namespace or CLUSTER_SCOPED_NAMESPACE
        event = Event(
            metadata=ObjectMeta(generateName=f"{involved.name}.", namespace=namespace),
            involvedObject=involved.reference(),
            type=type_,
            reason=reason,
            message=message[:1024],
            count=1,
            firstTimestamp=now,
            lastTimestamp=now,
            source=EventSource(component=self._component),
            reportingComponent=self._component,
        )
        created = await self._client.create(event)
        name = created.metadata.name if created.metadata and created.metadata.name else ""
        return _Written(name, namespace, 1, now, now)

    async def _bump(self, written: _Written, now: datetime) -> None:
        written.count += 1
        written.last = now
        await self._client.patch(
            Event,
            written.name,
            {"count": written.count, "lastTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ")},
            namespace=written.namespace,
        )

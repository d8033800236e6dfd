"""An informer: a local cache of one resource type, kept current by list and watch.

:meth:`Informer.run` lists, then watches from the list's resourceVersion, forever:

- a watch that ends is resumed from the last resourceVersion seen;
- 410 Gone (the version is too old) lists again at once; the relist turns the difference into
  events, so objects deleted while the watch was down arrive as DELETED
  (``final_state_unknown``) and nothing needs a periodic resync;
- any other failure is logged and counted, and the informer waits (0.8 s doubling to 30 s) and
  resumes the watch, or lists again if it has no list yet; a 410 right after a list waits too.

It never raises except on cancellation, and runs under a :class:`~.supervision.Supervisor`
(which restarts it, listing again, should a bug make it raise). Handlers are plain functions
called in the order of the changes, after the cache has changed; they must be quick (push a key
to a :class:`~.work_queue.WorkQueue`). A handler that raises is logged and counted, and the
others still run.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from tensorfusion.domain.backoff import Backoff
from tensorfusion.runtime.informer_source import (
    ApiAnswerError,
    ObjectSource,
    ResourceExpiredError,
    WatchEvent,
    WatchType,
)
from tensorfusion.runtime.informer_store import EventKind, InformerEvent, ObjectKey, ObjectStore
from tensorfusion.runtime.supervision import Sleep

__all__ = [
    "DEFAULT_INFORMER_BACKOFF",
    "EventKind",
    "Handler",
    "Informer",
    "InformerEvent",
    "InformerStats",
    "ObjectCache",
    "ObjectKey",
    "SyncedObjectCache",
]

_log = logging.getLogger(__name__)

Handler = Callable[[InformerEvent], None]


class ObjectCache(Protocol):
    """What a feature reads of an informer: its cached objects (an `Informer` or a fake)."""

    def get(self, name: str, namespace: str = "") -> Mapping[str, Any] | None: ...

    def list(self, namespace: str | None = None) -> Sequence[Mapping[str, Any]]: ...


class SyncedObjectCache(ObjectCache, Protocol):
    """An `ObjectCache` whose first list can be awaited."""

    async def wait_synced(self) -> None: ...


DEFAULT_INFORMER_BACKOFF: Final = Backoff(initial=0.8, maximum=30.0)
"""client-go's reflector backoff: 800 ms, doubling, capped at 30 s."""


@dataclass(slots=True)
class InformerStats:
    """Counters of one informer, read by a metrics adapter."""

    lists: int = 0
    """Successful lists: the first one and every relist."""
    watches: int = 0
    """Watches the informer started (the lightkube source also resumes, on its own, a watch
    the server closed cleanly)."""
    events: int = 0
    """Watch events received, bookmarks included."""
    expired: int = 0
    """410 Gone answers, each followed by a relist."""
    errors: int = 0
    """Failed lists and watches."""
    handler_errors: int = 0
    invalid_objects: int = 0
    """Objects without a name, skipped."""


class Informer:
    """A cache of one resource type with change handlers; start :meth:`run` as a task."""

    def __init__(
        self,
        source: ObjectSource,
        *,
        name: str | None = None,
        backoff: Backoff = DEFAULT_INFORMER_BACKOFF,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.name = name or source.description
        self.stats = InformerStats()
        self._source = source
        self._backoff = backoff
        self._sleep = sleep
        self._store = ObjectStore()
        self._handlers: list[Handler] = []
        self._synced = asyncio.Event()
        self._resource_version: str | None = None
        self._watch_events = 0  # events of the current watch attempt
        self._running = False

    # ------------------------------------------------------------------ reading

    @property
    def has_synced(self) -> bool:
        """True once the first list is in the cache and its events were delivered."""
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    @property
    def resource_version(self) -> str | None:
        """The last resourceVersion seen (of the list, or of a watch event)."""
        return self._resource_version

    def get(self, name: str, namespace: str = "") -> Mapping[str, Any] | None:
        """The cached object, or None; ``namespace`` is empty for cluster-scoped objects."""
        return self._store.get(ObjectKey(namespace, name))

    def list(self, namespace: str | None = None) -> list[Mapping[str, Any]]:
        """Every cached object, or those of one namespace."""
        if namespace is None:
            return self._store.values()
        return [obj for key, obj in self._store.items() if key.namespace == namespace]

    def keys(self) -> builtins.list[ObjectKey]:
        return self._store.keys()

    def __len__(self) -> int:
        return len(self._store)

    # ------------------------------------------------------------------ handlers

    def add_handler(self, handler: Handler) -> None:
        """Call ``handler`` for every change; it first gets ADDED for each cached object."""
        self._handlers.append(handler)
        for key, obj in self._store.items():
            self._call(handler, InformerEvent(EventKind.ADDED, key, obj))

    def remove_handler(self, handler: Handler) -> None:
        self._handlers.remove(handler)

    # ------------------------------------------------------------------ the loop

    async def run(self) -> None:
        """List and watch until cancelled."""
        if self._running:
            raise RuntimeError(f"informer {self.name}: run() is already active")
        self._running = True
        try:
            await self._list_and_watch()
        finally:
            self._running = False

    async def _list_and_watch(self) -> None:
        resume_from: str | None = None
        failures = 0
        while True:
            listed_now = resume_from is None
            self._watch_events = 0
            try:
                if resume_from is None:
                    resume_from = await self._relist()
                await self._watch(resume_from)
            except ResourceExpiredError as error:
                self.stats.expired += 1
                resume_from = None
                if self._watch_events or not listed_now:
                    _log.info("informer %s: %s; listing again", self.name, error)
                    continue
                failures += 1
                problem = f"resourceVersion expired right after a list ({error})"
                _log.warning("informer %s: %s", self.name, problem)
            except Exception as error:
                self.stats.errors += 1
                failures = 1 if self._watch_events else failures + 1
                step = "list" if resume_from is None else "watch"
                if resume_from is not None:
                    resume_from = self._resource_version
                # An error status of the API server is an answer, not a bug: one line.
                answered = isinstance(error, ApiAnswerError)
                _log.warning(
                    "informer %s: %s failed (%d in a row): %s",
                    self.name,
                    step,
                    failures,
                    error if answered else repr(error),
                    exc_info=None if answered else error,
                )
            else:
                resume_from = self._resource_version
                if self._watch_events:
                    failures = 0
                    continue
                failures += 1  # a watch that ended with nothing in it: do not spin
            await self._sleep(self._backoff.delay(failures))

    async def _relist(self) -> str:
        listing = await self._source.list()
        events = self._store.replace(obj for obj in listing.objects if self._valid(obj))
        self._resource_version = listing.resource_version
        self.stats.lists += 1
        self._dispatch(events)
        if not self._synced.is_set():
            _log.info("informer %s: synced, %d objects", self.name, len(self._store))
            self._synced.set()
        return listing.resource_version

    async def _watch(self, resource_version: str) -> None:
        self.stats.watches += 1
        async for event in self._source.watch(resource_version):
            self._watch_events += 1
            self.stats.events += 1
            self._apply(event)
            if event.resource_version is not None:
                self._resource_version = event.resource_version

    def _apply(self, event: WatchEvent) -> None:
        if event.type is WatchType.BOOKMARK or not self._valid(event.obj):
            return
        if event.type is WatchType.DELETED:
            self._dispatch(self._store.delete(event.obj))
        else:
            self._dispatch(self._store.upsert(event.obj))

    # ------------------------------------------------------------------ helpers

    def _valid(self, obj: Mapping[str, Any]) -> bool:
        try:
            ObjectKey.of(obj)
        except ValueError as error:
            self.stats.invalid_objects += 1
            _log.error("informer %s: skipped: %s", self.name, error)
            return False
        return True

    def _dispatch(self, events: builtins.list[InformerEvent]) -> None:
        handlers = list(self._handlers)
        for event in events:
            for handler in handlers:
                self._call(handler, event)

    def _call(self, handler: Handler, event: InformerEvent) -> None:
        try:
            handler(event)
        except Exception:
            self.stats.handler_errors += 1
            _log.exception(
                "informer %s: handler %r raised on %s %s",
                self.name,
                handler,
                event.kind.value,
                event.key,
            )

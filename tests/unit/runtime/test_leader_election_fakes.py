"""Fakes shared by the leader election tests (no tests here): a Lease/ConfigMap API over one store,
seen through clients that fail on demand, and a virtual clock that drives the elector's sleeps.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from lightkube import ApiError, AsyncClient
from lightkube.core.resource import NamespacedResource
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap

from tensorfusion.runtime.leader_election import LeaderElector, LeaseRecord
from tensorfusion.runtime.leader_election_lock import micro_time

NAMESPACE = "tensor-fusion-sys"
LEASE = "85104305.tensor-fusion.ai"
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def api_error(code: int, reason: str = "") -> ApiError:
    return ApiError(
        status={
            "apiVersion": "v1",
            "kind": "Status",
            "status": "Failure",
            "code": code,
            "reason": reason or {404: "NotFound", 409: "Conflict"}.get(code, "InternalError"),
            "message": f"fake API error {code}",
        }
    )


def from_dict(res: type[Any], data: dict[str, Any]) -> Any:
    """A lightkube object of kind ``res`` (the models' from_dict is untyped)."""
    return res.from_dict(data)


class FakeStore:
    """What the fake API server holds: objects as dicts by (kind, namespace, name), and one
    resourceVersion counter."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.version = 0

    def put(self, obj: Any) -> dict[str, Any]:
        """Stores a copy of ``obj`` with a new resourceVersion; returns a copy of what is stored
        (lightkube's models wrap dicts lazily: nothing may be shared with the caller)."""
        data = copy.deepcopy(obj.to_dict())
        self.version += 1
        data["metadata"]["resourceVersion"] = str(self.version)
        meta = data["metadata"]
        self.objects[(data["kind"], meta["namespace"], meta["name"])] = data
        return copy.deepcopy(data)

    def get(self, key: tuple[str, str, str]) -> dict[str, Any] | None:
        data = self.objects.get(key)
        return None if data is None else copy.deepcopy(data)

    def lease(self, name: str = LEASE) -> Lease | None:
        data = self.get(("Lease", NAMESPACE, name))
        return None if data is None else from_dict(Lease, data)

    def record(self) -> LeaseRecord:
        lease = self.lease()
        assert lease is not None, "no Lease in the fake store"
        return LeaseRecord.of(lease)

    def set_record(
        self,
        holder: str,
        *,
        renew_time: datetime,
        duration: int = 5,
        transitions: int = 0,
        acquire_time: datetime | None = None,
    ) -> None:
        """Writes the Lease as another party would (a new resourceVersion)."""
        lease = self.lease() or Lease(metadata=ObjectMeta(name=LEASE, namespace=NAMESPACE))
        lease.spec = LeaseSpec(
            holderIdentity=holder,
            leaseDurationSeconds=duration,
            acquireTime=acquire_time or renew_time,
            renewTime=renew_time,
            leaseTransitions=transitions,
        )
        self.put(lease)

    def touch(self) -> None:
        """A metadata-only change of the Lease (a new resourceVersion, the same record)."""
        lease = self.lease()
        assert lease is not None and lease.metadata is not None
        lease.metadata.labels = {"touched": str(self.version)}
        self.put(lease)


@dataclass
class FakeClient:
    """The subset of lightkube's AsyncClient the elector uses, over a FakeStore. ``fail[verb]``
    is a queue of errors raised by the next calls of that verb; ``fail_always`` errors are raised
    by every call; a verb in ``hang`` never answers; ``before[verb]`` runs once before the next
    call of that verb is applied (another party winning a race)."""

    store: FakeStore
    fail: dict[str, list[BaseException]] = field(default_factory=dict)
    fail_always: BaseException | None = None
    hang: set[str] = field(default_factory=set)
    before: dict[str, Callable[[], None]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)

    def as_client(self) -> AsyncClient:
        return cast(AsyncClient, self)

    async def _enter(self, verb: str) -> None:
        self.calls.append(verb)
        if verb in self.hang:
            await asyncio.Event().wait()
        if self.fail_always is not None:
            raise self.fail_always
        queued = self.fail.get(verb)
        if queued:
            raise queued.pop(0)
        hook = self.before.pop(verb, None)
        if hook is not None:
            hook()

    def _key(self, res: type[NamespacedResource], name: str, namespace: str | None) -> Any:
        return (res.__name__, namespace or "", name)

    async def get(self, res: type[Any], name: str, *, namespace: str | None = None) -> Any:
        await self._enter("get")
        data = self.store.get(self._key(res, name, namespace))
        if data is None:
            raise api_error(404)
        return res.from_dict(data)

    async def create(self, obj: Any) -> Any:
        await self._enter("create")
        meta = obj.metadata
        if self._key(type(obj), meta.name, meta.namespace) in self.store.objects:
            raise api_error(409, "AlreadyExists")
        return type(obj).from_dict(self.store.put(obj))

    async def replace(self, obj: Any) -> Any:
        await self._enter("replace")
        meta = obj.metadata
        current = self.store.get(self._key(type(obj), meta.name, meta.namespace))
        if current is None:
            raise api_error(404)
        if current["metadata"]["resourceVersion"] != meta.resourceVersion:
            raise api_error(409)
        return type(obj).from_dict(self.store.put(obj))

    async def apply(self, obj: Any, *, field_manager: str, force: bool) -> Any:
        await self._enter("apply")
        assert force and field_manager
        meta = obj.metadata
        current = self.store.get(self._key(type(obj), meta.name, meta.namespace))
        merged = type(obj).from_dict(current) if current is not None else obj
        if isinstance(merged, ConfigMap):
            merged.data = {**(merged.data or {}), **(obj.data or {})}
        return type(obj).from_dict(self.store.put(merged))


class FakeClock:
    """Virtual monotonic time. ``sleep`` parks the calling task until :meth:`advance` moves time
    past its wake-up; :meth:`settle` runs the tracked tasks until each is parked or done."""

    def __init__(self) -> None:
        self.now = 1000.0
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []
        self._parked: dict[asyncio.Task[Any], asyncio.Future[None]] = {}
        self._tracked: list[asyncio.Task[Any]] = []

    def __call__(self) -> float:
        return self.now

    def wall(self) -> datetime:
        return EPOCH + timedelta(seconds=self.now)

    def written(self) -> datetime:
        """The wall time now as the elector writes it into the Lease."""
        return micro_time(self.wall())

    async def sleep(self, seconds: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.now + seconds, future))
        task = asyncio.current_task()
        assert task is not None
        self._parked[task] = future
        try:
            await future
        finally:
            if self._parked.get(task) is future:
                del self._parked[task]

    def track(self, task: asyncio.Task[Any]) -> asyncio.Task[Any]:
        self._tracked.append(task)
        return task

    async def settle(self) -> None:
        for _ in range(10_000):
            if all(
                task.done() or (task in self._parked and not self._parked[task].done())
                for task in self._tracked
            ):
                return
            await asyncio.sleep(0)
        raise AssertionError("the tracked tasks never parked: one waits on something else")

    async def advance(self, seconds: float) -> None:
        """Moves time forward by ``seconds``, waking each sleeper at its own time, in order."""
        target = self.now + seconds
        await self.settle()
        for _ in range(100_000):
            due = [s for s in self._sleepers if not s[1].done() and s[0] <= target]
            self._sleepers = [s for s in self._sleepers if not s[1].done()]
            if not due:
                break
            wake = min(when for when, _ in due)
            self.now = max(self.now, wake)
            for when, future in due:
                if when == wake:
                    future.set_result(None)
            await self.settle()
        else:
            raise AssertionError("time does not advance: a task sleeps 0 s again and again")
        self.now = target

    async def advance_until(self, condition: Callable[[], bool], *, within: float) -> float:
        """Advances to each next wake-up until ``condition`` holds; the virtual seconds it took.
        Fails when it does not hold after ``within`` virtual seconds."""
        start = self.now
        await self.settle()
        while not condition():
            pending = [when for when, future in self._sleepers if not future.done()]
            if not pending or min(pending) > start + within:
                raise AssertionError(f"condition not reached within {within} virtual seconds")
            await self.advance(max(0.0, min(pending) - self.now))
        return self.now - start


def elector(
    client: FakeClient,
    clock: FakeClock,
    identity: str,
    *,
    lease_duration: float = 5,
    renew_deadline: float = 3,
    retry_period: float = 1,
    **kwargs: Any,
) -> LeaderElector:
    """An elector on the fake API and the virtual clock, without jitter."""
    return LeaderElector(
        client.as_client(),
        NAMESPACE,
        LEASE,
        identity,
        lease_duration,
        renew_deadline,
        retry_period,
        clock=clock,
        sleep=clock.sleep,
        wall_clock=clock.wall,
        jitter_factor=0.0,
        **kwargs,
    )


@dataclass
class Transitions:
    """Records the callbacks of an elector."""

    events: list[str] = field(default_factory=list)

    def started(self) -> None:
        self.events.append("started")

    def stopped(self) -> None:
        self.events.append("stopped")


def start(
    candidate: LeaderElector, clock: FakeClock, transitions: Transitions
) -> asyncio.Task[Any]:
    return clock.track(candidate.start(transitions.started, transitions.stopped))

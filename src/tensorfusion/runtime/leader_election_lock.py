"""The Lease lock of the leader election: client-go's ``tryAcquireOrRenew`` over one Lease.

client-go's ``LeaderElectionRecord`` maps onto ``Lease.spec``: ``holderIdentity``,
``leaseDurationSeconds``, ``acquireTime``, ``renewTime``, ``leaseTransitions``. Other spec fields
(``preferredHolder``, ``strategy``) are kept as they are when the record is written. Every write
carries the ``resourceVersion`` last read, so the API server refuses it with 409 Conflict when
anyone else wrote in between. The timing (when to try, when leadership is lost) is the elector's,
in ``leader_election``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import Enum

from lightkube import ApiError, AsyncClient
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

__all__ = ["LeaseLock", "LeaseOutcome", "LeaseRecord", "micro_time", "utc_now"]

_log = logging.getLogger(__name__)


def utc_now() -> datetime:
    """The wall clock written into ``acquireTime`` and ``renewTime``."""
    return datetime.now(UTC)


def micro_time(moment: datetime) -> datetime:
    """``moment`` as a value the API server accepts as a ``MicroTime``.

    The API server parses MicroTime with the layout ``2006-01-02T15:04:05.000000Z07:00``, which
    needs the six fraction digits; lightkube writes ``datetime.isoformat()``, which leaves them
    out when the microsecond is 0. Such a moment is moved by one microsecond (the timestamps are
    informational: no election decision compares them with a clock).
    """
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.replace(microsecond=1) if moment.microsecond == 0 else moment


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """What an elector reads from, and writes to, ``Lease.spec``.

    Two records are equal when every field is; the lock compares the record it reads with the one
    it saw last to notice that the holder renewed (client-go compares the raw record).
    """

    holder: str
    lease_duration_seconds: int
    acquire_time: datetime | None
    renew_time: datetime | None
    transitions: int

    @classmethod
    def of(cls, lease: Lease) -> LeaseRecord:
        spec = lease.spec or LeaseSpec()
        return cls(
            holder=spec.holderIdentity or "",
            lease_duration_seconds=spec.leaseDurationSeconds or 0,
            acquire_time=spec.acquireTime,
            renew_time=spec.renewTime,
            transitions=spec.leaseTransitions or 0,
        )

    def applied_to(self, lease: Lease) -> Lease:
        """A copy of ``lease`` carrying this record (metadata, resourceVersion included, kept)."""
        spec = replace(
            lease.spec or LeaseSpec(),
            holderIdentity=self.holder,
            leaseDurationSeconds=self.lease_duration_seconds,
            acquireTime=None if self.acquire_time is None else micro_time(self.acquire_time),
            renewTime=None if self.renew_time is None else micro_time(self.renew_time),
            leaseTransitions=self.transitions,
        )
        return replace(lease, spec=spec)


class LeaseOutcome(Enum):
    """What one :meth:`LeaseLock.try_acquire_or_renew` found."""

    HOLDING = "holding"  # acquired or renewed: this process holds the Lease
    HELD = "held"  # another holder whose lease has not expired as observed here
    TAKEN = "taken"  # this process was the leader and another holder is in the Lease
    LOST_RACE = "lost race"  # 409: someone else wrote first; try again later


class LeaseLock:
    """One Lease, the record last seen in it and the monotonic time it was first seen."""

    def __init__(
        self,
        client: AsyncClient,
        namespace: str,
        name: str,
        identity: str,
        lease_duration_seconds: int,
        *,
        clock: Callable[[], float],
        wall_clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration_seconds = lease_duration_seconds
        self._clock = clock
        self._wall_clock = wall_clock
        self._lease: Lease | None = None  # last object read or written: its resourceVersion
        self.observed: LeaseRecord | None = None
        """The record last seen in the Lease (None before the first read)."""
        self.observed_at = 0.0
        """Monotonic time at which :attr:`observed` was first seen: the candidate's own clock
        (never the remote ``renewTime``) decides when a lease has expired."""
        self.renewed_at = float("-inf")
        """Monotonic time just before the request of the last write that made or kept this
        process the holder was sent (the fence counts from it)."""

    def __str__(self) -> str:
        return f"Lease {self.namespace}/{self.name}"

    def expires_in(self) -> float | None:
        """Seconds until another holder's lease expires as observed here; None if not held."""
        record = self.observed
        if record is None or not record.holder or record.holder == self.identity:
            return None
        return self.observed_at + record.lease_duration_seconds - self._clock()

    async def try_acquire_or_renew(self, leader: bool) -> LeaseOutcome:
        """client-go's ``tryAcquireOrRenew``. ``leader``: this process holds the Lease now. API
        errors other than 404 (create) and 409 (reported) propagate."""
        started = self._clock()
        if leader and self._lease is not None and self.observed is not None:
            # Fast path: the object this process wrote last is still the newest.
            try:
                return await self._write(self._lease, self._desired(self.observed), started)
            except ApiError as error:
                if error.status.code != 409:
                    raise
                _log.info("leader election: %s: renewal conflicted; reading again", self.identity)
        try:
            lease = await self._client.get(Lease, self.name, namespace=self.namespace)
        except ApiError as error:
            if error.status.code != 404:
                raise
            return await self._create(started)
        record = self._observe(lease)
        if record.holder and record.holder != self.identity:
            if leader:
                return LeaseOutcome.TAKEN
            if self.observed_at + record.lease_duration_seconds > self._clock():
                return LeaseOutcome.HELD
            _log.info(
                "leader election: %s: %s held by %s expired as observed here; taking it",
                self.identity,
                self,
                record.holder,
            )
        try:
            return await self._write(lease, self._desired(record), started)
        except ApiError as error:
            if error.status.code != 409:
                raise
            _log.info("leader election: %s: lost the race for %s", self.identity, self)
            return LeaseOutcome.LOST_RACE

    async def release(self) -> bool:
        """Writes the released record (holder empty, duration 1 s) when this process is the
        holder last seen; True when released or not held by this process, False when the
        Lease kept changing. API errors propagate."""
        for _ in range(3):
            lease, record = self._lease, self.observed
            if lease is None or record is None or record.holder != self.identity:
                return True
            now = self._wall_clock()
            released = LeaseRecord("", 1, now, now, record.transitions)
            try:
                self._observe(await self._client.replace(released.applied_to(lease)))
            except ApiError as error:
                if error.status.code != 409:
                    raise
                self._observe(await self._client.get(Lease, self.name, namespace=self.namespace))
                continue
            return True
        return False

    def _desired(self, current: LeaseRecord) -> LeaseRecord:
        """The record this process writes over ``current``: a renewal keeps the acquire time and
        the transition count; an acquisition counts one more transition."""
        now = self._wall_clock()
        own = current.holder == self.identity
        return LeaseRecord(
            holder=self.identity,
            lease_duration_seconds=self.lease_duration_seconds,
            acquire_time=current.acquire_time if own else now,
            renew_time=now,
            transitions=current.transitions if own else current.transitions + 1,
        )

    async def _create(self, started: float) -> LeaseOutcome:
        now = self._wall_clock()
        record = LeaseRecord(self.identity, self.lease_duration_seconds, now, now, 0)
        lease = Lease(metadata=ObjectMeta(name=self.name, namespace=self.namespace))
        try:
            created = await self._client.create(record.applied_to(lease))
        except ApiError as error:
            if error.status.code != 409:
                raise
            _log.info("leader election: %s: %s was created by another", self.identity, self)
            return LeaseOutcome.LOST_RACE
        self._observe(created)
        self.renewed_at = started
        return LeaseOutcome.HOLDING

    async def _write(self, lease: Lease, record: LeaseRecord, started: float) -> LeaseOutcome:
        self._observe(await self._client.replace(record.applied_to(lease)))
        self.renewed_at = started
        return LeaseOutcome.HOLDING

    def _observe(self, lease: Lease) -> LeaseRecord:
        """Keeps ``lease`` for its resourceVersion and notes when its record changed."""
        self._lease = lease
        record = LeaseRecord.of(lease)
        if record != self.observed:
            self.observed = record
            self.observed_at = self._clock()
        return record

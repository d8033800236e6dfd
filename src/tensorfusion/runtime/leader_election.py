"""Lease leader election with client-go's semantics (coordination.k8s.io/v1 Lease).

The rules are client-go's ``leaderelection`` package, so this elector and a Go operator of the
reference implementation never both lead on the same Lease:

- A candidate takes the Lease when it does not exist (create), when ``holderIdentity`` is empty
  (released), when the holder is this identity (a restarted container of the same pod), or when
  the record has not changed for ``leaseDurationSeconds`` **as observed by the candidate's own
  monotonic clock**: the candidate notes the time at which it first saw the current record
  (holder, duration, acquire and renew times, transitions) and never compares the remote
  ``renewTime`` with its own wall clock, so a skewed clock on either side changes nothing.
- Every write carries the ``resourceVersion`` that was read: of two candidates racing for the
  same record one gets 409 Conflict and stays a follower.
- The leader renews every ``retry_period``; a failed renewal (timeout, 5xx, 409) is logged and
  retried every ``retry_period``; when no renewal has succeeded for ``renew_deadline`` seconds
  (client-go counts from the start of the retry round; counting from the last success is
  stricter) or another holder is seen in the Lease, leadership is lost: :attr:`is_leader` turns
  false, :attr:`LeaderElector.leadership_lost` is set, ``on_stopped_leading`` runs and
  :meth:`LeaderElector.run` returns. The elector never campaigns again: the process is expected
  to exit non-zero, as controller-runtime's managers do.
- On a clean shutdown the leader releases the Lease as client-go's ``ReleaseOnCancel`` does:
  ``holderIdentity`` empty, ``leaseDurationSeconds`` 1, so a follower takes over at its next
  poll instead of after the lease duration.

Fencing (:meth:`LeaderElector.fence`), the check before every write only a leader may make. Let
``s`` be the monotonic time just before the request of this process's last successful renewal
was sent, and ``D`` the ``leaseDurationSeconds`` it wrote. The renewal was committed after ``s``,
so any other candidate first saw that record after ``s``; it may take over only after it has seen
the record unchanged for ``D`` seconds, and its update must carry the resourceVersion of exactly
that record (a later one of ours makes it fail with 409). So no other process holds the Lease
before ``s + D``, measured by clocks that run at the same rate (the drift of real clocks over
``D`` seconds is microseconds). ``fence()`` passes while ``now < s + D - margin``; the margin
(default ``lease_duration - renew_deadline``, 5 s with the defaults, so the fence closes when the
renew deadline passes) covers the time between the check and the moment the API server applies
the write that follows it; :meth:`~LeaderElector.fence` returns the seconds left so the caller
can cut the write off by then. What the fence cannot cover: a request the API server applies
later than the client gave up on it, and an administrator who clears the Lease by hand.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from types import TracebackType
from typing import Final, Self

import httpx
from lightkube import ApiError, AsyncClient

from .leader_election_info import read_leader_ip
from .leader_election_lock import LeaseLock, LeaseOutcome, LeaseRecord, utc_now

__all__ = [
    "JITTER_FACTOR",
    "LEASE_DURATION",
    "LEASE_NAME",
    "RENEW_DEADLINE",
    "RETRY_PERIOD",
    "LeaderElector",
    "LeaseRecord",
    "NotLeaderError",
    "read_leader_ip",
]

_log = logging.getLogger(__name__)

LEASE_NAME: Final = "85104305.tensor-fusion.ai"
LEASE_DURATION: Final = 15.0
RENEW_DEADLINE: Final = 10.0
RETRY_PERIOD: Final = 2.0
JITTER_FACTOR: Final = 0.2
"""A candidate polls every ``retry_period * (1 + random() * JITTER_FACTOR)`` seconds. client-go
uses 1.2; 0.2 keeps the take-over after a ``kill -9`` of the leader under 20 s with the defaults
(at most ``retry_period * 1.2`` to see the last renewal, then ``lease_duration``: 17.4 s)."""

Callback = Callable[[], None]
"""``on_started_leading`` / ``on_stopped_leading``: called in the elector's task at the moment of
the transition, so they must not block: start tasks, set flags, stop timers."""


class NotLeaderError(Exception):
    """This process may not act as the leader (``fence()``, ``wait_until_leader()``)."""


class LeaderElector:
    """Campaigns for, holds and releases one Lease. Run it with :meth:`run` (or :meth:`start`, or
    ``async with``); read :attr:`is_leader`, wait on :meth:`wait_until_leader` and
    :attr:`leadership_lost`, and call :meth:`fence` before every leader-only write."""

    def __init__(
        self,
        client: AsyncClient,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = LEASE_DURATION,
        renew_deadline: float = RENEW_DEADLINE,
        retry_period: float = RETRY_PERIOD,
        *,
        fence_margin: float | None = None,
        release_on_cancel: bool = True,
        jitter_factor: float = JITTER_FACTOR,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        wall_clock: Callable[[], datetime] = utc_now,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if not (namespace and name and identity):
            raise ValueError(
                "leader election needs a namespace, a Lease name and an identity (POD_NAME); "
                f"got namespace={namespace!r} name={name!r} identity={identity!r}"
            )
        if not (lease_duration >= 1 and float(lease_duration).is_integer()):
            raise ValueError(
                f"lease duration must be a whole number of seconds >= 1 (the Lease stores "
                f"leaseDurationSeconds), got {lease_duration}"
            )
        if not 0 < renew_deadline < lease_duration:
            raise ValueError(
                f"renew deadline ({renew_deadline} s) must be > 0 and < the lease duration "
                f"({lease_duration} s)"
            )
        if not 0 < retry_period < renew_deadline:
            raise ValueError(
                f"retry period ({retry_period} s) must be > 0 and < the renew deadline "
                f"({renew_deadline} s)"
            )
        margin = lease_duration - renew_deadline if fence_margin is None else fence_margin
        if not 0 < margin < lease_duration:
            raise ValueError(
                f"fence margin ({margin} s) must be > 0 and < the lease duration "
                f"({lease_duration} s)"
            )
        if jitter_factor < 0:
            raise ValueError(f"jitter factor must be >= 0, got {jitter_factor}")
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration_seconds = int(lease_duration)
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.fence_margin = margin
        self.release_on_cancel = release_on_cancel
        self._jitter_factor = jitter_factor
        self._clock = clock
        self._sleep = sleep
        self._rand = rand

        self.failed_attempts = 0
        """Attempts to read or write the Lease that failed (API error, timeout, lost race); for
        the controller's metrics."""
        self.leadership_lost = asyncio.Event()
        """Set when leadership held by this process was lost (not when it was released)."""
        self._became_leader = asyncio.Event()
        self._finished = asyncio.Event()
        self._leader = False
        self._started = False
        self._stopping = False
        self._run_task: asyncio.Task[None] | None = None
        self._lock = LeaseLock(
            client,
            namespace,
            name,
            identity,
            self.lease_duration_seconds,
            clock=clock,
            wall_clock=wall_clock,
        )
        self._on_started: Callback | None = None
        self._on_stopped: Callback | None = None

    # ------------------------------------------------------------------ state

    @property
    def is_leader(self) -> bool:
        """True from the successful acquisition until loss, release or cancellation."""
        return self._leader

    @property
    def holder(self) -> str | None:
        """The holder identity in the Lease as last seen by this elector (None: nobody)."""
        observed = self._lock.observed
        return (observed.holder or None) if observed is not None else None

    def fence(self) -> float:
        """Raises NotLeaderError unless no other process can hold the Lease yet; otherwise returns
        the seconds left before that could change (bound the write that follows by it)."""
        if not self._leader:
            raise NotLeaderError(f"{self.identity} does not hold {self._lock}")
        left = (
            self._lock.renewed_at + self.lease_duration_seconds - self.fence_margin - self._clock()
        )
        if left <= 0:
            raise NotLeaderError(
                f"{self.identity}: the last renewal of {self._lock} is too old to write as "
                f"the leader (another candidate may take over)"
            )
        return left

    async def wait_until_leader(self) -> None:
        """Returns once this process leads; raises NotLeaderError if the election ends first."""
        while not self._leader:
            if self._finished.is_set() or self.leadership_lost.is_set():
                raise NotLeaderError(f"{self.identity}: the election for {self._lock} ended")
            waiters = {
                asyncio.ensure_future(self._became_leader.wait()),
                asyncio.ensure_future(self._finished.wait()),
            }
            try:
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()

    # ------------------------------------------------------------------ lifecycle

    def start(
        self, on_started_leading: Callback | None = None, on_stopped_leading: Callback | None = None
    ) -> asyncio.Task[None]:
        """:meth:`run` in a new task."""
        self._run_task = asyncio.create_task(
            self.run(on_started_leading, on_stopped_leading), name=f"leader-election {self.name}"
        )
        return self._run_task

    async def run(
        self, on_started_leading: Callback | None = None, on_stopped_leading: Callback | None = None
    ) -> None:
        """Campaigns until this process leads, then renews until leadership ends; returns then.

        ``on_started_leading`` runs once leadership is acquired, ``on_stopped_leading`` once it
        ends (lost, released or cancelled); neither runs if the process never led. Cancelling the
        task releases the Lease first when ``release_on_cancel`` (the default).
        """
        if self._started:
            raise RuntimeError("a LeaderElector runs once; make a new one")
        self._started = True
        self._run_task = asyncio.current_task()
        self._on_started, self._on_stopped = on_started_leading, on_stopped_leading
        _log.info("leader election: %s is a candidate for %s", self.identity, self._lock)
        try:
            if await self._campaign():
                await self._hold()
        except asyncio.CancelledError:
            if self.release_on_cancel:
                await self._release_lease()
            self._end_leadership(lost=False, why="the election was cancelled")
            raise
        except BaseException:
            _log.exception("leader election: %s: the elector failed", self.identity)
            self._end_leadership(lost=True, why="the elector failed")
            raise
        finally:
            self._finished.set()

    async def release(self) -> bool:
        """Stops the election and, if this process holds the Lease, releases it (holder empty,
        duration 1 s). Leader-only work must stop first: fence() fails from the first moment.
        Returns False when the release could not be written (the Lease then expires)."""
        self._stopping = True
        task = self._run_task
        if task is not None and task is not asyncio.current_task() and not task.done():
            task.cancel()
            await asyncio.wait({task})
        self._finished.set()
        return await self._release_lease()

    async def stop(self) -> None:
        """Ends the election: releases the Lease when ``release_on_cancel``, else only stops."""
        if self.release_on_cancel:
            await self.release()
            return
        self._stopping = True
        task = self._run_task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task})
        self._end_leadership(lost=False, why="the election was stopped")
        self._finished.set()

    async def __aenter__(self) -> Self:
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()

    # ------------------------------------------------------------------ loops

    async def _campaign(self) -> bool:
        while not self._stopping:
            if await self._attempt(self.renew_deadline) is LeaseOutcome.HOLDING:
                self._begin_leadership()
                return True
            await self._sleep(self._next_poll())
        return False

    async def _hold(self) -> None:
        while True:
            await self._sleep(self.retry_period)
            while True:
                if self._stopping or not self._leader:
                    return
                left = self._lock.renewed_at + self.renew_deadline - self._clock()
                if left <= 0:
                    self._end_leadership(
                        lost=True, why=f"no renewal succeeded within {self.renew_deadline:g}s"
                    )
                    return
                outcome = await self._attempt(left)
                if outcome is LeaseOutcome.HOLDING:
                    break
                if outcome is LeaseOutcome.TAKEN:
                    self._end_leadership(lost=True, why=f"{self.holder} holds it now")
                    return
                left = self._lock.renewed_at + self.renew_deadline - self._clock()
                await self._sleep(max(0.0, min(self.retry_period, left)))

    def _next_poll(self) -> float:
        """The candidate's next poll: the retry period with jitter, or the expiry of the lease
        as observed here when that comes sooner (never sooner than a hundredth of the retry
        period, so a clock that stands still cannot make it spin)."""
        delay = self.retry_period * (1 + self._rand() * self._jitter_factor)
        expires_in = self._lock.expires_in()
        if expires_in is not None:
            delay = min(delay, max(self.retry_period / 100, expires_in))
        return delay

    async def _attempt(self, timeout: float) -> LeaseOutcome | None:
        """One try to acquire or renew; every error is logged, counted and reported as None."""
        try:
            async with asyncio.timeout(timeout):
                outcome = await self._lock.try_acquire_or_renew(self._leader)
        except TimeoutError:
            _log.warning(
                "leader election: %s: %s request timed out after %.1fs",
                self.identity,
                self._lock,
                timeout,
            )
        except ApiError as error:
            _log.warning(
                "leader election: %s: %s: API error %s: %s",
                self.identity,
                self._lock,
                error.status.code,
                error.status.message,
            )
        except httpx.HTTPError as error:
            _log.warning("leader election: %s: %s: %r", self.identity, self._lock, error)
        except Exception:
            _log.exception("leader election: %s: %s: unexpected error", self.identity, self._lock)
        else:
            if outcome is LeaseOutcome.LOST_RACE:
                self.failed_attempts += 1
            return outcome
        self.failed_attempts += 1
        return None

    # ------------------------------------------------------------------ transitions

    def _begin_leadership(self) -> None:
        self._leader = True
        self._became_leader.set()
        _log.info("leader election: %s acquired %s", self.identity, self._lock)
        self._call(self._on_started, "on_started_leading")

    def _end_leadership(self, *, lost: bool, why: str) -> None:
        if not self._leader:
            return
        self._leader = False
        if lost:
            self.leadership_lost.set()
            _log.error("leader election: %s lost %s: %s", self.identity, self._lock, why)
        else:
            _log.info("leader election: %s stopped leading %s: %s", self.identity, self._lock, why)
        self._call(self._on_stopped, "on_stopped_leading")

    def _call(self, callback: Callback | None, what: str) -> None:
        if callback is None:
            return
        try:
            callback()
        except Exception:
            _log.exception("leader election: %s: %s raised", self.identity, what)

    async def _release_lease(self) -> bool:
        self._end_leadership(lost=False, why="released")
        try:
            async with asyncio.timeout(self.renew_deadline):
                released = await self._lock.release()
        except Exception as error:
            _log.warning(
                "leader election: %s: could not release %s (%r); it expires after %ds",
                self.identity,
                self._lock,
                error,
                self.lease_duration_seconds,
            )
            return False
        if released:
            _log.info("leader election: %s released %s", self.identity, self._lock)
        else:
            _log.warning("leader election: %s: could not release %s", self.identity, self._lock)
        return released

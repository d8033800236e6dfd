"""CPU-heavy request work run off the event loop with a bound on work in flight.

The event loop also renews the leader's Lease, so a handler that parses a large body or runs a
simulation hands that work to `BoundedOffload.run`: a small thread pool of its own, and a
request beyond `limit` in flight is answered 429 with `Retry-After` instead of queueing. With
the GIL a busy worker thread still takes CPU from the loop, so `shed` can refuse work while the
loop is behind (429 too): the loop catches up before more is admitted. A call
counts as in flight until its thread returns, even when the request waiting for it is cancelled
(the client went away), so the threads never fall behind the bound.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from tensorfusion.api_server.responses import ApiError

__all__ = ["BoundedOffload"]

T = TypeVar("T")


class BoundedOffload:
    """Runs functions in `limit` worker threads; refuses a call when `limit` are in flight."""

    def __init__(
        self,
        *,
        name: str,
        limit: int,
        retry_after_s: int = 1,
        shed: Callable[[], str | None] | None = None,
    ) -> None:
        """`shed()`: why no work is admitted now (e.g. the event loop is behind), or None."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self.name = name
        self.limit = limit
        self.retry_after_s = retry_after_s
        self.shed = shed
        self._in_flight = 0
        self._pool = ThreadPoolExecutor(max_workers=limit, thread_name_prefix=f"offload-{name}")

    @property
    def in_flight(self) -> int:
        """Calls whose thread has not returned yet."""
        return self._in_flight

    def refuse_if_full(self) -> None:
        """ApiError 429 (`Retry-After`) when `limit` calls are in flight or `shed` says why not
        now: lets a handler refuse before it does work on the loop for a call `run` refuses."""
        reason = (
            f"{self.limit} requests already in progress (the limit)"
            if self._in_flight >= self.limit
            else self.shed() if self.shed is not None else None
        )  # fmt: skip
        if reason is not None:
            raise ApiError(
                429, "TooManyRequests", f"{self.name}: {reason}; retry",
                {"Retry-After": str(self.retry_after_s)},
            )  # fmt: skip

    async def run(self, fn: Callable[[], T]) -> T:
        """`fn()` in a worker thread; ApiError 429 (`Retry-After`) when `limit` calls run."""
        self.refuse_if_full()
        loop = asyncio.get_running_loop()
        self._in_flight += 1
        try:
            future = self._pool.submit(fn)
        except BaseException:
            self._in_flight -= 1
            raise

        def finished(_: Future[Any]) -> None:
            # Runs in the worker thread (or here, for a call cancelled before it started).
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to count
                loop.call_soon_threadsafe(self._release)

        future.add_done_callback(finished)
        return await asyncio.wrap_future(future, loop=loop)

    def _release(self) -> None:
        self._in_flight -= 1

    def close(self) -> None:
        """Stop the worker threads once the calls in flight return."""
        self._pool.shutdown(wait=False, cancel_futures=True)

"""CPU-heavy request work run off the event loop with a bound on work in flight.

The event loop also renews the leader's Lease, so a handler that parses a large body or runs a
simulation hands that work to `BoundedOffload.run`: a small thread pool of its own, and a
request beyond `limit` in flight is answered 429 with `Retry-After` instead of queueing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from tensorfusion.api_server.responses import ApiError

__all__ = ["BoundedOffload"]

T = TypeVar("T")


class BoundedOffload:
    """Runs functions in `limit` worker threads; refuses a call when `limit` are in flight."""

    def __init__(self, *, name: str, limit: int, retry_after_s: int = 1) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self.name = name
        self.limit = limit
        self.retry_after_s = retry_after_s
        self._in_flight = 0
        self._pool = ThreadPoolExecutor(max_workers=limit, thread_name_prefix=f"offload-{name}")

    @property
    def in_flight(self) -> int:
        """Calls running now."""
        return self._in_flight

    async def run(self, fn: Callable[[], T]) -> T:
        """`fn()` in a worker thread; ApiError 429 (`Retry-After`) when `limit` calls run."""
        if self._in_flight >= self.limit:
            raise ApiError(
                429, "TooManyRequests",
                f"{self.name}: {self.limit} requests already in progress (the limit); retry",
                {"Retry-After": str(self.retry_after_s)},
            )  # fmt: skip
        self._in_flight += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn)
        finally:
            self._in_flight -= 1

    def close(self) -> None:
        """Stop the worker threads once the calls in flight return."""
        self._pool.shutdown(wait=False, cancel_futures=True)

"""A write bounded by the leadership fence (runtime.md, *Fencing*).

`fenced_call(fence, call)` is the one way a leader-only write is sent: the fence is read just
before the request, a closed fence (`NotLeaderError`, or no time left) sends nothing, and an open
one gives the request the seconds it has left as its timeout and cancels it then, so no write of
this replica is still in flight once another replica may lead.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import TypeVar

from .leader_election import NotLeaderError

__all__ = ["Fence", "fenced_call"]

T = TypeVar("T")

Fence = Callable[[], float]
"""`LeaderElector.fence`: raises `NotLeaderError`, or returns the seconds leadership lasts."""


async def fenced_call(fence: Fence, call: Callable[[float], Awaitable[T]]) -> T:
    """`call(seconds_left)` while the fence is open; the call should use `seconds_left` as its
    request timeout (inf: no fence bound), and is cancelled then all the same (TimeoutError).

    Raises NotLeaderError without calling when the fence is closed or has no time left.
    """
    left = fence()
    if not left > 0:
        raise NotLeaderError(f"the leadership fence has no time left ({left:g} s)")
    async with asyncio.timeout(left if math.isfinite(left) else None):
        return await call(left)

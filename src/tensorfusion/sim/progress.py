"""Progress of a long simulation as plain lines, for output that is not a terminal."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["PROGRESS_EVERY_SECONDS", "ProgressLines", "progress_line"]

PROGRESS_EVERY_SECONDS = 10.0


def progress_line(done: int, total: int, seconds: float) -> str:
    """`simulate: <done>/<total> pods arrived (<percent>%), <rate> pods/s`."""
    percent = 100 * done / total if total else 100.0
    rate = done / seconds if seconds > 0 else 0.0
    return f"simulate: {done:,}/{total:,} pods arrived ({percent:.0f}%), {rate:,.0f} pods/s"


@dataclass(slots=True)
class ProgressLines:
    """A `progress(done, total)` callback that writes one line per `every` seconds of wall
    time (the clock and the writer are injectable)."""

    write: Callable[[str], object]
    clock: Callable[[], float] = time.monotonic
    every: float = PROGRESS_EVERY_SECONDS
    _started: float | None = field(default=None, init=False)
    _next: float = field(default=0.0, init=False)

    def __call__(self, done: int, total: int) -> None:
        """Note progress; write a line when `every` seconds passed since the last one."""
        now = self.clock()
        if self._started is None:
            self._started, self._next = now, now + self.every
            return
        if now >= self._next:
            self.write(progress_line(done, total, now - self._started) + "\n")
            self._next = now + self.every

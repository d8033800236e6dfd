"""A child process that lives and dies with us: own process group, parent-death signal,
output re-logged line by line, health polled, restarted with backoff, stopped by SIGTERM then
SIGKILL (after its own `quit` request, when it has one).

`ChildProcess.run()` keeps the child running until cancelled: an exit, or a health check that
has failed for `unhealthy_after_s`, restarts it after the backoff (1 s doubling to 30 s, reset
once a child stayed healthy for a minute). On cancellation the whole process group gets SIGTERM
and, `kill_after_s` later, SIGKILL. A `kill -9` of this process takes the child along
(`PR_SET_PDEATHSIG`, Linux).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from tensorfusion.domain.backoff import Backoff

__all__ = ["ChildProcess", "ChildStats", "klog_level"]

_log = logging.getLogger(__name__)
_PR_SET_PDEATHSIG: Final = 1
HEALTHY_RESET_S: Final = 60.0
"""A child healthy this long starts the backoff over."""


def klog_level(line: str) -> int:
    """The logging level of a klog line (`I1202 ...` info, `W` warning, `E`/`F` error)."""
    head = line[:1]
    if head == "W":
        return logging.WARNING
    if head in ("E", "F"):
        return logging.ERROR
    return logging.INFO


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the parent dies."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


@dataclass(slots=True)
class ChildStats:
    """What happened to the child, for logs and metrics."""

    starts: int = 0
    exits: int = 0
    unhealthy_restarts: int = 0
    last_exit_code: int | None = None
    healthy: bool = False


@dataclass(slots=True)
class ChildProcess:
    """One supervised child; `health` answers whether it serves (None: no health check)."""

    name: str
    argv: Sequence[str]
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger]
    env: Mapping[str, str] | None = None
    health: Callable[[], Awaitable[bool]] | None = None
    health_interval_s: float = 5.0
    unhealthy_after_s: float = 30.0
    kill_after_s: float = 2.0
    backoff: Backoff = field(default_factory=Backoff)
    level_of: Callable[[str], int] = klog_level
    quit: Callable[[], Awaitable[None]] | None = None
    """Asks the child to exit on its own; `stop` tries it first (for `kill_after_s`)."""
    stats: ChildStats = field(default_factory=ChildStats)
    process: asyncio.subprocess.Process | None = None

    async def run(self) -> None:
        """Keep the child running until cancelled; then stop it."""
        failures = 0
        try:
            while True:
                started = time.monotonic()
                reason = await self._run_once()
                if time.monotonic() - started >= HEALTHY_RESET_S:
                    failures = 0
                failures += 1
                delay = self.backoff.delay(failures)
                _log.warning("%s %s; restarting in %.0f s", self.name, reason, delay)
                await asyncio.sleep(delay)
        finally:
            await self.stop()

    async def _run_once(self) -> str:
        """Start the child and wait until it exits or stays unhealthy; why it ended."""
        process = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=None if self.env is None else dict(self.env),
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        self.process = process
        self.stats.starts += 1
        _log.info("%s started (pid %d)", self.name, process.pid)
        relay = asyncio.create_task(self._relay(process), name=f"{self.name} output")
        watch = asyncio.create_task(self._watch_health(), name=f"{self.name} health")
        exited = asyncio.create_task(process.wait(), name=f"{self.name} exit")
        try:
            done, _ = await asyncio.wait({exited, watch}, return_when=asyncio.FIRST_COMPLETED)
            if exited in done:
                self.stats.exits += 1
                self.stats.last_exit_code = process.returncode
                return f"exited with code {process.returncode}"
            self.stats.unhealthy_restarts += 1
            await self.stop()
            return f"failed its health check for {self.unhealthy_after_s:.0f} s"
        finally:
            self.stats.healthy = False
            for task in (watch, exited):
                task.cancel()
            if process.returncode is None:  # cancelled: stop it before draining its output
                await self.stop()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(relay, 5)

    async def _relay(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        while line := await process.stdout.readline():
            text = line.decode(errors="replace").rstrip()
            if text:
                self.logger.log(self.level_of(text), "%s", text)

    async def _watch_health(self) -> None:
        """Returns once the child has been unhealthy for `unhealthy_after_s`."""
        if self.health is None:
            await asyncio.Event().wait()
            return
        unhealthy_since: float | None = time.monotonic()
        while True:
            await asyncio.sleep(self.health_interval_s)
            try:
                ok = await self.health()
            except Exception:
                ok = False
            now = time.monotonic()
            if ok:
                if not self.stats.healthy:
                    _log.info("%s is healthy", self.name)
                self.stats.healthy, unhealthy_since = True, None
                continue
            self.stats.healthy = False
            unhealthy_since = unhealthy_since or now
            if now - unhealthy_since >= self.unhealthy_after_s:
                return

    async def stop(self) -> None:
        """SIGTERM to the child's process group, SIGKILL `kill_after_s` later; idempotent."""
        process = self.process
        if process is None or process.returncode is not None:
            return
        if self.quit is not None:
            try:
                await asyncio.wait_for(self.quit(), self.kill_after_s)
                await asyncio.wait_for(asyncio.shield(process.wait()), self.kill_after_s)
            except Exception as error:
                _log.warning("%s did not quit (%s): SIGTERM", self.name, error or "timeout")
            else:
                _log.info("%s quit (code %s)", self.name, process.returncode)
                return
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            await asyncio.wait_for(asyncio.shield(process.wait()), self.kill_after_s)
        except TimeoutError:
            _log.warning("%s did not stop within %.0f s: SIGKILL", self.name, self.kill_after_s)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
        _log.info("%s stopped (code %s)", self.name, process.returncode)

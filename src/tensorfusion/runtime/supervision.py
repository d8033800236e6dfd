"""Supervised background tasks: none dies silently.

Every task runs under a :class:`Supervisor` by name. An exception is logged with the task's name
and counted; the task is then restarted after an exponential backoff (``restart=True``, the
default), left stopped (``restart=False``), or, for a ``critical`` task, ends the supervisor:
every other task is cancelled and the owner is told (``on_fatal``,
:meth:`Supervisor.wait_fatal`). A task that returns is logged and counted too, and restarted
after the same backoff unless ``restart=False`` (a return is never fatal). Counts are plain
attributes of :class:`TaskStats`, read by a metrics adapter.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from types import MappingProxyType, TracebackType
from typing import Any, Final

from tensorfusion.domain.backoff import Backoff

__all__ = [
    "CoroutineFactory",
    "Sleep",
    "Supervisor",
    "SupervisorStoppedError",
    "TaskFailure",
    "TaskStats",
]

_log = logging.getLogger(__name__)

CoroutineFactory = Callable[[], Coroutine[Any, Any, object]]
"""Makes a fresh coroutine for each run of a task (a coroutine can only be awaited once)."""

Sleep = Callable[[float], Awaitable[None]]
"""``asyncio.sleep`` or a fake of it."""


@dataclass(slots=True)
class TaskStats:
    """What happened to one named task; kept after the task stops, reused if it is restarted."""

    name: str
    critical: bool = False
    starts: int = 0
    """Runs begun (the first run and every restart)."""
    failures: int = 0
    """Runs that raised."""
    returns: int = 0
    """Runs that returned normally."""
    restarts: int = 0
    """Runs begun again after a failure or a return."""
    running: bool = False
    last_error: str | None = None
    """``repr`` of the last exception, None if the task never failed."""


@dataclass(frozen=True, slots=True)
class TaskFailure:
    """The failure of a critical task, which stopped the supervisor."""

    name: str
    error: Exception

    def __str__(self) -> str:
        return f"critical task {self.name!r} failed: {self.error!r}"


class SupervisorStoppedError(RuntimeError):
    """Raised by :meth:`Supervisor.start` once the supervisor is stopping or has failed."""


@dataclass(frozen=True, slots=True)
class _TaskSpec:
    name: str
    factory: CoroutineFactory
    restart: bool
    critical: bool
    backoff: Backoff


DEFAULT_BACKOFF: Final = Backoff(initial=1.0, maximum=30.0)


class Supervisor:
    """Runs named background tasks; logs, counts and restarts them; stops them all at once.

    ``sleep`` and ``clock`` are injectable for tests. A run that lasted at least
    ``reset_after`` seconds resets the task's backoff to its initial delay.
    """

    def __init__(
        self,
        *,
        on_fatal: Callable[[TaskFailure], None] | None = None,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        reset_after: float = 60.0,
        stop_timeout: float = 10.0,
    ) -> None:
        self._on_fatal = on_fatal
        self._sleep = sleep
        self._clock = clock
        self._reset_after = reset_after
        self._stop_timeout = stop_timeout
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._stats: dict[str, TaskStats] = {}
        self._stopping = False
        self._fatal: TaskFailure | None = None
        self._fatal_event = asyncio.Event()

    # ------------------------------------------------------------------ public

    @property
    def stats(self) -> Mapping[str, TaskStats]:
        """Counts per task name, for every task ever started."""
        return MappingProxyType(self._stats)

    @property
    def running(self) -> frozenset[str]:
        """Names of the tasks that are active (running or waiting to restart)."""
        return frozenset(name for name, task in self._tasks.items() if not task.done())

    @property
    def fatal(self) -> TaskFailure | None:
        """The critical failure that stopped the supervisor, if any."""
        return self._fatal

    def start(
        self,
        name: str,
        factory: CoroutineFactory,
        *,
        restart: bool = True,
        critical: bool = False,
        backoff: Backoff = DEFAULT_BACKOFF,
    ) -> TaskStats:
        """Start ``factory()`` as the task ``name``; raises ValueError if ``name`` is active."""
        if self._stopping:
            reason = f" after {self._fatal}" if self._fatal else ""
            raise SupervisorStoppedError(f"cannot start task {name!r}: supervisor stopped{reason}")
        if name in self.running:
            raise ValueError(f"a task named {name!r} is already running")
        stats = self._stats.setdefault(name, TaskStats(name))
        stats.critical = critical
        stats.running = True
        spec = _TaskSpec(name, factory, restart, critical, backoff)
        task = asyncio.create_task(self._supervise(spec, stats), name=name)
        self._tasks[name] = task
        task.add_done_callback(self._forget)
        return stats

    async def cancel(self, name: str) -> None:
        """Cancel one task and wait for it to end; nothing happens if it is not active."""
        task = self._tasks.get(name)
        if task is None or task.done():
            return
        task.cancel()
        await asyncio.wait({task}, timeout=self._stop_timeout)
        if not task.done():
            _log.error(
                "task %r did not end within %.1f s of being cancelled", name, self._stop_timeout
            )

    async def stop(self) -> None:
        """Cancel every task and wait for them to end; later ``start`` calls raise."""
        self._stopping = True
        tasks = [task for task in self._tasks.values() if not task.done()]
        for task in tasks:
            task.cancel()
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=self._stop_timeout)
        for task in pending:
            _log.error(
                "task %r did not end within %.1f s of being cancelled",
                task.get_name(),
                self._stop_timeout,
            )

    async def wait_fatal(self) -> TaskFailure:
        """Wait until a critical task fails, and return that failure."""
        await self._fatal_event.wait()
        assert self._fatal is not None
        return self._fatal

    async def __aenter__(self) -> Supervisor:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()

    # ------------------------------------------------------------------ internals

    async def _supervise(self, spec: _TaskSpec, stats: TaskStats) -> None:
        streak = 0  # consecutive short runs, for the backoff
        try:
            while True:
                stats.starts += 1
                began = self._clock()
                try:
                    await spec.factory()
                except Exception as error:
                    stats.failures += 1
                    stats.last_error = repr(error)
                    if spec.critical:
                        _log.critical(
                            "critical task %r failed; stopping the supervisor",
                            spec.name,
                            exc_info=error,
                        )
                        self._fail(TaskFailure(spec.name, error))
                        return
                    outcome = f"failed ({error!r})"
                    logged = _log.error
                    exc_info: Exception | None = error
                else:
                    stats.returns += 1
                    outcome = "returned"
                    logged = _log.warning if spec.restart else _log.info
                    exc_info = None
                if not spec.restart:
                    logged("task %r %s; not restarted", spec.name, outcome, exc_info=exc_info)
                    return
                streak = 1 if self._clock() - began >= self._reset_after else streak + 1
                delay = spec.backoff.delay(streak)
                logged(
                    "task %r %s; restarting in %.3g s", spec.name, outcome, delay, exc_info=exc_info
                )
                await self._sleep(delay)
                stats.restarts += 1
        finally:
            stats.running = False

    def _fail(self, failure: TaskFailure) -> None:
        self._fatal = failure
        self._stopping = True
        self._fatal_event.set()
        current = asyncio.current_task()
        for task in self._tasks.values():
            if task is not current:
                task.cancel()
        if self._on_fatal is not None:
            try:
                self._on_fatal(failure)
            except Exception:
                _log.exception("on_fatal hook raised while reporting %s", failure)

    def _forget(self, task: asyncio.Task[None]) -> None:
        name = task.get_name()
        if self._tasks.get(name) is task:
            del self._tasks[name]
            self._stats[name].running = False  # also when cancelled before its first run
        if not task.cancelled() and task.exception() is not None:
            _log.error(
                "supervision of task %r ended with an error",
                task.get_name(),
                exc_info=task.exception(),
            )

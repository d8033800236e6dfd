"""The end of a background task that should run until cancelled: logged, never silent."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

__all__ = ["log_task_end", "task_end_logger"]


def log_task_end(
    task: asyncio.Task[Any], log: logging.Logger, what: str | None = None
) -> BaseException | None:
    """Log on `log` a task that ended other than by cancellation, as `what` (default: the
    task's name); return its exception, if any."""
    if task.cancelled():
        return None
    error = task.exception()
    if error is not None:
        log.error("%s stopped by an exception", what or task.get_name(), exc_info=error)
    else:
        log.error("%s stopped unexpectedly", what or task.get_name())
    return error


def task_end_logger(log: logging.Logger) -> Callable[[asyncio.Task[Any]], object]:
    """A done-callback that logs the task's end on `log` (see `log_task_end`)."""
    return functools.partial(log_task_end, log=log)

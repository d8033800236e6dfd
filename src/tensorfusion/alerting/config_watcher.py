"""Hot reload of `config.yaml` from a mounted directory (alerting.md §2.2).

The directory is polled by content hash (modification times are not trusted: kubelet swaps a
symlink). A changed file is parsed whole, off the event loop and under the document limits; an
invalid one (whatever the parser raised) keeps the previous configuration and is reported once,
with its reason, through the event sink, the status error and the `tf_dynamic_config_valid` gauge.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

from tensorfusion.alerting.event_sink import WarningSink
from tensorfusion.alerting.self_metrics import EvaluatorMetrics
from tensorfusion.domain.alerting.dynamic_config import (
    DynamicConfig,
    DynamicConfigError,
    parse_dynamic_config,
)
from tensorfusion.domain.timestamps import format_rfc3339_ms

__all__ = ["CONFIG_FILE_NAME", "ConfigWatcher"]

_log = logging.getLogger(__name__)
CONFIG_FILE_NAME: Final = "config.yaml"


class ConfigWatcher:
    """Polls `<dir>/config.yaml` and calls `on_change` with each new valid configuration."""

    def __init__(
        self,
        config_dir: str | Path,
        on_change: Callable[[DynamicConfig], Awaitable[None]],
        *,
        events: WarningSink,
        metrics: EvaluatorMetrics | None = None,
        poll_interval_s: float = 5.0,
        file_name: str = CONFIG_FILE_NAME,
    ) -> None:
        self.path = Path(config_dir) / file_name
        self._on_change = on_change
        self._events = events
        self._metrics = metrics or EvaluatorMetrics()
        self._poll_interval_s = poll_interval_s
        self._digest: str | None = None
        self._active = DynamicConfig()
        self._active_digest = ""
        self._loaded_ms: int | None = None
        self._error = ""
        self._task: asyncio.Task[None] | None = None

    @property
    def config(self) -> DynamicConfig:
        """The active configuration (defaults until a valid file is read)."""
        return self._active

    async def start(self) -> None:
        """Read the file once now, then poll in the background."""
        await self.check()
        if self._task is None:
            self._task = asyncio.create_task(self._poll(), name="config-watcher")

    async def stop(self) -> None:
        """Stop polling."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._poll_interval_s)
            try:
                await self.check()
            except Exception:  # never let one bad poll end hot reload
                _log.exception("config watcher: unexpected error while checking %s", self.path)

    async def check(self) -> bool:
        """Read the file once; returns True when a new configuration was applied."""
        try:
            data = await asyncio.to_thread(self.path.read_bytes)
        except FileNotFoundError:
            return self._reject(
                "missing",
                f"{self.path}: file not found; running with the "
                "previous configuration (no rules at start-up)",
            )
        except OSError as error:
            return self._reject(f"unreadable:{error}", f"{self.path}: cannot read: {error}")
        digest = hashlib.sha256(data).hexdigest()
        if digest == self._digest:
            return False
        try:
            text = data.decode("utf-8")
            config = await asyncio.to_thread(
                parse_dynamic_config, text, str(self.path), self._active
            )
        except UnicodeDecodeError as error:
            return self._reject(digest, f"{self.path}: not UTF-8 text (byte {error.start})")
        except DynamicConfigError as error:
            return self._reject(digest, str(error))
        except Exception as error:  # RecursionError, MemoryError, a parser bug: still this file's
            _log.debug("dynamic config parse failure", exc_info=True)
            reason = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
            return self._reject(digest, f"{self.path}: cannot be read as a configuration: {reason}")
        self._digest = digest
        for problem in config.rules.problems:
            self._events.warning("AlertRuleInvalid", f"{self.path}: {problem}")
            _log.error("%s: %s", self.path, problem)
        key_problems = [p for p in config.problems if "alert rule #" not in p]
        for key_problem in key_problems:
            self._events.warning("DynamicConfigInvalid", key_problem)
            _log.error("%s", key_problem)
        for warning in config.warnings:
            _log.warning("%s", warning)
        self._error = "; ".join(key_problems)
        self._metrics.config_valid.set(0 if key_problems else 1)
        self._active = config
        self._active_digest = digest
        self._loaded_ms = int(time.time() * 1000)
        _log.info(
            "dynamic config loaded from %s: %d rules valid, %d rejected",
            self.path,
            len(config.rules.rules),
            len(config.rules.problems),
        )
        await self._on_change(config)
        return True

    def _reject(self, digest: str, message: str) -> bool:
        if self._digest == digest:
            return False
        self._digest = digest
        self._error = message
        self._metrics.config_valid.set(0)
        _log.error("dynamic config rejected, previous configuration kept: %s", message)
        self._events.warning("DynamicConfigInvalid", message)
        return False

    def status(self) -> dict[str, Any]:
        """The body of `GET /api/config` (alerting.md §9)."""
        return {
            "file": str(self.path),
            "sha256": self._active_digest,
            "loadedAt": format_rfc3339_ms(self._loaded_ms) if self._loaded_ms else None,
            "config": dict(self._active.raw),
            "error": self._error,
        }

"""The dynamic configuration of one controller replica (alerting.md §2.2, deployment.md §3.5).

Every replica, leader or not, watches `config.yaml` in the mounted ConfigMap directory (the
directory of `-dynamic-config`) with the `ConfigWatcher`: a bad rule or a broken file is
reported through the event sink and shows in this replica's own `GET /api/config` and
`GET /api/alerts`. Listeners (the leader's evaluator, the metrics recorder) get every new valid
configuration; readers that only need the current value read `config`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tensorfusion.alerting.config_watcher import ConfigWatcher
from tensorfusion.alerting.event_sink import WarningSink
from tensorfusion.alerting.self_metrics import EvaluatorMetrics
from tensorfusion.domain.alerting.dynamic_config import DynamicConfig

__all__ = ["ConfigListener", "ReplicaConfig"]

_log = logging.getLogger(__name__)

ConfigListener = Callable[[DynamicConfig], Awaitable[None]]


class ReplicaConfig:
    """`config.yaml` of this replica, hot-reloaded; run `run` under the supervisor."""

    def __init__(
        self,
        config_file: str | Path,
        *,
        events: WarningSink,
        metrics: EvaluatorMetrics | None = None,
        poll_interval_s: float = 5.0,
    ) -> None:
        """`config_file` is the `-dynamic-config` path; its directory is what kubelet swaps."""
        path = Path(config_file)
        self.metrics = metrics or EvaluatorMetrics()
        self.events = events
        self.watcher = ConfigWatcher(
            path.parent,
            self._changed,
            events=events,
            metrics=self.metrics,
            poll_interval_s=poll_interval_s,
            file_name=path.name,
        )
        self._listeners: list[ConfigListener] = []
        self._started = False

    @property
    def config(self) -> DynamicConfig:
        """The active configuration (defaults until a valid file was read)."""
        return self.watcher.config

    def listen(self, listener: ConfigListener) -> Callable[[], None]:
        """Call `listener` with every new valid configuration; returns the unsubscribe."""
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    async def _changed(self, config: DynamicConfig) -> None:
        for listener in list(self._listeners):
            try:
                await listener(config)
            except Exception:  # one listener never keeps the others from the new config
                _log.exception("dynamic config: a listener failed to apply the new configuration")

    async def start(self) -> None:
        """Read the file once now, then poll in the background (idempotent)."""
        if not self._started:
            self._started = True
            await self.watcher.start()

    async def stop(self) -> None:
        """Stop polling."""
        self._started = False
        await self.watcher.stop()

    async def run(self) -> None:
        """`start`, then wait until cancelled, then `stop` (a supervisor task factory)."""
        await self.start()
        try:
            await asyncio.Event().wait()
        finally:
            await self.stop()

    def config_body(self) -> dict[str, Any]:
        """The body of `GET /api/config` of this replica: `{file, sha256, loadedAt, config,
        error}` (values of `config` as YAML read them; dump with `default=str`)."""
        return self.watcher.status()

"""The standalone evaluator process (`tensor-fusion alerts run`): store, watcher, evaluator,
Alertmanager client and a small status server (`/api/alerts`, `/api/config`, `/metrics`)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from tensorfusion.adapters.alertmanager.client import AlertmanagerClient, DeliveryMetrics
from tensorfusion.adapters.tsdb.duckdb_store import DuckDBMetricsStore, EmbeddedMetricsStore
from tensorfusion.adapters.tsdb.greptime_store import GreptimeSettings, GreptimeStore
from tensorfusion.adapters.tsdb.store import MetricsStore
from tensorfusion.alerting.alerts_status import alerts_body
from tensorfusion.alerting.config_watcher import ConfigWatcher
from tensorfusion.alerting.evaluator import AlertEvaluator
from tensorfusion.alerting.event_sink import LogEventSink, WarningSink
from tensorfusion.alerting.self_metrics import EvaluatorMetrics
from tensorfusion.alerting.state_store import FileStateStore, MemoryStateStore, StateStore
from tensorfusion.domain.alerting.alerts import DEFAULT_JOB
from tensorfusion.domain.alerting.dynamic_config import DynamicConfig
from tensorfusion.runtime import web

__all__ = ["StandaloneEvaluator", "StandaloneOptions", "job_label"]

_log = logging.getLogger(__name__)


def job_label() -> str:
    """`tensor-fusion`, or TENSOR_FUSION_CUSTOM_DOMAIN_PREFIX when that is set."""
    return os.environ.get("TENSOR_FUSION_CUSTOM_DOMAIN_PREFIX", "").strip() or DEFAULT_JOB


@dataclass(slots=True)
class StandaloneOptions:
    """Everything `alerts run` is told on its command line."""

    config_dir: Path
    alertmanager_urls: list[str]
    duckdb_path: str | None = None
    greptime: GreptimeSettings | None = None
    state_file: Path | None = None
    listen_host: str = "127.0.0.1"
    listen_port: int | None = 8080
    poll_interval_s: float = 5.0
    job: str = field(default_factory=job_label)


class StandaloneEvaluator:
    """Owns every part of the standalone evaluator; `start` then `stop`."""

    def __init__(
        self,
        options: StandaloneOptions,
        *,
        events: WarningSink | None = None,
        store_factory: Callable[[], MetricsStore] | None = None,
        max_first_delay_s: float = 7.0,
    ) -> None:
        self.options = options
        self.registry = CollectorRegistry()
        self.events = events or LogEventSink()
        self.metrics = EvaluatorMetrics(self.registry)
        self._duckdb: DuckDBMetricsStore | None = None
        self.store = store_factory() if store_factory else self._make_store()
        self.client = AlertmanagerClient(
            options.alertmanager_urls, metrics=DeliveryMetrics(self.registry)
        )
        state_store: StateStore = (
            FileStateStore(options.state_file) if options.state_file else MemoryStateStore()
        )
        self.evaluator = AlertEvaluator(
            self.store,
            self.client,
            state_store=state_store,
            events=self.events,
            metrics=self.metrics,
            job=options.job,
            max_first_delay_s=max_first_delay_s,
        )
        self.watcher = ConfigWatcher(
            options.config_dir,
            self._on_config,
            events=self.events,
            metrics=self.metrics,
            poll_interval_s=options.poll_interval_s,
        )
        self._runner: web.AppRunner | None = None
        self._ttl: str | None = None
        self.listen_port: int | None = None

    def _make_store(self) -> MetricsStore:
        if self.options.greptime is not None:
            return GreptimeStore(self.options.greptime, registry=self.registry)
        self._duckdb = DuckDBMetricsStore(self.options.duckdb_path, registry=self.registry)
        return EmbeddedMetricsStore(self._duckdb)

    async def _on_config(self, config: DynamicConfig) -> None:
        if config.metrics_ttl != self._ttl:
            self._ttl = config.metrics_ttl
            try:
                await self.store.apply_ttl(config.metrics_ttl)
            except Exception as error:  # the store reports and retries on its own
                _log.error("metricsTTL %s not applied: %s", config.metrics_ttl, error)
        await self.evaluator.apply_rules(config.rules)

    async def start(self) -> None:
        """Start the store, the client, read the config, start the evaluator and the server."""
        await self.store.start()
        await self.client.start()
        await self.watcher.start()
        await self.evaluator.start(self.watcher.config.rules)
        if self.options.listen_port is not None:
            await self._start_server()

    async def stop(self) -> None:
        """Stop in reverse order; try to deliver queued notices for up to 5 s."""
        await self.watcher.stop()
        await self.evaluator.stop()
        await self.client.stop(flush_timeout_s=5.0)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.store.close()
        if self._duckdb is not None:
            self._duckdb.close()

    def status(self) -> dict[str, Any]:
        """The body of `GET /api/alerts`."""
        return alerts_body(
            self.evaluator.status(),
            pod=os.environ.get("POD_NAME", "standalone"),
            leader=True,
            alertmanagers=self.client.status(),
        )

    async def _start_server(self) -> None:
        app = web.Application()
        app.router.add_get("/api/alerts", self._handle_alerts)
        app.router.add_get("/api/config", self._handle_config)
        app.router.add_get("/metrics", self._handle_metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.options.listen_host, self.options.listen_port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.listen_port = sockets[0].getsockname()[1] if sockets else self.options.listen_port
        _log.info("status server on %s:%s", self.options.listen_host, self.listen_port)

    async def _handle_alerts(self, request: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(self.status()), content_type="application/json")

    async def _handle_config(self, request: web.Request) -> web.Response:
        return web.Response(
            body=orjson.dumps(self.watcher.status(), default=str), content_type="application/json"
        )

    async def _handle_metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

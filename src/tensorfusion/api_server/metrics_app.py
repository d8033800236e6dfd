"""Prometheus `/metrics` on `-metrics-bind-address` (off when "0"): prometheus-client's
exposition of a registry the app owns (text format, or OpenMetrics when the scraper asks)."""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from tensorfusion.runtime import web

__all__ = ["METRICS_PATH", "create_metrics_app"]

METRICS_PATH: Final = "/metrics"


def create_metrics_app(registry: CollectorRegistry) -> web.Application:
    """The metrics application over `registry` (collected on the event loop per scrape)."""

    async def metrics(request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encoder(registry), headers={"Content-Type": content_type})

    app = web.Application()
    app.router.add_get(METRICS_PATH, metrics)
    return app

"""Health probes on `-health-probe-bind-address` (deployment.md §3.1): `/healthz` answers
while the process runs; `/readyz` once the backend has nothing missing for traffic (listeners
up, caches synced), never waiting for leadership, the allocator or the metrics store."""

from __future__ import annotations

import logging
from typing import Final

from tensorfusion.api_server.backend import HealthBackend
from tensorfusion.runtime import web

__all__ = ["HEALTHZ_PATH", "READYZ_PATH", "create_health_app"]

_log = logging.getLogger(__name__)

HEALTHZ_PATH: Final = "/healthz"
READYZ_PATH: Final = "/readyz"


def create_health_app(backend: HealthBackend) -> web.Application:
    """The probe application: plain-text `ok`, or 503 with what is missing."""

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        try:
            missing = list(backend.missing_for_traffic())
        except Exception as exc:
            _log.exception("readiness check failed")
            missing = [f"readiness check failed: {type(exc).__name__}: {exc}"]
        if missing:
            return web.Response(status=503, text="not ready: " + ", ".join(missing))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get(HEALTHZ_PATH, healthz)
    app.router.add_get(READYZ_PATH, readyz)
    return app

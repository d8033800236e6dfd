"""The HTTP server's names, as handlers and applications use them (`web.Request`, ...).

The server is runtime's: aiohttp's, started by `runtime.http_server.serve`. Features write their
handlers and applications with the names below and never import aiohttp themselves; aiohttp's
client half is not here (adapters hold the HTTP clients).
"""

from __future__ import annotations

from aiohttp.typedefs import Handler, Middleware
from aiohttp.web import (
    Application,
    AppRunner,
    HTTPException,
    Request,
    Response,
    StreamResponse,
    TCPSite,
    json_response,
    middleware,
)

__all__ = [
    "AppRunner",
    "Application",
    "HTTPException",
    "Handler",
    "Middleware",
    "Request",
    "Response",
    "StreamResponse",
    "TCPSite",
    "json_response",
    "middleware",
]

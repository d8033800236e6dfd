"""The built-in web console (docs/observability.md), served on the API's port beside `/api/*`:
three static files shipped in the package, read-only, with a Content-Security-Policy that lets
the page load nothing but its own files and call nothing but this origin's API. Every replica
serves it; the page's API calls are forwarded to the leader like any other."""

from __future__ import annotations

from typing import Final

from tensorfusion.adapters.package_data import console_asset
from tensorfusion.api_server.responses import ApiError
from tensorfusion.runtime import web

__all__ = ["CONSOLE_PATH", "add_console_routes"]

CONSOLE_PATH: Final = "/console/"
_TYPES: Final = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}


async def _asset(request: web.Request) -> web.StreamResponse:
    name = request.match_info.get("name") or "index.html"
    body = console_asset(name)
    if body is None:
        raise ApiError(404, "NotFound", f"{request.path}: no such console file")
    content_type = _TYPES[name[name.rindex(".") :]]
    return web.Response(body=body, content_type=content_type, charset="utf-8",
                        headers=_HEADERS)  # fmt: skip


async def _to_console(request: web.Request) -> web.StreamResponse:
    return web.Response(status=302, headers={"Location": CONSOLE_PATH})


def add_console_routes(app: web.Application) -> None:
    """`GET /console/` and its files; `/` and `/console` lead there."""
    app.router.add_get("/", _to_console)
    app.router.add_get("/console", _to_console)
    app.router.add_get(CONSOLE_PATH, _asset)
    app.router.add_get(CONSOLE_PATH + "{name}", _asset)

"""A small external scaler on loopback over HTTPS (the autoscaler's external-scaler tests): it
records each request and its Authorization header and answers what the test set."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class ScalerServer:
    """Answers POST /recommend with `answer` (JSON) and `status`; `seen` holds (Authorization,
    body) of every request."""

    context: ssl.SSLContext
    answer: Any = None
    status: int = 200
    seen: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    port: int = 0
    delay_s: float = 0.0
    """Seconds to wait before answering (a slow scaler)."""
    _runner: web.AppRunner | None = None
    _stopping: asyncio.Event = field(default_factory=asyncio.Event)

    async def _recommend(self, request: web.Request) -> web.Response:
        self.seen.append((request.headers.get("Authorization", ""), await request.json()))
        if self.delay_s:  # answers late, or when the server stops
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.delay_s)
        return web.Response(status=self.status, text=json.dumps(self.answer),
                            content_type="application/json")  # fmt: skip

    async def start(self, host: str = "127.0.0.1") -> str:
        """Serve on a free port of `host`; the URL to call."""
        app = web.Application()
        app.router.add_post("/recommend", self._recommend)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, 0, ssl_context=self.context).start()
        self.port = self._runner.addresses[0][1]
        return f"https://{host}:{self.port}/recommend"

    async def stop(self) -> None:
        """Stop serving."""
        self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()

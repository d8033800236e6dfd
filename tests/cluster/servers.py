"""Small loopback HTTP(S) servers for the cluster tests (webhooks, scheduler extenders)."""

from __future__ import annotations

import base64
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
from aiohttp import web

from .controlplane import LOOPBACK


@asynccontextmanager
async def serve(
    app: web.Application, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[str]:
    """Serves ``app`` on a free loopback port; yields its base URL (``https://127.0.0.1:N``)."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, LOOPBACK, 0, ssl_context=ssl_context)
    try:
        await site.start()
        port = runner.addresses[0][1]
        yield f"{'https' if ssl_context else 'http'}://{LOOPBACK}:{port}"
    finally:
        await runner.cleanup()


def admission_response(
    review: dict[str, Any],
    *,
    allowed: bool = True,
    patch: list[dict[str, Any]] | None = None,
    message: str | None = None,
) -> dict[str, Any]:
    """The AdmissionReview (admission.k8s.io/v1) that answers ``review``."""
    response: dict[str, Any] = {"uid": review["request"]["uid"], "allowed": allowed}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(patch)).decode()
    if message:
        response["status"] = {"message": message}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}

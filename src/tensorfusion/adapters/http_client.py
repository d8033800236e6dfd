"""The plain HTTP client (httpx's) as code outside adapters names it: the client and answer
types, what a call raises when the server cannot be reached or read, and a client for
addresses outside the API server (the doctor's calls to Alertmanagers and `--api-url`); and the
health probe of a child process on loopback."""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from typing import Final, TypeAlias

import aiohttp
import httpx

__all__ = [
    "HTTP_ERRORS",
    "HttpClient",
    "HttpResponse",
    "http_client",
    "loopback_tls_probe",
    "post_json",
]

HttpClient: TypeAlias = httpx.AsyncClient
HttpResponse: TypeAlias = httpx.Response
HTTP_ERRORS: Final[tuple[type[Exception], ...]] = (httpx.HTTPError, httpx.InvalidURL)
"""What a call through an `HttpClient` raises when the server cannot be reached or answered
badly, or its URL cannot be used (the answer's status alone raises nothing)."""


def http_client(timeout_s: float) -> HttpClient:
    """A client whose every call is bounded by `timeout_s` seconds (close it: `aclose()`)."""
    return httpx.AsyncClient(timeout=timeout_s)


async def post_json(
    url: str,
    body: bytes,
    *,
    headers: dict[str, str],
    ca_pem: bytes | None,
    timeout_s: float,
    max_bytes: int,
) -> tuple[int, bytes]:
    """POST `body` (JSON) to `url`; the answer's status and at most `max_bytes + 1` bytes of its
    body. HTTPS is verified against `ca_pem` (the system's trust store, OpenSSL's default
    paths, without it); redirects are not followed. `timeout_s` bounds each step (connect,
    each read); the caller bounds the whole call. Raises one of `HTTP_ERRORS`, or ValueError for
    an unusable `ca_pem`."""
    try:
        if ca_pem:
            verify = ssl.create_default_context(cadata=ca_pem.decode("ascii", "replace"))
        else:
            verify = ssl.create_default_context()
    except ssl.SSLError as error:
        raise ValueError(f"the CA cannot be loaded: {error}") from None
    verify.minimum_version = ssl.TLSVersion.TLSv1_2
    async with (
        httpx.AsyncClient(timeout=timeout_s, verify=verify, follow_redirects=False) as client,
        client.stream("POST", url, content=body,
                      headers={**headers, "Content-Type": "application/json"}) as answer,
    ):  # fmt: skip
        read = bytearray()
        async for chunk in answer.aiter_bytes():
            read += chunk
            if len(read) > max_bytes:
                break
        return answer.status_code, bytes(read[: max_bytes + 1])


def loopback_tls_probe(
    port: int, path: str, timeout_s: float = 3.0
) -> Callable[[], Awaitable[bool]]:
    """A check that `https://127.0.0.1:<port><path>` answers 200, for a child process that
    serves it with a self-signed certificate on loopback (the certificate is not verified:
    nothing leaves the host)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    url = f"https://127.0.0.1:{port}{path}"
    timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def healthy() -> bool:
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.get(url, ssl=context) as reply,
            ):
                return reply.status == 200
        except (aiohttp.ClientError, TimeoutError, OSError):
            return False

    return healthy

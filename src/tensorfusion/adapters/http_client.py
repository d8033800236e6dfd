"""The plain HTTP client (httpx's) as code outside adapters names it: the client and answer
types, what a call raises when the server cannot be reached or read, and a client for
addresses outside the API server (the doctor's calls to Alertmanagers and `--api-url`)."""

from __future__ import annotations

from typing import Final, TypeAlias

import httpx

__all__ = ["HTTP_ERRORS", "HttpClient", "HttpResponse", "http_client"]

HttpClient: TypeAlias = httpx.AsyncClient
HttpResponse: TypeAlias = httpx.Response
HTTP_ERRORS: Final[tuple[type[Exception], ...]] = (httpx.HTTPError,)
"""What a call through an `HttpClient` raises when the server cannot be reached or answered
badly (the answer's status alone raises nothing)."""


def http_client(timeout_s: float) -> HttpClient:
    """A client whose every call is bounded by `timeout_s` seconds (close it: `aclose()`)."""
    return httpx.AsyncClient(timeout=timeout_s)

"""HTTPS requests to another replica's peer port (aiohttp's client), for forwarding to the
leader and asking it for a pod index. The caller gives the TLS context, the name to verify and
the headers (`PeerClient` makes them); a failure to reach the peer or to read its answer is
`PeerRequestError`."""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import aiohttp
from yarl import URL

__all__ = ["PeerAnswer", "PeerRequestError", "PeerSession"]


class PeerRequestError(OSError):
    """The peer could not be reached or its answer read; the message says why."""


@dataclass(frozen=True, slots=True)
class PeerAnswer:
    """The peer's status, body and the response headers asked for."""

    status: int
    body: bytes
    headers: Mapping[str, str]


class PeerSession:
    """One client session, created on first request and closed by `close()`; each request is
    bounded by `timeout` seconds in all."""

    def __init__(self, timeout: float) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self,
        method: str,
        url: str,
        *,
        context: ssl.SSLContext,
        server_hostname: str,
        headers: Mapping[str, str],
        body: bytes | None = None,
        params: Mapping[str, str] | None = None,
        keep_headers: Sequence[str] = (),
        follow_redirects: bool = False,
    ) -> PeerAnswer:
        """`method url` (already percent-encoded); the answer keeps the headers named in
        `keep_headers` that it has."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        try:
            async with self._session.request(
                method,
                URL(url, encoded=True),
                params=params,
                data=body,
                headers=dict(headers),
                allow_redirects=follow_redirects,
                ssl=context,
                server_hostname=server_hostname,
            ) as answer:
                data = await answer.read()
                kept = {n: answer.headers[n] for n in keep_headers if n in answer.headers}
                return PeerAnswer(answer.status, data, kept)
        except aiohttp.ClientError as exc:
            raise PeerRequestError(str(exc) or type(exc).__name__) from exc

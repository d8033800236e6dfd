"""A replica that is not the leader forwards requests to the leader (scheduling.md §16).

Method, path, query, body and the `Content-Type` and `Accept` headers go to the leader's peer
port, `https://<leader address><path>?<query>`, its certificate checked against the release CA
(`PeerClient`); `Authorization` carries this replica's own ServiceAccount token and the
caller's `Authorization`, if any, travels in `X-Tensor-Fusion-Caller-Authorization` (the
leader's peer port puts it back after checking this replica). The leader's status, body and
`Content-Type`, `Retry-After` and `WWW-Authenticate` headers come back. No leader known, the
leader unreachable or too slow, no CA or token to call it with: 503 `NotLeader` with
`Retry-After: 5`. A forwarded request carries `X-Tensor-Fusion-Forwarded`; a replica that
receives one and is not the leader either answers 503 instead of forwarding again (the Lease
changed hands meanwhile), so requests never go round in circles.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from tensorfusion.adapters.tls.peer_client import PeerClient, PeerUnavailableError
from tensorfusion.adapters.tls.peer_http import PeerSession
from tensorfusion.api_server.responses import ApiError
from tensorfusion.runtime import web
from tensorfusion.runtime.http_server import join_host_port, parse_host_port

__all__ = ["CALLER_AUTHORIZATION_HEADER", "FORWARDED_HEADER", "LeaderForwarder"]

_log = logging.getLogger(__name__)

FORWARDED_HEADER = "X-Tensor-Fusion-Forwarded"
CALLER_AUTHORIZATION_HEADER = "X-Tensor-Fusion-Caller-Authorization"
RETRY_AFTER_S = 5
_REQUEST_HEADERS = ("Content-Type", "Accept")
_RESPONSE_HEADERS = ("Content-Type", "Retry-After", "WWW-Authenticate")


def _not_leader(message: str) -> ApiError:
    return ApiError(503, "NotLeader", message, {"Retry-After": str(RETRY_AFTER_S)})


class LeaderForwarder:
    """Forwards requests to the peer port at the address `leader_address` returns, through
    `peer`; one client session, created on first use and closed by `close()`."""

    def __init__(
        self,
        leader_address: Callable[[], Awaitable[str | None]],
        peer: PeerClient | None,
        timeout: float = 10.0,
    ) -> None:
        self._leader_address = leader_address
        self._peer = peer
        self._session = PeerSession(timeout)

    async def close(self) -> None:
        """Close the client session (the API app's cleanup)."""
        await self._session.close()

    async def _target(self) -> str:
        try:
            address = await self._leader_address()
        except Exception as exc:
            _log.warning("cannot read the leader's address: %s", exc)
            raise _not_leader(
                f"this replica is not the leader and the leader's address cannot be read: {exc}"
            ) from None
        if not address:
            raise _not_leader("this replica is not the leader and no leader is known")
        try:
            host, port = parse_host_port(address, "leader address")
        except ValueError as exc:
            raise _not_leader(f"this replica is not the leader: {exc}") from None
        if not host:
            raise _not_leader(f"this replica is not the leader: leader address {address!r}")
        return join_host_port(host, port)

    async def forward(self, request: web.Request) -> web.Response:
        """The leader's answer to `request`; ApiError 503 `NotLeader` when there is none."""
        if FORWARDED_HEADER in request.headers:
            raise _not_leader(
                "this replica received a forwarded request but is not the leader either "
                "(the leadership changed meanwhile; retry)"
            )
        target = await self._target()
        body = await request.read()
        if self._peer is None:
            raise _not_leader("this replica is not the leader and has no peer port to forward to")
        try:
            context, authorization = self._peer.ssl_context(), self._peer.authorization()
        except PeerUnavailableError as exc:
            raise _not_leader(f"this replica is not the leader and cannot call it: {exc}") from None
        headers = {
            name: request.headers[name] for name in _REQUEST_HEADERS if name in request.headers
        }
        headers[FORWARDED_HEADER] = "1"
        headers["Authorization"] = authorization
        if "Authorization" in request.headers:
            headers[CALLER_AUTHORIZATION_HEADER] = request.headers["Authorization"]
        try:
            answer = await self._session.request(
                request.method,
                f"https://{target}{request.raw_path}",
                context=context,
                server_hostname=self._peer.server_hostname,
                headers=headers,
                body=body or None,
                keep_headers=_RESPONSE_HEADERS,
            )
        except (TimeoutError, OSError) as exc:
            reason = str(exc) or type(exc).__name__
            _log.warning("forwarding %s %s to the leader at %s failed: %s",
                         request.method, request.path, target, reason)  # fmt: skip
            raise _not_leader(
                f"this replica is not the leader and forwarding to the leader at {target} "
                f"failed: {reason}"
            ) from None
        return web.Response(status=answer.status, body=answer.body, headers=dict(answer.headers))

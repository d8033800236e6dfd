"""How a controller replica calls another's peer port (HTTPS, `PEER_PORT`).

The peer's certificate is checked against the release's CA (`ca.crt` of the webhook Secret,
which every replica loads) for the controller Service's name, whatever IP is dialled, and the
request carries this replica's own ServiceAccount token, re-read from its file on every call
(the kubelet rotates it). Nothing here sends a token over plain HTTP.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tensorfusion.domain.settings.environment_values import SERVICE_ACCOUNT_TOKEN_FILE

__all__ = ["PeerClient", "PeerUnavailableError", "client_context"]


class PeerUnavailableError(RuntimeError):
    """A peer cannot be called now; the message says what is missing."""


def client_context(ca_pem: bytes) -> ssl.SSLContext:
    """A client context trusting only `ca_pem` (TLS 1.2 or later, host names checked)."""
    try:
        context = ssl.create_default_context(cadata=ca_pem.decode("ascii", "replace"))
    except (ssl.SSLError, ValueError) as error:
        raise PeerUnavailableError(f"the release CA cannot be loaded: {error}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


@dataclass(slots=True)
class PeerClient:
    """The TLS context, the name to verify and the token of calls to a peer replica."""

    ca: Callable[[], bytes | None]
    """The release CA as loaded now (None before the certificate is loaded, or when the
    Secret has no `ca.crt`)."""
    server_hostname: str
    """The name every replica's certificate carries: `<fullname>.<namespace>.svc`."""
    token_file: str = SERVICE_ACCOUNT_TOKEN_FILE
    _context: ssl.SSLContext | None = field(default=None, repr=False)
    _context_ca: bytes | None = field(default=None, repr=False)

    def ssl_context(self) -> ssl.SSLContext:
        """The client context for the current CA; PeerUnavailableError without one."""
        ca = self.ca()
        if not ca:
            raise PeerUnavailableError(
                "the release CA is not loaded (the webhook Secret's ca.crt is missing or not "
                "read yet): peers cannot be verified"
            )
        if self._context is None or ca != self._context_ca:
            self._context, self._context_ca = client_context(ca), ca
        return self._context

    def authorization(self) -> str:
        """`Bearer <own token>`; PeerUnavailableError when the token file cannot be read."""
        try:
            token = Path(self.token_file).read_text(encoding="utf-8").strip()
        except OSError as error:
            reason = error.strerror or error
            raise PeerUnavailableError(
                f"the ServiceAccount token {self.token_file} cannot be read: {reason}"
            ) from None
        if not token:
            raise PeerUnavailableError(f"the ServiceAccount token file {self.token_file} is empty")
        return f"Bearer {token}"

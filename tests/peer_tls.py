"""A release certificate and peer clients for tests of the peer port (no API server)."""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path

from tensorfusion.adapters.tls.peer_client import PeerClient
from tensorfusion.adapters.tls.webhook_certificates import (
    CertificateBundle,
    issue,
    server_context,
)

SERVICE_HOST = "tensor-fusion.tf-sys.svc"
"""The name every replica's certificate carries and peers verify."""


def release_bundle(*extra: str) -> CertificateBundle:
    """A certificate of a fresh CA for the webhook Service, the controller Service and `extra`."""
    now = datetime.datetime.now(datetime.UTC)
    return issue("tensor-fusion-webhook", "tf-sys", now, extra_hosts=(SERVICE_HOST, *extra))


def serving(bundle: CertificateBundle) -> ssl.SSLContext:
    """The server side of `bundle`."""
    return server_context(bundle)


def peer_client(bundle: CertificateBundle, token_dir: Path, token: str = "own-token") -> PeerClient:
    """A client that trusts `bundle`'s CA and sends `token` (written into `token_dir`)."""
    path = token_dir / "peer-token"
    path.write_text(token)
    return PeerClient(ca=lambda: bundle.ca_pem, server_hostname=SERVICE_HOST,
                      token_file=str(path))  # fmt: skip

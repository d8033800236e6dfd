"""The release certificate of a controller replica and the HTTPS sites that serve it.

One `WebhookCertificates` per replica, kept from the webhook Secret whether or not the webhook
is enabled (the peer port needs it either way), refreshed every 30 s by the supervised task
`certificate`. Its serving context is shared by the webhook site and the peer site
(`TlsSite`), so a renewed certificate is served by both without restart; its CA is what peers
verify each other with (`PeerClient`). The certificate also names the controller Service
(`<fullname>.<namespace>.svc`), the name peers and agents verify whatever address they dial.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from tensorfusion.adapters.kube.client import KubeClient
from tensorfusion.adapters.tls.peer_client import PeerClient
from tensorfusion.adapters.tls.webhook_secret import WebhookCertificates
from tensorfusion.domain.settings.controller_environment import ControllerEnvironment
from tensorfusion.runtime import web
from tensorfusion.runtime.http_server import join_host_port, serve

__all__ = ["TlsSite", "peer_client", "peer_service_host", "release_certificates", "tls_address"]

_log = logging.getLogger(__name__)


def peer_service_host(env: ControllerEnvironment) -> str:
    """`<fullname>.<namespace>.svc`: the controller Service, named by the certificate."""
    return f"{env.release_fullname}.{env.namespace}.svc"


def tls_address(env: ControllerEnvironment, port: int) -> str:
    """Where an HTTPS site of the replica listens: `PEER_BIND_HOST` (every interface when
    empty) and `port`."""
    return join_host_port(env.peer_host, port) if env.peer_host else f":{port}"


def release_certificates(client: KubeClient, env: ControllerEnvironment) -> WebhookCertificates:
    """The replica's certificate keeper (the caBundle kept only with the webhook enabled)."""
    configuration = f"{env.release_fullname}-mutating-webhook" if env.enable_webhooks else None
    return WebhookCertificates(
        client, namespace=env.namespace, secret_name=env.webhook_secret,
        service_name=f"{env.release_fullname}-webhook", webhook_configuration=configuration,
        extra_hosts=(peer_service_host(env), *env.webhook_cert_extra_hosts),
        identity=env.pod_name or "controller",
    )  # fmt: skip


def peer_client(env: ControllerEnvironment, certificates: WebhookCertificates) -> PeerClient:
    """How this replica calls its peers: the certificate's CA, the Service name, its token."""
    return PeerClient(ca=certificates.ca_pem, server_hostname=peer_service_host(env),
                      token_file=env.peer_token_file)  # fmt: skip


@dataclass(slots=True)
class TlsSite:
    """One HTTPS site served with the release certificate once it is loaded."""

    name: str
    app: web.Application
    address: str
    certificates: WebhookCertificates
    listening: bool = False

    def ready(self) -> bool:
        """Whether the site listens with a loaded certificate."""
        return self.listening and self.certificates.ready

    async def run(self) -> None:
        """Wait for the certificate, then serve until cancelled."""
        context = await self.certificates.wait_loaded()
        server = await serve(self.app, self.address, ssl_context=context)
        _log.info("%s listening on %s (HTTPS)", self.name, server.address)
        self.listening = True
        try:
            await asyncio.Event().wait()
        finally:
            self.listening = False
            await server.stop()

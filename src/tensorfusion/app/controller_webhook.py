"""The pod webhook in the controller process (admission.md §1, deployment.md §7).

Every replica serves it, leader or not: `WebhookWork.run` keeps the certificate from its Secret
(issuing it when absent), starts HTTPS on `WEBHOOK_PORT` once a certificate is loaded, and
refreshes it every 30 s (a renewed or replaced Secret is served without restart). `/readyz`
waits for the site to listen with its certificate through `WebhookWork.ready`. The admitter
reads the replica's caches, asks the leader for pod indices, and writes counters and
workloads; `autoMigration` follows the dynamic configuration without restart.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from lightkube import AsyncClient
from prometheus_client import CollectorRegistry

from tensorfusion.admission.admitter import ClusterAdmitter
from tensorfusion.admission.certificates import WebhookCertificates
from tensorfusion.admission.cluster_sources import ClusterAdmissionSources
from tensorfusion.admission.facts_gathering import AdmissionSettings
from tensorfusion.admission.webhook_app import WebhookMetrics, create_webhook_app
from tensorfusion.alerting.replica_config import ReplicaConfig
from tensorfusion.api_server.serving import join_host_port, serve
from tensorfusion.app.controller_backend import ControllerBackend
from tensorfusion.app.controller_informers import ControllerInformers
from tensorfusion.domain.admission.auto_migration import read_auto_migration
from tensorfusion.domain.alerting.dynamic_config import DynamicConfig
from tensorfusion.domain.settings.controller_environment import ControllerEnvironment

__all__ = ["SERVICE_ACCOUNT_TOKEN", "WebhookWork"]

_log = logging.getLogger(__name__)
SERVICE_ACCOUNT_TOKEN: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
RETRY_S: Final = 5.0


def _token() -> str:
    """The pod's ServiceAccount token (re-read: the kubelet rotates it); "" out of a pod."""
    try:
        return SERVICE_ACCOUNT_TOKEN.read_text().strip()
    except OSError:
        return ""


@dataclass(slots=True)
class WebhookWork:
    """The webhook of one replica: its certificate and its HTTPS site."""

    certificates: WebhookCertificates
    admitter: ClusterAdmitter
    metrics: WebhookMetrics
    address: str
    listening: bool = False

    @classmethod
    def create(
        cls,
        *,
        client: AsyncClient,
        env: ControllerEnvironment,
        informers: ControllerInformers,
        backend: ControllerBackend,
        registry: CollectorRegistry,
        config: ReplicaConfig,
    ) -> WebhookWork:
        """The webhook of this replica, from the chart's environment."""
        certificates = WebhookCertificates(
            client, namespace=env.namespace, secret_name=env.webhook_secret,
            service_name=f"{env.release_fullname}-webhook",
            webhook_configuration=f"{env.release_fullname}-mutating-webhook",
            extra_hosts=env.webhook_cert_extra_hosts, identity=env.pod_name or "controller",
        )  # fmt: skip
        sources = ClusterAdmissionSources(
            client=client, pools=informers.pools, profiles=informers.profiles,
            quotas=informers.quotas, gpus=informers.gpus, namespaces=informers.namespaces,
            is_leader=backend.is_leader, take_index=backend.take_pod_index,
            leader_address=backend.leader_address, token=_token,
        )  # fmt: skip
        settings = AdmissionSettings(progressive_migration=env.progressive_migration)
        host = env.api_host
        address = join_host_port(host, env.webhook_port) if host else f":{env.webhook_port}"
        admitter = ClusterAdmitter(client, sources, settings, workloads=informers.workloads)
        work = cls(certificates, admitter, WebhookMetrics(registry), address)
        work.apply_config(config.config)
        config.listen(work.on_config)
        return work

    def apply_config(self, config: DynamicConfig) -> None:
        """Take `autoMigration` from the dynamic configuration (hot-reloaded)."""
        migration = read_auto_migration(config.raw.get("autoMigration"))
        if migration.error:
            _log.warning("dynamic config autoMigration: %s; no pod migrates until it is fixed",
                         migration.error)  # fmt: skip
        if migration != self.admitter.settings.auto_migration:
            _log.info("auto-migration %s", "on" if migration.enable else "off")
        self.admitter.settings = replace(self.admitter.settings, auto_migration=migration)
        self.certificates.auto_migration = migration.enable

    async def on_config(self, config: DynamicConfig) -> None:
        """`ReplicaConfig` listener."""
        self.apply_config(config)

    def ready(self) -> bool:
        """Whether the HTTPS site listens with a loaded certificate."""
        return self.listening and self.certificates.ready

    async def run(self) -> None:
        """Certificate first, then HTTPS until cancelled; the certificate refreshed meanwhile."""
        while not await self.certificates.refresh():
            await asyncio.sleep(RETRY_S)
        context = self.certificates.context
        assert context is not None
        server = await serve(create_webhook_app(self.admitter, self.metrics), self.address,
                             ssl_context=context)  # fmt: skip
        _log.info("pod webhook listening on %s (HTTPS)", server.address)
        self.listening = True
        try:
            await self.certificates.run()
        finally:
            self.listening = False
            await server.stop()

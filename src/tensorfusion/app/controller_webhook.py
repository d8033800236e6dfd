"""The pod webhook in the controller process (admission.md §1, deployment.md §7).

Every replica serves it, leader or not: `WebhookWork.run` starts HTTPS on `WEBHOOK_PORT` once
the release certificate is loaded (`controller_tls`: kept from its Secret, renewed or replaced
without restart). `/readyz` waits for the site to listen with its certificate through
`WebhookWork.ready`. The admitter reads the replica's caches, asks the leader for pod indices
on its peer port, and writes counters and workloads; `autoMigration` follows the dynamic
configuration without restart.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from prometheus_client import CollectorRegistry

from tensorfusion.adapters.kube.client import KubeClient
from tensorfusion.adapters.tls.peer_client import PeerClient
from tensorfusion.adapters.tls.webhook_secret import WebhookCertificates
from tensorfusion.admission.admitter import ClusterAdmitter
from tensorfusion.admission.cluster_sources import ClusterAdmissionSources
from tensorfusion.admission.facts_gathering import AdmissionSettings
from tensorfusion.admission.webhook_app import WebhookMetrics, create_webhook_app
from tensorfusion.alerting.replica_config import ReplicaConfig
from tensorfusion.app.controller_backend import ControllerBackend
from tensorfusion.app.controller_informers import ControllerInformers
from tensorfusion.app.controller_tls import TlsSite, tls_address
from tensorfusion.domain.admission.auto_migration import read_auto_migration
from tensorfusion.domain.alerting.dynamic_config import DynamicConfig
from tensorfusion.domain.settings.controller_environment import ControllerEnvironment

__all__ = ["WebhookWork"]

_log = logging.getLogger(__name__)


@dataclass(slots=True)
class WebhookWork:
    """The webhook of one replica: its certificate and its HTTPS site."""

    certificates: WebhookCertificates
    admitter: ClusterAdmitter
    metrics: WebhookMetrics
    address: str
    site: TlsSite | None = None

    @classmethod
    def create(
        cls,
        *,
        client: KubeClient,
        env: ControllerEnvironment,
        informers: ControllerInformers,
        backend: ControllerBackend,
        registry: CollectorRegistry,
        config: ReplicaConfig,
        certificates: WebhookCertificates,
        peer: PeerClient,
    ) -> WebhookWork:
        """The webhook of this replica, from the chart's environment."""
        sources = ClusterAdmissionSources(
            client=client, pools=informers.pools, profiles=informers.profiles,
            quotas=informers.quotas, gpus=informers.gpus, namespaces=informers.namespaces,
            is_leader=backend.is_leader, take_index=backend.take_pod_index,
            leader_address=backend.leader_address, peer=peer,
        )  # fmt: skip
        settings = AdmissionSettings(progressive_migration=env.progressive_migration)
        address = tls_address(env, env.webhook_port)
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
        return self.site is not None and self.site.ready()

    async def run(self) -> None:
        """HTTPS once the release certificate is loaded, until cancelled."""
        self.site = TlsSite("pod webhook", create_webhook_app(self.admitter, self.metrics),
                            self.address, self.certificates)  # fmt: skip
        await self.site.run()

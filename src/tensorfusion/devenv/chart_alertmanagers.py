"""The chart's Alertmanager StatefulSet run as real Alertmanagers (Debian's
`prometheus-alertmanager`) where there is no kubelet, each shown as the Pod its StatefulSet
would have made (`<release>-alert-manager-<i>`, Running and Ready at its address)."""

from __future__ import annotations

import base64
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from lightkube import AsyncClient
from lightkube.resources.apps_v1 import StatefulSet
from lightkube.resources.core_v1 import Secret

from tensorfusion.devenv.processes import Component
from tensorfusion.devenv.replica_pods import stand_in_pod
from tensorfusion.devenv.source_tree import NAMESPACE, RELEASE

__all__ = ["HEADLESS", "AlertmanagerMissingError", "ChartAlertmanagers", "alertmanager_binary"]


HEADLESS = f"alert-manager-headless.{NAMESPACE}.svc.cluster.local"


class AlertmanagerMissingError(RuntimeError):
    """Debian's prometheus-alertmanager is not installed."""


def alertmanager_binary() -> str | None:
    """Debian's `prometheus-alertmanager` (or an `alertmanager` on PATH), if installed."""
    return shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


@dataclass
class ChartAlertmanagers:
    """Real Alertmanagers run as the chart's StatefulSet says: its replica count, its
    configuration from the rendered Secret, gossip between the replicas, each on a loopback
    address of its own (`ip_prefix` + 1, 2, ...) at port 9093, listed for the headless
    Service's name in the controllers' `HOST_ALIASES_FILE` (no cluster DNS here)."""

    kube: AsyncClient
    workdir: Path
    aliases: Path
    ip_prefix: str = "127.0.2."
    pid_dir: Path | None = None
    detached: bool = False
    components: list[Component] = field(default_factory=list)
    addresses: list[str] = field(default_factory=list)

    async def start(self) -> list[str]:
        """Start one Alertmanager per replica of the StatefulSet; their addresses."""
        binary = alertmanager_binary()
        if binary is None:
            raise AlertmanagerMissingError(
                "Debian's prometheus-alertmanager is not installed (make system-deps)"
            )
        statefulset = await self.kube.get(StatefulSet, f"{RELEASE}-alert-manager",
                                          namespace=NAMESPACE)  # fmt: skip
        count = (statefulset.spec.replicas if statefulset.spec else None) or 1
        template = statefulset.spec.template if statefulset.spec else None
        labels = dict((template.metadata.labels if template and template.metadata else None) or {})
        secret = await self.kube.get(Secret, f"{RELEASE}-alert-manager-config",
                                     namespace=NAMESPACE)  # fmt: skip
        config = base64.b64decode((secret.data or {})["alertmanager.yml"]).decode()
        self.addresses = [f"{self.ip_prefix}{i + 1}" for i in range(count)]
        self.aliases.write_text("".join(f"{ip} {HEADLESS}\n" for ip in self.addresses))
        for i, ip in enumerate(self.addresses):
            directory = self.workdir / f"alertmanager-{ip}"
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "alertmanager.yml").write_text(config)
            peers = [f"--cluster.peer={peer}:9094" for peer in self.addresses if peer != ip]
            name = f"alertmanager-{i}"
            component = Component(
                name,
                [binary, f"--config.file={directory / 'alertmanager.yml'}",
                 f"--storage.path={directory / 'data'}", f"--web.listen-address={ip}:9093",
                 f"--cluster.listen-address={ip}:9094", f"--cluster.advertise-address={ip}:9094",
                 *peers, "--log.level=warn"],
                directory / "alertmanager.log",
                pid_file=self.pid_dir / f"{name}.pid" if self.pid_dir else None,
                detached=self.detached,
            )  # fmt: skip
            component.start()
            self.components.append(component)
            await stand_in_pod(self.kube, namespace=NAMESPACE, name=f"{RELEASE}-alert-manager-{i}",
                               ip=ip, service_account="alert-manager", labels=labels,
                               container="alertmanager", role="alertmanager")  # fmt: skip
        return self.addresses

    async def alerts(self, address: str) -> list[dict[str, Any]]:
        """The alerts one replica holds (`GET /api/v2/alerts`)."""
        async with (
            aiohttp.ClientSession() as session,
            session.get(
                f"http://{address}:9093/api/v2/alerts", timeout=aiohttp.ClientTimeout(5)
            ) as reply,  # fmt: skip
        ):
            found: list[dict[str, Any]] = await reply.json()
            return found

    def stop(self) -> None:
        """Stop every replica by its PID."""
        while self.components:
            self.components.pop().stop(timeout=10)

"""Controller replicas as processes for the cluster tier: each on a loopback IP of its own."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from lightkube import AsyncClient
from lightkube.resources.coordination_v1 import Lease

from tensorfusion.devenv.source_tree import CRDS, EXECUTABLE
from tensorfusion.runtime.leader_election import LEASE_NAME

from .controlplane import Component, ControlPlane, free_port

__all__ = ["CRDS", "EXECUTABLE", "Replica", "Start", "holder", "install_crds", "started_replicas"]


async def install_crds(control_plane: ControlPlane) -> None:
    await control_plane.kubectl("apply", "--server-side", "-f", str(CRDS))
    await control_plane.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"
    )


@dataclass
class Replica:
    """A controller replica: its process, its address (a loopback IP of its own) and ports."""

    component: Component
    ip: str
    api_port: int
    health_port: int
    metrics_port: int

    def url(self, path: str, *, health: bool = False, metrics: bool = False) -> str:
        port = self.health_port if health else self.metrics_port if metrics else self.api_port
        return f"http://{self.ip}:{port}{path}"

    async def get(
        self, path: str, *, health: bool = False, metrics: bool = False
    ) -> tuple[int, str]:
        url = self.url(path, health=health, metrics=metrics)
        async with (
            aiohttp.ClientSession() as session,
            session.get(url, timeout=aiohttp.ClientTimeout(5)) as reply,
        ):
            return reply.status, await reply.text()


Start = Callable[..., Replica]


@contextlib.contextmanager
def started_replicas(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> Iterator[Start]:
    """Starts controller replicas in the test namespace, each on a loopback IP of its own
    (as pods have), all with the same API port, `/metrics` on, and the testenv's
    kube-scheduler as the leader's child with the extender on the replica's own address;
    stops them afterwards."""
    started: list[Component] = []
    api_port = free_port()

    def start(name: str, *flags: str, env: Mapping[str, str] | None = None) -> Replica:
        ip = f"127.0.0.{len(started) + 2}"
        health_port, metrics_port = free_port(), free_port()
        replica = Component(
            name,
            [EXECUTABLE, "controller", "--kubeconfig", str(control_plane.kubeconfig),
             "-health-probe-bind-address", f"{ip}:{health_port}",
             "-metrics-bind-address", f"{ip}:{metrics_port}",
             "-kube-scheduler-path", str(control_plane.binaries.path("kube-scheduler")),
             "-scheduler-extender-bind-address", f"{ip}:{free_port()}", *flags],
            tmp_path / f"{name}.log",
            env={"POD_NAME": name, "POD_IP": ip, "OPERATOR_NAMESPACE": namespace,
                 "PORT": str(api_port), "API_BIND_HOST": ip,
                 "TSDB_EMBEDDED_DIR": str(tmp_path / name / "tsdb"), **(env or {})},
        )  # fmt: skip
        replica.start()
        started.append(replica)
        return Replica(replica, ip, api_port, health_port, metrics_port)

    try:
        yield start
    finally:
        for replica in started:
            replica.stop()


async def holder(kube: AsyncClient, namespace: str) -> str | None:
    try:
        lease = await kube.get(Lease, LEASE_NAME, namespace=namespace)
    except Exception:
        return None
    return lease.spec.holderIdentity if lease.spec else None

"""Controller replicas as processes for the cluster tier: each on a loopback IP of its own."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from lightkube import ApiError, AsyncClient
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import PolicyRule, RoleRef, Subject
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ServiceAccount, ServiceAccountToken
from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding

from tensorfusion.devenv.replica_pods import stand_in_pod
from tensorfusion.devenv.source_tree import CRDS, EXECUTABLE
from tensorfusion.runtime.leader_election import LEASE_NAME

from .controlplane import Component, ControlPlane, free_port

__all__ = ["CRDS", "EXECUTABLE", "Replica", "Start", "holder", "install_crds", "started_replicas"]

ACCOUNT = "tensor-fusion"
"""The controller's ServiceAccount name the replicas expect (`SERVICE_ACCOUNT_NAME` unset)."""


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
    peer_port: int = 9444

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

PEER_ROLE = "tensor-fusion-test-peer"
"""The chart's peer-port rule (`rbac.yaml`), for the test namespace's controller account."""
WRITER_ROLE = "tensor-fusion-test-peer-writer"
"""The chart's rule for the agents' metric writes (`rbac-hypervisor.yaml`)."""
AGENT_ACCOUNT = "tensor-fusion-hypervisor-sa"


async def peer_account(kube: AsyncClient, namespace: str, tmp_path: Path) -> Path:
    """The controller's ServiceAccount in `namespace` (`tensor-fusion`, the name the replicas
    expect), allowed the peer port as the chart allows it, and the agents' account its metric
    writes there; a file with a token of the controller's."""
    writes = "/tensor-fusion-peer/v1/influxdb/*"
    roles = {PEER_ROLE: (["/tensor-fusion-peer/api/*", writes], ["get", "post"], ACCOUNT),
             WRITER_ROLE: ([writes], ["post"], AGENT_ACCOUNT)}  # fmt: skip
    await kube.create(ServiceAccount(metadata=ObjectMeta(name=ACCOUNT, namespace=namespace)))
    for role, (urls, verbs, account) in roles.items():
        with contextlib.suppress(ApiError):  # shared by the tests: made once
            rule = PolicyRule(nonResourceURLs=urls, verbs=verbs)
            await kube.create(ClusterRole(metadata=ObjectMeta(name=role), rules=[rule]))
        await kube.create(ClusterRoleBinding(
            metadata=ObjectMeta(name=f"{role}-{namespace}"),
            roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="ClusterRole", name=role),
            subjects=[Subject(kind="ServiceAccount", name=account, namespace=namespace)],
        ))  # fmt: skip
    request = ServiceAccountToken(
        metadata=ObjectMeta(name=ACCOUNT, namespace=namespace),
        spec=TokenRequestSpec(audiences=[], expirationSeconds=7200),
    )
    created = await kube.create(request, name=ACCOUNT, namespace=namespace)
    assert created.status is not None and created.status.token
    path = tmp_path / "controller.token"
    path.write_text(created.status.token)
    return path


@contextlib.asynccontextmanager
async def started_replicas(
    control_plane: ControlPlane, kube: AsyncClient, namespace: str, tmp_path: Path
) -> AsyncIterator[Start]:
    """Starts controller replicas in the test namespace, each on a loopback IP of its own
    (as pods have, with a Pod object reporting it), all with the same API and peer ports,
    `/metrics` on, the testenv's kube-scheduler as the leader's child with the extender on the
    replica's own address, and a token of the controller's account for the peer port; stops
    them afterwards."""
    started: list[Component] = []
    pods: list[asyncio.Task[None]] = []
    api_port, peer_port = free_port(), free_port()
    token = await peer_account(kube, namespace, tmp_path)

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
                 "PORT": str(api_port), "API_BIND_HOST": ip, "PEER_BIND_HOST": ip,
                 "PEER_PORT": str(peer_port), "PEER_TOKEN_FILE": str(token),
                 "WEBHOOK_CERT_EXTRA_HOSTS": ip,
                 "TSDB_EMBEDDED_DIR": str(tmp_path / name / "tsdb"), **(env or {})},
        )  # fmt: skip
        replica.start()
        started.append(replica)
        pod = stand_in_pod(kube, namespace=namespace, name=name, ip=ip, service_account=ACCOUNT)
        pods.append(asyncio.get_running_loop().create_task(pod))
        return Replica(replica, ip, api_port, health_port, metrics_port, peer_port)

    try:
        yield start
    finally:
        for replica in started:
            replica.stop()
        await asyncio.gather(*pods, return_exceptions=True)
        for role in (PEER_ROLE, WRITER_ROLE):
            with contextlib.suppress(ApiError):
                await kube.delete(ClusterRoleBinding, f"{role}-{namespace}")


async def holder(kube: AsyncClient, namespace: str) -> str | None:
    try:
        lease = await kube.get(Lease, LEASE_NAME, namespace=namespace)
    except Exception:
        return None
    return lease.spec.holderIdentity if lease.spec else None

"""Running what the chart installs where there is no kubelet (the chart walkthrough).

`helm upgrade --install` puts the chart's objects into a control plane; their pods never run.
The pieces that play the kubelet for them (`ChartControllers`, `ChartAlertmanagers`,
`AgentRunner`, `ConfigDirectory`) live in `tensorfusion.devenv`, which `tensor-fusion dev up`
runs too; this module adds the tests' own control plane, admin client and simulated GPU nodes.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from lightkube import AsyncClient, KubeConfig

from tensorfusion.devenv.chart_alertmanagers import HEADLESS, ChartAlertmanagers
from tensorfusion.devenv.chart_controllers import ChartControllers, Replica, helm_install, token_of
from tensorfusion.devenv.config_volumes import ConfigDirectory
from tensorfusion.devenv.node_agents import AgentRunner
from tensorfusion.devenv.replica_pods import release_ca_file
from tensorfusion.domain.settings.controller_environment import DEFAULT_WEBHOOK_SECRET

from .chart_render import NAMESPACE
from .controlplane import Binaries, ControlPlane
from .nodes import create_fake_gpu_node

__all__ = [
    "HEADLESS",
    "ChartAlertmanagers",
    "ChartControllers",
    "ConfigDirectory",
    "Replica",
    "admin_client",
    "helm_install",
    "own_control_plane",
    "simulated_gpu_nodes",
    "token_of",
]


@contextlib.contextmanager
def own_control_plane(workdir: Path) -> Iterator[ControlPlane]:
    """A control plane of a test module's own, so that the chart's cluster-wide objects
    (webhook configuration, default pool, priority classes) stay out of the other tests' way."""
    plane = ControlPlane(Binaries.locate(), workdir)
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


@contextlib.asynccontextmanager
async def admin_client(plane: ControlPlane, field_manager: str) -> AsyncIterator[AsyncClient]:
    """An administrator's client of `plane`."""
    client = AsyncClient(KubeConfig.from_file(plane.kubeconfig), field_manager=field_manager)
    try:
        yield client
    finally:
        await client.close()


async def simulated_gpu_nodes(
    plane: ControlPlane, kube: AsyncClient, workdir: Path, write_url: str, count: int = 2
) -> tuple[list[str], AgentRunner]:
    """`count` fake GPU nodes of 2 simulated H100s each, and the runner that starts their
    agents (not yet running) writing metrics to `write_url` with their ServiceAccount token."""
    run = secrets.token_hex(3)
    nodes = [f"gpu-{run}-{i}" for i in range(count)]
    for name in nodes:
        await create_fake_gpu_node(kube, name, gpus=2)

    def sim_file(node: str) -> Path:
        path = workdir / f"{node}.yaml"
        path.write_text("gpus:\n" + "".join(
            f"  - model: NVIDIA H100 80GB HBM3\n    vram: 80Gi\n    uuid: GPU-{node}-{g}\n"
            "    usage: {temperature: 45}\n" for g in range(2)))  # fmt: skip
        return path

    token = workdir / "agent-token"
    token.write_text(await token_of(kube, "tensor-fusion-hypervisor-sa"))
    ca = await release_ca_file(kube, namespace=NAMESPACE, secret=DEFAULT_WEBHOOK_SECRET,
                               path=workdir / "peer-ca.crt")  # fmt: skip
    metrics = {"TF_METRICS_WRITE_URL": write_url, "TF_METRICS_WRITE_TOKEN_FILE": str(token),
               "TF_METRICS_WRITE_CA_FILE": str(ca)}  # fmt: skip
    return nodes, AgentRunner(plane, kube, NAMESPACE, workdir, sim_file, metrics)

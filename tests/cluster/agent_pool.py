"""A pool of one simulated H100 node with its node agent writing metrics every second to a
controller's embedded store, and sealed worker pods on the GPU (the autoscaler's and the
console's cluster tests)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightkube import AsyncClient

from tensorfusion.devenv.replica_pods import release_ca_file
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.settings.controller_environment import (
    DEFAULT_HYPERVISOR_SERVICE_ACCOUNT,
    DEFAULT_WEBHOOK_SECRET,
)

from .conftest import DeleteLater
from .controller_replicas import Replica, Start
from .controlplane import ControlPlane, eventually, free_port
from .nodes import FakeGpuNodes
from .sealed_workers import create_sealed_worker
from .test_controller_process_alerts import service_account_token
from .test_controller_reconcilers import GPU, GPU_NODE, POD, read, status, worker_pod
from .test_node_agent import H100, pool_of_one_node, start_agent

INDEX_BASE = 120


def simulation(gpu: str, workers: list[str]) -> str:
    """The agent's simulated GPU: 10% busy, 4 GiB used; each worker 2% and 2 GiB."""
    used = "".join(f"\n      {w}: {{compute: 2, memoryUsed: 2Gi}}" for w in workers)
    return f"""
gpus:
  - model: {H100}
    vram: 80Gi
    uuid: {gpu}
    usage: {{compute: 10, memoryUsed: 4Gi, temperature: 40}}
    workers:{used}
"""


@dataclass
class Pool:
    """What `agent_pool` made."""

    namespace: str
    gpu: str
    node: str
    pool: str
    controller: Replica
    logs: list[Any]


@asynccontextmanager
async def agent_pool(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: DeleteLater,
    tmp_path: Path,
    workers: dict[str, str],
    *,
    flags: tuple[str, ...] = ("-enable-auto-scale",),
    isolation: str = "shared",
) -> AsyncIterator[Pool]:
    """A leading controller (with `flags`) and a node agent whose one H100 (in `isolation`
    mode) runs `workers` (name -> workload), its metrics every second in the controller's
    store."""
    run, pool, node = await pool_of_one_node(control_plane, kube, fake_gpu_nodes, cluster_objects)
    native = f"GPU-{run}-AS"
    gpu = native.lower()
    cluster_objects(GPU, gpu)
    token_file = tmp_path / "sa-token"
    token_file.write_text(
        await service_account_token(kube, namespace, DEFAULT_HYPERVISOR_SERVICE_ACCOUNT)
    )
    controller = replicas("replica-a", "-leader-elect", "-agent-readiness", "heartbeat", *flags)

    async def gpu_node() -> bool:
        return await read(kube, GPU_NODE, node) is not None

    await eventually(gpu_node, what="the controller's GPUNode", components=[controller.component])
    sim = tmp_path / "gpus.yaml"
    sim.write_text(simulation(native, list(workers)))
    ca = await release_ca_file(kube, namespace=namespace, secret=DEFAULT_WEBHOOK_SECRET,
                               path=tmp_path / "peer-ca.crt")  # fmt: skip
    agent = start_agent(control_plane, tmp_path, node, pool, sim, free_port(),
                        TF_METRICS_INTERVAL="1s", TF_ISOLATION_MODE=isolation,
                        TF_METRICS_WRITE_URL=f"https://{controller.ip}:{controller.peer_port}",
                        TF_METRICS_WRITE_CA_FILE=str(ca),
                        TF_METRICS_WRITE_TOKEN_FILE=str(token_file))  # fmt: skip
    logs = [controller.component, agent]
    try:

        async def gpu_running() -> bool:
            return status(await read(kube, GPU, gpu)).get("phase") == "Running"

        await eventually(gpu_running, what="the GPU Running", components=logs)
        for number, (name, workload) in enumerate(workers.items()):
            # Indices the leader's counter hands out last, so a new pod's never collides.
            pod = worker_pod(name, namespace, pool, node, gpu, index_of=INDEX_BASE + number)
            assert pod.metadata is not None and pod.metadata.labels is not None
            pod.metadata.labels[KEYS.workload] = workload
            await create_sealed_worker(kube, pod)
        yield Pool(namespace, gpu, node, pool, controller, logs)
    finally:
        agent.stop()
        for name in workers:
            await kube.delete(POD, name, namespace=namespace, grace_period=0)

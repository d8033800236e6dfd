"""The node agent as a process on the real control plane, with the simulated provider, next to
a controller in heartbeat mode (no kubelet): it writes the node's GPU objects (capacity from
the catalogue, isolation from its env) and heartbeats, the controller makes them Running,
`kubectl get gpunode,gpu` shows them; a GPU removed from the provider is deleted when idle and
marked Unknown while a worker holds it; a broken provider file stops the agent with one line."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Event
from lightkube.types import PatchType

from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.timestamps import format_rfc3339

from .conftest import DeleteLater
from .controller_replicas import EXECUTABLE, Start, install_crds
from .controlplane import Component, ControlPlane, eventually, free_port
from .nodes import FakeGpuNodes
from .sealed_workers import create_sealed_worker
from .test_controller_reconcilers import GPU, GPU_NODE, POD, POOL, V1, read, status, worker_pod

pytestmark = pytest.mark.cluster

AGENT_IP = "127.0.0.9"
H100 = "NVIDIA H100 80GB HBM3"


def simulation(uuids: list[str]) -> str:
    entries = "".join(f"  - model: {H100}\n    vram: 80Gi\n    uuid: {uuid}\n"
                      "    usage: {temperature: 40}\n" for uuid in uuids)  # fmt: skip
    return f"node:\n  hostRAM: 512Gi\n  dataDisk: 2Ti\ngpus:\n{entries}"


def start_agent(control_plane: ControlPlane, tmp_path: Path, node: str, pool: str,
                sim: Path, port: int, **env: str) -> Component:  # fmt: skip
    agent = Component(
        f"agent-{node}",
        [EXECUTABLE, "hypervisor", "--kubeconfig", str(control_plane.kubeconfig)],
        tmp_path / f"agent-{node}.log",
        env={"GPU_NODE_NAME": node, "TENSOR_FUSION_POOL_NAME": pool, "HYPERVISOR_PORT": str(port),
             "HYPERVISOR_BIND_HOST": AGENT_IP, "TF_SIMULATED_GPUS": str(sim),
             "TF_KUBELET_DEVICE_PLUGIN": "false", "TF_ISOLATION_MODE": "shared", **env},
    )  # fmt: skip
    agent.start()
    return agent


async def http(method: str, url: str) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, timeout=aiohttp.ClientTimeout(10)) as reply,
    ):
        text = await reply.text()
        return reply.status, text


async def pool_of_nodes(
    control_plane: ControlPlane,
    kube: AsyncClient,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: DeleteLater,
    *,
    count: int = 1,
    spec: dict[str, Any] | None = None,
    suffix: str = "pool",
) -> tuple[str, str, list[str]]:
    """(run, pool, nodes): the CRDs, `count` fake GPU nodes labelled `tf-run=<run>` (created one
    by one, so their creation times differ), and a GPUPool selecting them with `spec` added to
    its own; the pool and the nodes' GPUNodes are deleted after the test."""
    await install_crds(control_plane)
    run = secrets.token_hex(3)
    pool = f"tf-{run}-{suffix}"
    nodes = []
    for _ in range(count):
        [node_model] = await fake_gpu_nodes(1, labels={"tf-run": run})
        assert node_model.metadata is not None and node_model.metadata.name
        nodes.append(node_model.metadata.name)
    selector = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "tf-run", "operator": "In", "values": [run]}]}]}  # fmt: skip
    extra = dict(spec or {})
    manager = {"nodeSelector": selector, **extra.pop("nodeManagerConfig", {})}
    await kube.create(POOL({"apiVersion": V1, "kind": "GPUPool", "metadata": {"name": pool},
                            "spec": {"nodeManagerConfig": manager, **extra}}))  # fmt: skip
    cluster_objects(POOL, pool)
    for node in nodes:
        cluster_objects(GPU_NODE, node)
    return run, pool, nodes


async def pool_of_one_node(
    control_plane: ControlPlane,
    kube: AsyncClient,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: DeleteLater,
) -> tuple[str, str, str]:
    """(run, pool, node): `pool_of_nodes` with one node."""
    run, pool, [node] = await pool_of_nodes(control_plane, kube, fake_gpu_nodes, cluster_objects)
    return run, pool, node


async def test_an_agent_with_simulated_gpus_writes_them_and_follows_the_provider(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: DeleteLater,
    tmp_path: Path,
) -> None:
    run, pool, node = await pool_of_one_node(control_plane, kube, fake_gpu_nodes, cluster_objects)
    native = [f"GPU-{run}-{i}-AB" for i in range(3)]
    uuids = [uuid.lower() for uuid in native]
    for name in uuids:
        cluster_objects(GPU, name)
    controller = replicas("replica-a", "-leader-elect", "-agent-readiness", "heartbeat")

    async def gpu_node() -> bool:
        return await read(kube, GPU_NODE, node) is not None

    await eventually(gpu_node, what="the controller's GPUNode", components=[controller.component])
    sim = tmp_path / "gpus.yaml"
    sim.write_text(simulation(native[:2]))
    port = free_port()
    agent = start_agent(control_plane, tmp_path, node, pool, sim, port)
    logs = [controller.component, agent]

    async def running() -> bool:
        gpus = [await read(kube, GPU, name) for name in uuids[:2]]
        phases = [status(g).get("phase") for g in gpus]
        return phases == ["Running", "Running"] and status(
            await read(kube, GPU_NODE, node)).get("phase") == "Running"  # fmt: skip

    await eventually(running, what="the GPUs and the GPUNode Running", components=logs)
    gpu = await read(kube, GPU, uuids[0])
    assert gpu is not None
    assert status(gpu)["capacity"] == {"tflops": "989500m", "vram": "80Gi"}
    assert (status(gpu)["gpuModel"], status(gpu)["isolationMode"]) == (H100, "shared")
    assert gpu["metadata"]["labels"][KEYS.managed_by] == node
    assert gpu["metadata"]["ownerReferences"][0]["kind"] == "GPUNode"
    node_status = status(await read(kube, GPU_NODE, node))
    assert node_status["hypervisorStatus"]["hypervisorState"] == "Running"
    assert node_status["nodeInfo"] == {"ramSize": "512Gi", "dataDiskSize": "2Ti"}
    code, _ = await http("GET", f"http://{AGENT_IP}:{port}/readyz")
    assert code == 200
    shown = await control_plane.kubectl("get", "gpunode,gpu", "-o", "wide")
    assert node in shown and uuids[0] in shown and "Running" in shown

    # A worker holds the second GPU; then both GPUs go from the provider.
    await create_sealed_worker(kube, worker_pod("holder", namespace, pool, node, uuids[1]))

    async def held() -> bool:
        return bool(status(await read(kube, GPU, uuids[1])).get("runningApps"))

    await eventually(held, what="the worker on the second GPU", components=logs)
    sim.write_text(simulation(native[2:]))
    code, body = await http("POST", f"http://{AGENT_IP}:{port}/api/v1/devices/discover")
    assert code == 200, body

    async def followed() -> bool:
        idle = await read(kube, GPU, uuids[0])
        busy = await read(kube, GPU, uuids[1])
        marked = busy is not None and KEYS.gpu_missing_since in (
            busy["metadata"].get("annotations") or {})  # fmt: skip
        return idle is None and marked and status(busy).get("phase") == "Unknown"

    await eventually(followed, what="the idle GPU deleted, the held one Unknown", components=logs)
    await kube.delete(POD, "holder", namespace=namespace, grace_period=0)

    # The agent stops. Its last beat is aged past 90 s (no test waits that long): Stale, with
    # the Warning Event, the GPUNode and its GPU Pending.
    await asyncio.to_thread(agent.stop)
    aged = {"lastHeartbeatTime": format_rfc3339(time.time() - 100)}
    await kube.patch(GPU_NODE.Status, node, {"status": {"hypervisorStatus": aged}},
                     patch_type=PatchType.MERGE)  # fmt: skip

    async def stale() -> bool:
        node_now = status(await read(kube, GPU_NODE, node))
        state = (node_now.get("hypervisorStatus") or {}).get("hypervisorState")
        gpu_now = status(await read(kube, GPU, uuids[2]))
        reason = "HypervisorHeartbeatStale"
        events = [e async for e in kube.list(Event, namespace="default")
                  if e.involvedObject.name == node and e.reason == reason]  # fmt: skip
        return (state, node_now.get("phase"), gpu_now.get("phase"), len(events) == 1
                ) == ("Stale", "Pending", "Pending", True)  # fmt: skip

    await eventually(stale, what="Stale, the Event, the GPUNode and GPU Pending",
                     components=[controller.component])  # fmt: skip


async def test_a_broken_provider_file_stops_the_agent_with_one_line(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    sim = tmp_path / "broken.yaml"
    sim.write_text("gpus:\n  - model: X\n    vram: 80XB\n")
    env = {**os.environ, "GPU_NODE_NAME": "nowhere", "TF_SIMULATED_GPUS": str(sim)}
    done = await asyncio.to_thread(
        subprocess.run, [str(EXECUTABLE), "hypervisor", "--kubeconfig",
                         str(control_plane.kubeconfig)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert f'{sim}: gpus[0].vram: invalid value "80XB": not a quantity' in done.stderr
    assert "Traceback" not in done.stderr

"""Issue 27: the node agent as a process on the real control plane runs the MPS control daemon
(the stand-in `nvidia-cuda-mps-control`) for a hard-isolation node: the GPUNode status and
`/readyz` say Running; a killed daemon is restarted and the restart counted in the status; on
SIGTERM the agent sends `quit` and the daemon is gone. A binary that cannot be found makes the
daemon Failed in the status and the agent unready, naming why."""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import AsyncClient

from tests.standins import install_mps_control

from .conftest import DeleteLater
from .controller_replicas import Start
from .controlplane import Component, ControlPlane, eventually, free_port
from .nodes import FakeGpuNodes
from .test_controller_reconcilers import GPU, GPU_NODE, read, status
from .test_node_agent import AGENT_IP, http, pool_of_one_node, simulation, start_agent

pytestmark = pytest.mark.cluster


@pytest.fixture
def mps_root() -> Iterator[Path]:
    # Short: the stand-in daemon's Unix socket path must fit in 107 bytes.
    with tempfile.TemporaryDirectory(prefix="mps") as name:
        yield Path(name)


def _commands(root: Path) -> list[str]:
    path = root / "mps" / "log" / "control.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return [line.removeprefix("command: ") for line in lines if line.startswith("command: ")]


async def _mps(kube: AsyncClient, node: str) -> dict[str, Any]:
    return dict((status(await read(kube, GPU_NODE, node)).get("hypervisorStatus") or {}).get(
        "mps") or {})  # fmt: skip


async def _agent(
    control_plane: ControlPlane,
    kube: AsyncClient,
    replicas: Start,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: DeleteLater,
    tmp_path: Path,
    **env: str,
) -> tuple[str, int, Component, list[Component]]:
    """(node, port, agent, logs): one GPU node of a fresh pool, its controller (heartbeat mode)
    and an agent with one simulated GPU and `env`."""
    run, pool, node = await pool_of_one_node(control_plane, kube, fake_gpu_nodes, cluster_objects)
    native = [f"GPU-{run}-0-MP"]
    cluster_objects(GPU, native[0].lower())
    controller = replicas("replica-a", "-leader-elect", "-agent-readiness", "heartbeat")

    async def gpu_node() -> bool:
        return await read(kube, GPU_NODE, node) is not None

    await eventually(gpu_node, what="the controller's GPUNode", components=[controller.component])
    sim = tmp_path / "gpus.yaml"
    sim.write_text(simulation(native))
    port = free_port()
    agent = start_agent(control_plane, tmp_path, node, pool, sim, port, TF_MPS="on",
                        TF_HEARTBEAT_INTERVAL="1s", **env)  # fmt: skip
    return node, port, agent, [controller.component, agent]


async def test_the_agent_runs_restarts_reports_and_quits_the_mps_daemon(
    control_plane: ControlPlane,
    kube: AsyncClient,
    replicas: Start,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: DeleteLater,
    mps_root: Path,
    tmp_path: Path,
) -> None:
    binary = install_mps_control(mps_root / "bin")
    node, port, agent, logs = await _agent(
        control_plane, kube, replicas, fake_gpu_nodes, cluster_objects, tmp_path,
        TF_ISOLATION_MODE="hard", TF_MPS_CONTROL=str(binary), TF_MPS_DIR=str(mps_root / "mps"),
        TF_MPS_SHM_DIR=str(mps_root / "shm"),
    )  # fmt: skip

    async def running() -> bool:
        return (await _mps(kube, node)).get("state") == "Running"

    await eventually(running, what="the MPS daemon Running in the GPUNode status", components=logs)
    assert (await _mps(kube, node))["restarts"] == 0
    assert "get_server_list" in _commands(mps_root)
    code, body = await http("GET", f"http://{AGENT_IP}:{port}/readyz")
    assert code == 200, body

    pid_file = mps_root / "mps" / "pipe" / "nvidia-cuda-mps-control.pid"
    os.kill(int(pid_file.read_text()), signal.SIGKILL)

    async def restarted() -> bool:
        mps = await _mps(kube, node)
        return mps.get("state") == "Running" and mps.get("restarts") == 1

    await eventually(restarted, what="the daemon restarted and counted", components=logs)

    await asyncio.to_thread(agent.stop)
    assert _commands(mps_root)[-1] == "quit"
    assert not pid_file.exists()
    log = agent.log_path.read_text()
    assert "MPS control daemon quit" in log and "Traceback" not in log


async def test_a_daemon_that_cannot_start_is_failed_and_the_agent_unready(
    control_plane: ControlPlane,
    kube: AsyncClient,
    replicas: Start,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: DeleteLater,
    mps_root: Path,
    tmp_path: Path,
) -> None:
    node, port, agent, logs = await _agent(
        control_plane, kube, replicas, fake_gpu_nodes, cluster_objects, tmp_path,
        TF_ISOLATION_MODE="soft", TF_MPS_CONTROL=str(mps_root / "no-such-binary"),
        TF_MPS_DIR=str(mps_root / "mps"),
    )  # fmt: skip

    async def failed() -> bool:
        mps = await _mps(kube, node)
        return mps.get("state") == "Failed" and "not found" in mps.get("message", "")

    await eventually(failed, what="the MPS daemon Failed in the GPUNode status", components=logs)
    code, body = await http("GET", f"http://{AGENT_IP}:{port}/readyz")
    assert code == 503 and "MPS control daemon Failed" in body, body
    await asyncio.to_thread(agent.stop)
    assert "Traceback" not in agent.log_path.read_text()

"""The node agent over an in-memory API: discovery writes the GPU objects and the GPUNode status,
a vanished idle GPU is deleted and an allocated one marked Unknown, an unknown model warns once,
a failing provider makes the agent Degraded without losing its objects, and nothing is written
before the GPUNode exists."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.devices.inventory import (
    DeviceInfo,
    DeviceSample,
    HostFacts,
    Inventory,
    ProviderError,
)
from tensorfusion.hypervisor.agent import NodeAgent
from tensorfusion.hypervisor.agent_http import create_agent_app
from tensorfusion.hypervisor.object_sync import GPUObjectSync, ModelFacts

from ..controller.reconciler_fakes import FakeApi, FakeRecorder

GIB = 1 << 30


class Provider:
    name = "simulated:test"

    def __init__(self, *devices: DeviceInfo) -> None:
        self.devices = list(devices)
        self.error: str | None = None

    def discover(self) -> Inventory:
        if self.error:
            raise ProviderError(self.error)
        return Inventory(tuple(self.devices), HostFacts(64 * GIB, 512 * GIB))

    def sample(self, now_s: float) -> tuple[DeviceSample, ...]:
        return ()


def device(index: int, model: str = "NVIDIA A100-SXM4-80GB") -> DeviceInfo:
    return DeviceInfo(uuid=f"GPU-{index}", index=index, model=model, vendor="NVIDIA",
                      vram_bytes=80 * GIB)  # fmt: skip


def models(device: DeviceInfo) -> ModelFacts:
    if "A100" in device.model:
        return ModelFacts(312_000, "A100")
    return ModelFacts(0, device.model, f"GPU model {device.model!r} is not known: 0 TFLOPS")


class World:
    def __init__(self, *devices: DeviceInfo, gpu_node: bool = True) -> None:
        self.api = FakeApi()
        if gpu_node:
            self.api.put({"apiVersion": "tensor-fusion.ai/v1", "kind": "GPUNode",
                          "metadata": {"name": "gpu-1"}})  # fmt: skip
        self.provider = Provider(*devices)
        self.recorder = FakeRecorder()

        async def managed(node: str) -> dict[str, dict[str, Any]]:
            return {name: obj for (kind, _, name), obj in self.api.objects.items()
                    if kind == "GPU"
                    and obj["metadata"].get("labels", {}).get(KEYS.managed_by) == node}  # fmt: skip

        sync = GPUObjectSync(objects=self.api, managed_gpus=managed, events=self.recorder,
                             node="gpu-1", pool="shared", isolation_policy="Static",
                             isolation_mode="soft", models=models, version="0.1",
                             clock=lambda: 1_800_000_000.0)  # fmt: skip
        self.agent = NodeAgent(provider=self.provider, sync=sync, discovery_interval_s=600,
                               heartbeat_interval_s=30, clock=lambda: 0.0)  # fmt: skip

    def gpu(self, name: str) -> dict[str, Any]:
        return self.api.obj("GPU", name)

    def node_status(self) -> dict[str, Any]:
        status: dict[str, Any] = self.api.obj("GPUNode", "gpu-1").get("status") or {}
        return status


async def test_a_discovery_writes_the_gpus_and_the_gpu_node() -> None:
    world = World(device(0), device(1))
    assert await world.agent.discover()
    assert world.agent.ready and world.agent.state == "Running"
    gpu = world.gpu("gpu-0")
    assert gpu["metadata"]["labels"][KEYS.managed_by] == "gpu-1"
    assert gpu["metadata"]["ownerReferences"][0]["name"] == "gpu-1"
    assert gpu["status"]["capacity"] == {"tflops": "312", "vram": "80Gi"}
    assert (gpu["status"]["phase"], gpu["status"]["usedBy"]) == ("Pending", "tensor-fusion")
    status = world.node_status()
    assert (status["totalGPUs"], status["totalTFlops"], status["totalVRAM"]) == (2, "624", "160Gi")
    assert status["hypervisorStatus"]["hypervisorState"] == "Running"
    assert world.recorder.events == []


async def test_vanished_gpus_are_deleted_when_idle_and_marked_unknown_when_allocated() -> None:
    world = World(device(0), device(1))
    await world.agent.discover()
    gpu = world.gpu("gpu-1")
    gpu["status"]["runningApps"] = [{"name": "train", "namespace": "ml"}]
    world.api.put(gpu)
    world.provider.devices = []
    assert await world.agent.discover()
    assert not world.api.has("GPU", "gpu-0")
    kept = world.gpu("gpu-1")
    assert kept["status"]["phase"] == "Unknown"
    assert KEYS.gpu_missing_since in kept["metadata"]["annotations"]
    assert world.node_status()["totalGPUs"] == 0


async def test_an_unknown_model_has_zero_tflops_and_one_warning() -> None:
    world = World(device(0, model="Mystery GPU 9000"))
    await world.agent.discover()
    await world.agent.discover()
    assert world.gpu("gpu-0")["status"]["capacity"]["tflops"] == "0"
    assert world.recorder.reasons() == ["UnknownGPUModel"]


async def test_a_failing_provider_is_degraded_and_keeps_the_objects() -> None:
    world = World(device(0))
    await world.agent.discover()
    world.provider.error = "NVML is not available on this node: libnvidia-ml.so.1 not found"
    assert not await world.agent.discover()
    assert world.agent.state == "Degraded"
    assert world.api.has("GPU", "gpu-0")
    assert any("libnvidia-ml" in p for p in world.agent.problems())


async def test_nothing_is_written_before_the_gpu_node_exists() -> None:
    world = World(device(0), gpu_node=False)
    assert not await world.agent.discover()
    assert not world.agent.ready and world.api.writes() == []
    assert "GPUNode gpu-1 does not exist yet" in world.agent.problems()[-1]


async def test_readyz_waits_for_the_first_discovery() -> None:
    world = World(device(0))
    async with TestClient(TestServer(create_agent_app(world.agent))) as client:
        await http_checks(client)


async def http_checks(client: TestClient[web.Request, web.Application]) -> None:
    assert (await client.get("/healthz")).status == 200
    not_ready = await client.get("/readyz")
    assert not_ready.status == 503 and "no discovery written yet" in await not_ready.text()
    found = await client.post("/api/v1/devices/discover")
    assert found.status == 200 and (await found.json())["gpus"] == ["gpu-0"]
    assert (await client.get("/readyz")).status == 200


async def test_a_heartbeat_is_one_patch() -> None:
    world = World(device(0))
    await world.agent.discover()
    inventory = world.agent.inventory
    assert inventory is not None
    before = len(world.api.calls)
    await world.agent._sync.heartbeat(inventory, state="Running")
    assert [c.op for c in world.api.calls[before:]] == ["patch"]

"""The index-resource device plugins against a loopback fake of the kubelet (deployment.md §9.7)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import grpc.aio
import pytest

from tensorfusion.adapters.kubelet import rpc
from tensorfusion.adapters.kubelet.device_plugin import (
    AllocateAnswer,
    AllocationRefusedError,
    IndexDevicePlugins,
    endpoint_name,
)
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.devices.kubelet_messages import (
    API_VERSION,
    HEALTHY,
    UNHEALTHY,
    AllocateRequest,
    ContainerAllocateRequest,
    ContainerPreferredAllocationRequest,
    DevicePluginOptions,
    Empty,
    ListAndWatchResponse,
    PreferredAllocationRequest,
    PreferredAllocationResponse,
)

from .kubelet_fakes import FakeKubelet, allocate, eventually, first_device_list

INDEX_3 = "tensor-fusion.ai/index_3"


class Allocations:
    """The agent's allocate callback: records calls, answers with the GPUs of `gpu-ids`."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.fail_with: Exception | None = None

    async def __call__(self, resource_name: str, device_ids: tuple[str, ...]) -> AllocateAnswer:
        self.calls.append((resource_name, device_ids))
        if self.fail_with is not None:
            raise self.fail_with
        return AllocateAnswer(
            envs={"NVIDIA_VISIBLE_DEVICES": f"gpu-{len(device_ids)}"},
            annotations={"tensor-fusion.ai/index": str(len(device_ids))},
        )


@pytest.fixture
def allocations() -> Allocations:
    return Allocations()


@pytest.fixture
async def plugins(socket_dir: Path, allocations: Allocations) -> AsyncIterator[IndexDevicePlugins]:
    plugins = IndexDevicePlugins(
        allocations,
        plugin_dir=socket_dir,
        poll_interval=0.02,
        backoff_initial=0.02,
        backoff_max=0.1,
        register_timeout=2.0,
    )
    yield plugins
    await plugins.stop()


@pytest.fixture
async def kubelet(socket_dir: Path) -> AsyncIterator[FakeKubelet]:
    fake = await FakeKubelet(socket_dir / "kubelet.sock").start()
    yield fake
    await fake.stop()


async def registered(plugins: IndexDevicePlugins) -> None:
    await plugins.start()
    await asyncio.wait_for(plugins.wait_registered(), 10.0)


async def test_every_index_resource_is_registered_on_its_own_endpoint(
    plugins: IndexDevicePlugins, kubelet: FakeKubelet, socket_dir: Path
) -> None:
    await registered(plugins)

    assert kubelet.resource_names == list(KEYS.index_resource_names)
    assert len(kubelet.requests) == 16
    endpoints = {request.endpoint for request in kubelet.requests}
    assert len(endpoints) == 16
    for request in kubelet.requests:
        assert request.version == API_VERSION
        assert request.endpoint == endpoint_name(request.resource_name)
        assert (socket_dir / request.endpoint).is_socket()
        assert request.options == DevicePluginOptions()
    assert plugins.registered
    assert plugins.registrations == 1


async def test_list_and_watch_sends_36_healthy_devices_and_keeps_the_stream_open(
    plugins: IndexDevicePlugins, kubelet: FakeKubelet, socket_dir: Path
) -> None:
    await registered(plugins)
    async with rpc.unix_channel(str(socket_dir / endpoint_name(INDEX_3))) as channel:
        call = rpc.call_unary_stream(
            channel, rpc.DEVICE_PLUGIN_SERVICE, rpc.LIST_AND_WATCH, Empty(), ListAndWatchResponse
        )
        first = await asyncio.wait_for(call.read(), 5.0)
        assert len(first.devices) == 36
        assert len({device.id for device in first.devices}) == 36
        assert {device.health for device in first.devices} == {HEALTHY}
        assert first.devices[0].id == "index_3-1"

        await plugins.set_healthy(False)  # the open stream sends the new list
        second = await asyncio.wait_for(call.read(), 5.0)
        assert [d.id for d in second.devices] == [d.id for d in first.devices]
        assert {device.health for device in second.devices} == {UNHEALTHY}
        call.cancel()


async def test_allocate_calls_the_agent_and_returns_its_envs_per_container(
    plugins: IndexDevicePlugins, kubelet: FakeKubelet, socket_dir: Path, allocations: Allocations
) -> None:
    await registered(plugins)
    request = AllocateRequest(
        (
            ContainerAllocateRequest(("index_3-4", "index_3-9", "index_3-1")),
            ContainerAllocateRequest(("index_3-2",)),
        )
    )

    response = await allocate(socket_dir / endpoint_name(INDEX_3), request)

    assert allocations.calls == [
        (INDEX_3, ("index_3-4", "index_3-9", "index_3-1")),
        (INDEX_3, ("index_3-2",)),
    ]
    assert [dict(c.envs) for c in response.container_responses] == [
        {"NVIDIA_VISIBLE_DEVICES": "gpu-3"},
        {"NVIDIA_VISIBLE_DEVICES": "gpu-1"},
    ]
    assert dict(response.container_responses[0].annotations) == {"tensor-fusion.ai/index": "3"}


@pytest.mark.parametrize(
    ("failure", "device_id", "code"),
    [
        (
            AllocationRefusedError("no pending pod with index 28"),
            "index_3-1",
            "FAILED_PRECONDITION",
        ),
        (RuntimeError("boom"), "index_3-1", "INTERNAL"),
        (None, "index_3-37", "INVALID_ARGUMENT"),  # not an advertised device
    ],
)
async def test_a_failed_allocation_is_a_grpc_error_and_the_plugin_keeps_serving(
    plugins: IndexDevicePlugins,
    kubelet: FakeKubelet,
    socket_dir: Path,
    allocations: Allocations,
    failure: Exception | None,
    device_id: str,
    code: str,
) -> None:
    await registered(plugins)
    allocations.fail_with = failure
    socket = socket_dir / endpoint_name(INDEX_3)

    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await allocate(socket, AllocateRequest((ContainerAllocateRequest((device_id,)),)))
    assert raised.value.code().name == code

    allocations.fail_with = None
    response = await allocate(socket, AllocateRequest((ContainerAllocateRequest(("index_3-5",)),)))
    assert dict(response.container_responses[0].envs) == {"NVIDIA_VISIBLE_DEVICES": "gpu-1"}


async def test_preferred_allocation_keeps_required_devices_first(
    plugins: IndexDevicePlugins, kubelet: FakeKubelet, socket_dir: Path
) -> None:
    await registered(plugins)
    request = PreferredAllocationRequest(
        (ContainerPreferredAllocationRequest(("a", "b", "c", "d"), ("c",), 3),)
    )
    async with rpc.unix_channel(str(socket_dir / endpoint_name(INDEX_3))) as channel:
        response = await rpc.call_unary(
            channel,
            rpc.DEVICE_PLUGIN_SERVICE,
            rpc.GET_PREFERRED_ALLOCATION,
            request,
            PreferredAllocationResponse,
            5.0,
        )
    assert response.container_responses[0].device_ids == ("c", "a", "b")


async def test_registration_is_retried_until_the_kubelet_is_up(
    plugins: IndexDevicePlugins, socket_dir: Path
) -> None:
    await plugins.start()
    await eventually(lambda: plugins.last_error is not None, "a failed registration attempt")
    assert "kubelet socket missing" in (plugins.last_error or "")
    assert not plugins.registered

    kubelet = await FakeKubelet(socket_dir / "kubelet.sock").start()
    try:
        await asyncio.wait_for(plugins.wait_registered(), 10.0)
        assert kubelet.resource_names == list(KEYS.index_resource_names)
        assert plugins.last_error is None
    finally:
        await kubelet.stop()


async def test_a_rejected_registration_is_retried(
    plugins: IndexDevicePlugins, socket_dir: Path
) -> None:
    kubelet = await FakeKubelet(socket_dir / "kubelet.sock", reject_first=3).start()
    try:
        await registered(plugins)
        assert kubelet.rejected == 3
        assert set(kubelet.resource_names) == set(KEYS.index_resource_names)
    finally:
        await kubelet.stop()


async def test_a_restarted_kubelet_gets_every_resource_registered_again(
    plugins: IndexDevicePlugins, kubelet: FakeKubelet, socket_dir: Path
) -> None:
    await registered(plugins)
    await kubelet.stop()  # the kubelet restarts: its socket is removed and created anew
    restarted = await FakeKubelet(socket_dir / "kubelet.sock").start()
    try:
        await eventually(lambda: len(restarted.requests) == 16, "registration with the new kubelet")
        assert restarted.resource_names == list(KEYS.index_resource_names)
        assert len(kubelet.requests) == 16  # the old one saw only the first round
        await eventually(lambda: plugins.registered, "registered state")
        assert plugins.registrations == 2
    finally:
        await restarted.stop()


async def test_a_removed_plugin_socket_is_rebound_and_registered_again(
    plugins: IndexDevicePlugins, kubelet: FakeKubelet, socket_dir: Path
) -> None:
    await registered(plugins)
    socket = socket_dir / endpoint_name(INDEX_3)
    os.unlink(socket)  # a restarting kubelet empties the device-plugins directory

    await eventually(lambda: len(kubelet.requests) == 32, "the second registration round")
    assert socket.is_socket()
    devices = await first_device_list(socket)
    assert len(devices.devices) == 36


async def test_stop_removes_every_plugin_socket(
    plugins: IndexDevicePlugins, kubelet: FakeKubelet, socket_dir: Path
) -> None:
    await registered(plugins)
    assert len(list(socket_dir.glob("tensor-fusion.ai-index_*.sock"))) == 16

    await plugins.stop()

    assert list(socket_dir.glob("tensor-fusion.ai-index_*.sock")) == []
    assert not plugins.registered


async def test_a_stale_socket_file_from_a_previous_agent_is_replaced(
    plugins: IndexDevicePlugins, kubelet: FakeKubelet, socket_dir: Path
) -> None:
    stale = socket_dir / endpoint_name(INDEX_3)
    stale.write_text("left over")

    await registered(plugins)

    assert stale.is_socket()
    assert len((await first_device_list(stale)).devices) == 36

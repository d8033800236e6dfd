"""Issue 22 finding 7: the device plugin gives a worker's GPUs only for an allocation the leader
committed (GPU `status.runningApps` lists the pod), through the real gRPC Allocate path."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import grpc.aio
import pytest

from tensorfusion.adapters.kube.events import InvolvedObject
from tensorfusion.adapters.kubelet.device_plugin import IndexDevicePlugins, endpoint_name
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.devices.committed_allocation import running_pod_uids, uncommitted_gpus
from tensorfusion.domain.devices.kubelet_messages import AllocateRequest, ContainerAllocateRequest
from tensorfusion.hypervisor.worker_devices import AMBIGUOUS_INDEX, UNCOMMITTED, WorkerDevices

from ..unit.kubelet.kubelet_fakes import FakeKubelet, allocate

INDEX_0 = "tensor-fusion.ai/index_0"
NODE = "node-a"
GPU = "gpu-0a"
UUID = "GPU-0A"


def pod(name: str, uid: str, *, gpus: str = GPU, phase: str = "Pending") -> dict[str, Any]:
    """A pod bound to NODE with index 3 (`index_0: 3`) naming `gpus` in `gpu-ids`."""
    limits = {INDEX_0: "3"}
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": uid,
                     "annotations": {KEYS.gpu_ids: gpus}},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "resources": {"limits": limits}}]},
        "status": {"phase": phase},
    }  # fmt: skip


def gpu_listing(*uids: str) -> dict[str, Any]:
    """The GPU object as the leader's status write-back leaves it."""
    pods = [{"name": f"p-{uid}", "namespace": "ns", "uid": uid} for uid in uids]
    apps = [{"namespace": "ns", "count": len(pods), "pods": pods}] if pods else None
    return {"metadata": {"name": GPU}, "status": {"runningApps": apps}}


class Events:
    def __init__(self) -> None:
        self.recorded: list[tuple[InvolvedObject, str, str]] = []

    async def record(
        self,
        involved: InvolvedObject,
        type_: Literal["Normal", "Warning"],
        reason: str,
        message: str,
    ) -> None:
        self.recorded.append((involved, reason, message))


class Cluster:
    """The node's pods and GPU objects; `gpu_reads` answers the n-th read (the last repeats)."""

    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []
        self.gpu_reads: list[Mapping[str, Any] | Exception] = [gpu_listing()]
        self.reads = 0
        self.now = 0.0

    async def gpu_objects(self, node: str) -> dict[str, dict[str, Any]]:
        assert node == NODE
        answer = self.gpu_reads[min(self.reads, len(self.gpu_reads) - 1)]
        self.reads += 1
        if isinstance(answer, Exception):
            raise answer
        return {GPU: dict(answer)}

    async def sleep(self, seconds: float) -> None:
        self.now += seconds  # virtual time: the poll never waits for real


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tfd-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


@pytest.fixture
def events() -> Events:
    return Events()


@pytest.fixture
async def plugin_socket(socket_dir: Path, cluster: Cluster, events: Events) -> AsyncIterator[Path]:
    workers = WorkerDevices(node=NODE, pods=lambda: cluster.pods,
                            native_uuids=lambda: {GPU: UUID}, gpu_objects=cluster.gpu_objects,
                            events=events, commit_wait_s=5.0, poll_s=0.5,
                            clock=lambda: cluster.now, sleep=cluster.sleep)  # fmt: skip
    kubelet = await FakeKubelet(socket_dir / "kubelet.sock").start()
    plugins = IndexDevicePlugins(workers.allocate, plugin_dir=socket_dir, poll_interval=0.02,
                                 backoff_initial=0.02, resource_names=(INDEX_0,))  # fmt: skip
    await plugins.start()
    await plugins.wait_registered()
    yield socket_dir / endpoint_name(INDEX_0)
    await plugins.stop()
    await kubelet.stop()


async def allocate_three(socket: Path) -> Mapping[str, str]:
    """The kubelet's Allocate of 3 devices of `index_0` (pod index 3)."""
    request = AllocateRequest((ContainerAllocateRequest(("index_0-1", "index_0-2", "index_0-3")),))
    response = await allocate(socket, request)
    return dict(response.container_responses[0].envs)


async def test_a_pod_naming_gpus_the_leader_never_gave_it_is_refused_with_an_event(
    plugin_socket: Path, cluster: Cluster, events: Events
) -> None:
    cluster.pods = [pod("squatter", "uid-evil")]
    cluster.gpu_reads = [gpu_listing("uid-someone-else")]

    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await allocate_three(plugin_socket)

    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "no allocation committed by the leader" in (raised.value.details() or "")
    [(involved, reason, message)] = events.recorded
    assert (involved.kind, involved.namespace, involved.name, involved.uid, reason) == (
        "Pod", "ns", "squatter", "uid-evil", UNCOMMITTED)  # fmt: skip
    assert GPU in message
    assert cluster.reads > 1, "a miss is read again before the refusal"


async def test_a_committed_allocation_gets_its_devices(
    plugin_socket: Path, cluster: Cluster, events: Events
) -> None:
    cluster.pods = [pod("worker", "uid-1")]
    cluster.gpu_reads = [gpu_listing("uid-1")]

    assert await allocate_three(plugin_socket) == {"NVIDIA_VISIBLE_DEVICES": UUID}
    assert events.recorded == []


async def test_a_status_write_back_landing_after_the_pod_patch_is_waited_for(
    plugin_socket: Path, cluster: Cluster, events: Events
) -> None:
    cluster.pods = [pod("worker", "uid-1")]
    cluster.gpu_reads = [gpu_listing(), RuntimeError("API server busy"), gpu_listing("uid-1")]

    assert await allocate_three(plugin_socket) == {"NVIDIA_VISIBLE_DEVICES": UUID}
    assert cluster.reads == 3 and events.recorded == []


async def test_two_pending_pods_with_the_same_index_are_refused(
    plugin_socket: Path, cluster: Cluster, events: Events
) -> None:
    cluster.pods = [pod("worker", "uid-1"), pod("squatter", "uid-evil")]
    cluster.gpu_reads = [gpu_listing("uid-1")]

    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await allocate_three(plugin_socket)

    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert [reason for _, reason, _ in events.recorded] == [AMBIGUOUS_INDEX]


@pytest.mark.parametrize(
    "status",
    [None, "x", {"runningApps": "x"}, {"runningApps": [1, {"pods": "x"}, {"pods": [{"uid": 5}]}]}],
)
def test_a_malformed_gpu_status_commits_nothing(status: Any) -> None:
    gpu = {"metadata": {"name": GPU}, "status": status}
    assert running_pod_uids(gpu) == frozenset()
    assert uncommitted_gpus("uid-1", (GPU,), {GPU: gpu}) == (GPU,)
    assert uncommitted_gpus("", (GPU,), {GPU: gpu_listing("")}) == (GPU,)

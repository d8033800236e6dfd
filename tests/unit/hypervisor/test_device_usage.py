"""The agent's device-plugin coexistence loop over an in-memory API: GPUs other device plugins
hold get their usedBy and `tensor-fusion` again on release, the checkpoint file answers when the
pod-resources socket is missing, a failing patch is retried then reported, nothing happens when
`DETECT_IN_USED_GPUS` is off, and the loop polls every 30 s and re-syncs every 120 s ±15%."""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tensorfusion.adapters.kube.object_client import KubeError
from tensorfusion.adapters.kubelet.pod_resources import (
    SOURCE_CHECKPOINT,
    SOURCE_POD_RESOURCES,
    DeviceAssignments,
    read_device_assignments,
)
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.devices.device_plugin_usage import CheckpointError, DeviceAssignment
from tensorfusion.domain.devices.kubelet_messages import (
    ContainerDevices,
    ContainerResources,
    KubeletPodResources,
    ListPodResourcesResponse,
)
from tensorfusion.hypervisor.device_usage import (
    DeviceUsageLoop,
    FileStamp,
    file_stamp,
    kubelet_reader,
)

from ..controller.reconciler_fakes import FakeApi
from ..kubelet.kubelet_fakes import FakePodResourcesLister

UUID_A = "GPU-0AA1B2C3-D4E5-F6A7-B8C9-D0E1F2A3B4C5"
UUID_B = "GPU-1BB1B2C3-D4E5-F6A7-B8C9-D0E1F2A3B4C5"
GPU_A, GPU_B = UUID_A.lower(), UUID_B.lower()
HAMI_ID = f"{UUID_B}-hami-vgpu-0"  # over 40 characters: a third party's


class StopError(Exception):
    """Ends `run()` from the fake sleep."""


def held(*device_ids: str, resource: str = "nvidia.com/gpu") -> DeviceAssignments:
    return DeviceAssignments(
        SOURCE_POD_RESOURCES, (DeviceAssignment("ml/train", "main", resource, device_ids),)
    )


class World:
    """Two GPUs of node gpu-1 and one of gpu-2 in a FakeApi; a fake kubelet, clock and sleep."""

    def __init__(self, *, enabled: bool = True, rand: float = 0.5, **options: Any) -> None:
        self.api = FakeApi()
        for name, node in ((GPU_A, "gpu-1"), (GPU_B, "gpu-1"), ("gpu-other", "gpu-2")):
            self.api.put({"apiVersion": "tensor-fusion.ai/v1", "kind": "GPU",
                          "metadata": {"name": name, "labels": {KEYS.managed_by: node}},
                          "status": {"usedBy": "tensor-fusion"}})  # fmt: skip
        self.assignments = held()
        self.read_error: Exception | None = None
        self.reads = 0
        self.stamp: FileStamp = (1, 1, 1)
        self.now = 0.0
        self.sleeps: list[float] = []
        self.max_sleeps = 100
        self.loop = DeviceUsageLoop(
            node="gpu-1", enabled=enabled, objects=self.api, managed_gpus=self.managed,
            read_assignments=options.pop("read_assignments", self.read),
            checkpoint_stamp=lambda: self.stamp, clock=lambda: self.now, sleep=self.sleep,
            rand=lambda: rand, **options,
        )  # fmt: skip

    async def managed(self, node: str) -> dict[str, dict[str, Any]]:
        gpus = {name: obj for (kind, _, name), obj in self.api.objects.items() if kind == "GPU"}
        return {name: obj for name, obj in gpus.items()
                if obj["metadata"]["labels"][KEYS.managed_by] == node}  # fmt: skip

    async def read(self) -> DeviceAssignments:
        self.reads += 1
        if self.read_error is not None:
            raise self.read_error
        return self.assignments

    async def sleep(self, seconds: float) -> None:
        if len(self.sleeps) >= self.max_sleeps:
            raise StopError
        self.sleeps.append(seconds)
        self.now += seconds

    def used_by(self, name: str) -> str:
        return str(self.api.obj("GPU", name)["status"]["usedBy"])

    def patched(self) -> list[tuple[str, Any]]:
        return [(c.name, c.body) for c in self.api.writes("patch", "GPU") if c.status]


async def test_gpus_the_nvidia_plugin_holds_are_marked_and_the_others_left_alone() -> None:
    world = World()
    world.assignments = DeviceAssignments(SOURCE_POD_RESOURCES, (
        DeviceAssignment("ml/train", "main", "nvidia.com/gpu", (UUID_A,)),
        DeviceAssignment("ml/tf", "main", "tensor-fusion.ai/index_0", ("index_0-1",)),
    ))  # fmt: skip
    report = await world.loop.sync_once()
    assert report.complete and report.source == SOURCE_POD_RESOURCES
    assert (world.used_by(GPU_A), world.used_by(GPU_B)) == ("nvidia-device-plugin", "tensor-fusion")
    assert world.patched() == [(GPU_A, {"status": {"usedBy": "nvidia-device-plugin"}})]
    assert world.used_by("gpu-other") == "tensor-fusion"
    await world.loop.sync_once()
    assert len(world.patched()) == 1  # nothing changed: nothing written
    assert world.loop.problems() == [] and world.loop.stats.patches == 1


async def test_a_long_hami_style_id_is_a_third_party_plugin() -> None:
    world = World()
    world.assignments = held(HAMI_ID)
    await world.loop.sync_once()
    assert world.used_by(GPU_B) == "3rd-party-device-plugin"
    assert world.used_by(GPU_A) == "tensor-fusion"


async def test_released_gpus_go_back_to_tensor_fusion() -> None:
    world = World()
    world.assignments = held(UUID_A, HAMI_ID)
    await world.loop.sync_once()
    assert (world.used_by(GPU_A), world.used_by(GPU_B)) == (
        "nvidia-device-plugin", "3rd-party-device-plugin")  # fmt: skip
    world.assignments = held()
    report = await world.loop.sync_once()
    assert report.patched == {GPU_A: "tensor-fusion", GPU_B: "tensor-fusion"}
    assert (world.used_by(GPU_A), world.used_by(GPU_B)) == ("tensor-fusion", "tensor-fusion")


async def test_configured_prefixes_and_mig_parents_are_passed_to_the_rules() -> None:
    world = World(extra_resource_prefixes=("example.com/vgpu",),
                  mig_parents=lambda: {"MIG-7f2c": UUID_B})  # fmt: skip
    world.assignments = DeviceAssignments(SOURCE_POD_RESOURCES, (
        DeviceAssignment("ml/a", "main", "example.com/vgpu", (UUID_A,)),
        DeviceAssignment("ml/b", "main", "nvidia.com/mig-1g.10gb", ("MIG-7f2c",)),
    ))  # fmt: skip
    await world.loop.sync_once()
    assert (world.used_by(GPU_A), world.used_by(GPU_B)) == (
        "nvidia-device-plugin", "nvidia-device-plugin")  # fmt: skip


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """Under /tmp: pytest's tmp_path can exceed the 107-byte unix socket path limit."""
    path = Path(tempfile.mkdtemp(prefix="tfu-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def write_checkpoint(path: Path, *device_ids: str) -> None:
    entry = {"PodUID": "uid-1", "ContainerName": "main", "ResourceName": "nvidia.com/gpu",
             "DeviceIDs": {"0": list(device_ids)}}  # fmt: skip
    path.write_text(json.dumps({"Data": {"PodDeviceEntries": [entry]}, "Checksum": 1}))


async def test_the_checkpoint_file_answers_when_the_socket_is_missing(short_dir: Path) -> None:
    checkpoint = short_dir / "kubelet_internal_checkpoint"
    write_checkpoint(checkpoint, UUID_B)
    reader = kubelet_reader(short_dir / "missing.sock", checkpoint, timeout=2.0)
    world = World(read_assignments=reader)
    report = await world.loop.sync_once()
    assert report.source == SOURCE_CHECKPOINT
    assert (world.used_by(GPU_A), world.used_by(GPU_B)) == ("tensor-fusion", "nvidia-device-plugin")
    checkpoint.write_text("{not json")
    report = await world.loop.sync_once()
    assert not report.complete and world.loop.stats.read_failures == 1
    assert "kubelet_internal_checkpoint: not JSON" in world.loop.problems()[0]
    assert world.used_by(GPU_B) == "nvidia-device-plugin"  # unknown is not "released"


async def test_the_pod_resources_api_answers_first(short_dir: Path) -> None:
    response = ListPodResourcesResponse((KubeletPodResources("train", "ml", (ContainerResources(
        "main", (ContainerDevices("nvidia.com/gpu", (UUID_A,)),)),)),))  # fmt: skip
    socket = short_dir / "kubelet.sock"
    server = await FakePodResourcesLister(socket, response).start()
    try:

        async def read() -> DeviceAssignments:
            return await read_device_assignments(socket, short_dir / "no-checkpoint", 2.0)

        world = World(read_assignments=read)
        report = await world.loop.sync_once()
    finally:
        await server.stop()
    assert server.calls == 1 and report.source == SOURCE_POD_RESOURCES
    assert world.used_by(GPU_A) == "nvidia-device-plugin"


async def test_a_failing_patch_is_retried_with_backoff() -> None:
    world = World()
    world.assignments = held(UUID_A)
    world.api.fail("patch", "GPU", GPU_A, KubeError(500, "etcd slow"), KubeError(409, "conflict"))
    report = await world.loop.sync_once()
    assert report.complete and world.used_by(GPU_A) == "nvidia-device-plugin"
    assert world.sleeps == [0.2, 0.4]
    assert world.loop.problems() == []


async def test_a_patch_failing_three_times_is_reported_and_retried_next_round() -> None:
    world = World()
    world.assignments = held(UUID_A, HAMI_ID)
    world.api.fail("patch", "GPU", GPU_A, *(KubeError(500, "etcd down") for _ in range(3)))
    report = await world.loop.sync_once()  # does not raise
    assert not report.complete and report.patched == {GPU_B: "3rd-party-device-plugin"}
    assert world.sleeps == [0.2, 0.4]
    assert world.loop.stats.patch_failures == 1
    assert world.loop.problems() == [
        f"device-plugin usage: GPU {GPU_A}: usedBy not written: 500: etcd down"]  # fmt: skip
    assert world.used_by(GPU_A) == "tensor-fusion"
    await world.loop.sync_once()
    assert world.used_by(GPU_A) == "nvidia-device-plugin" and world.loop.problems() == []


async def test_a_gpu_deleted_meanwhile_is_not_retried_or_reported() -> None:
    world = World()
    world.assignments = held(UUID_A)
    world.api.fail("patch", "GPU", GPU_A, KubeError(404, "not found"))
    report = await world.loop.sync_once()
    assert report.failed == {} and world.sleeps == [] and world.loop.problems() == []


async def test_a_gpu_without_an_object_yet_makes_the_round_incomplete() -> None:
    world = World()
    world.api.objects.pop(("GPU", "", GPU_B))  # not written by the discovery yet
    world.assignments = held(UUID_A, UUID_B)
    report = await world.loop.sync_once()
    assert report.unmatched == (GPU_B,) and not report.complete
    assert world.used_by(GPU_A) == "nvidia-device-plugin"


async def test_disabled_without_detect_in_used_gpus() -> None:
    world = World(enabled=False)
    world.assignments = held(UUID_A)
    await world.loop.run()  # returns at once
    assert world.reads == 0 and world.api.writes() == [] and world.sleeps == []


async def test_a_failed_round_is_retried_at_the_next_poll() -> None:
    world = World(rand=0.5)
    world.read_error = CheckpointError("kubelet_internal_checkpoint: cannot read")
    world.max_sleeps = 2
    with pytest.raises(StopError):
        await world.loop.run()
    assert world.sleeps == [30.0, 30.0] and world.reads == 3
    assert world.loop.stats.read_failures == 3
    assert "cannot read" in world.loop.problems()[0]


@pytest.mark.parametrize(("rand", "sleeps"), [
    (0.0, [30.0, 30.0, 30.0, 12.0, 30.0, 30.0, 30.0, 12.0]),  # 120 s - 15% = 102 s
    (1.0, [30.0, 30.0, 30.0, 30.0, 18.0, 30.0, 30.0, 30.0]),  # 120 s + 15% = 138 s
])  # fmt: skip
async def test_full_resyncs_every_120_s_with_jitter(rand: float, sleeps: list[float]) -> None:
    world = World(rand=rand)
    world.max_sleeps = len(sleeps)
    sync_times: list[float] = []

    async def read() -> DeviceAssignments:
        sync_times.append(world.now)
        return held()

    world.loop = DeviceUsageLoop(node="gpu-1", enabled=True, objects=world.api,
                                 managed_gpus=world.managed, read_assignments=read,
                                 checkpoint_stamp=lambda: (1, 1, 1), clock=lambda: world.now,
                                 sleep=world.sleep, rand=lambda: rand)  # fmt: skip
    with pytest.raises(StopError):
        await world.loop.run()
    period = 120 * (1 + 0.15 * (2 * rand - 1))
    assert world.sleeps == sleeps
    assert sync_times == pytest.approx([0.0, period, 2 * period][: len(sync_times)])
    assert len(sync_times) == (3 if rand == 0.0 else 2)


def test_the_default_jitter_stays_within_15_percent() -> None:
    rng = random.Random(7)
    loop = DeviceUsageLoop(node="n", enabled=True, objects=FakeApi(), managed_gpus=World().managed,
                           rand=rng.random)  # fmt: skip
    delays = [loop.resync_delay_s() for _ in range(2000)]
    assert all(102.0 <= d <= 138.0 for d in delays)
    assert min(delays) < 104 and max(delays) > 136  # jittered, not fixed


async def test_a_changed_checkpoint_syncs_at_the_next_poll() -> None:
    world = World()
    world.max_sleeps = 3
    stamps: list[FileStamp] = [(1, 1, 1), (1, 1, 1), (1, 2, 9), (1, 2, 9)]

    def stamp() -> FileStamp:
        return stamps.pop(0) if len(stamps) > 1 else stamps[0]

    world.loop = DeviceUsageLoop(node="gpu-1", enabled=True, objects=world.api,
                                 managed_gpus=world.managed, read_assignments=world.read,
                                 checkpoint_stamp=stamp, clock=lambda: world.now,
                                 sleep=world.sleep, rand=lambda: 0.5)  # fmt: skip
    with pytest.raises(StopError):
        await world.loop.run()
    assert world.sleeps == [30.0, 30.0, 30.0]
    assert world.reads == 2  # at start, then at 60 s when the stamp changed


async def test_the_file_stamp_follows_the_kubelet_rewriting_the_file(short_dir: Path) -> None:
    path = short_dir / "kubelet_internal_checkpoint"
    stamp = file_stamp(path)
    assert stamp() is None
    write_checkpoint(path, UUID_A)
    first = stamp()
    write_checkpoint(path, UUID_A, UUID_B)
    assert first is not None and stamp() not in (None, first)

"""Allocate on a node whose MPS daemon runs: the worker gets the MPS variables and mounts of the
limits the leader committed, per isolation mode; a daemon that does not serve refuses."""

from __future__ import annotations

from typing import Any

import pytest

from tensorfusion.adapters.kubelet.device_plugin import AllocationRefusedError
from tensorfusion.domain.annotations import KEYS, encode_index
from tensorfusion.domain.isolation.mps_daemon import MpsState, MpsStatus
from tensorfusion.domain.vocabulary import IsolationMode
from tensorfusion.hypervisor.worker_devices import MPS_NOT_READY, MpsEnforcement, WorkerDevices

from ...security.test_devplug_allocate import Events

NODE = "node-a"
GPUS = {"gpu-aa": "GPU-AA", "gpu-bb": "GPU-BB"}


def _pod(isolation_annotation: str = "hard") -> dict[str, Any]:
    resource, value = encode_index(10)
    return {"metadata": {"name": "w", "namespace": "ml", "uid": "uid-1", "annotations": {
                KEYS.gpu_ids: "gpu-aa,gpu-bb", KEYS.isolation: isolation_annotation,
                KEYS.vram_limit: "80Gi"}},  # what the pod says now: never enforced
            "spec": {"nodeName": NODE, "containers": [
                {"name": "c", "resources": {"limits": {resource: str(value)}}}]},
            "status": {"phase": "Pending"}}  # fmt: skip


def _gpu(name: str, entry: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {
        "capacity": {"tflops": "100", "vram": "80Gi"},
        "runningApps": [{"namespace": "ml", "pods": [entry]}]}}  # fmt: skip


def _entry(isolation: str | None, **limits: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": "w", "namespace": "ml", "uid": "uid-1", "limits": limits}
    if isolation is not None:
        entry["isolation"] = isolation
    return entry


class Setup:
    def __init__(self, entry: dict[str, Any], state: MpsState = MpsState.RUNNING) -> None:
        self.pods = [_pod()]
        self.objects = {name: _gpu(name, entry) for name in GPUS}
        self.status = MpsStatus(state)
        self.events = Events()

    async def gpu_objects(self, node: str) -> dict[str, Any]:
        return self.objects

    def workers(self) -> WorkerDevices:
        mps = MpsEnforcement(status=lambda: self.status, pipe_dir="/h/mps/pipe",
                             log_dir="/h/mps/log", shm_dir="/h/shm")  # fmt: skip
        return WorkerDevices(node=NODE, pods=lambda: self.pods, native_uuids=lambda: GPUS,
                             gpu_objects=self.gpu_objects, events=self.events, mps=mps,
                             commit_wait_s=0.0)  # fmt: skip


async def _allocate(setup: Setup) -> Any:
    resource, value = encode_index(10)
    return await setup.workers().allocate(resource, tuple(f"d{i}" for i in range(value)))


@pytest.mark.parametrize(
    ("isolation", "memory", "threads"),
    [("shared", None, None), ("soft", "0=10240MB,1=10240MB", None),
     ("hard", "0=10240MB,1=10240MB", "25")],
)  # fmt: skip
async def test_each_isolation_mode_gets_its_limits_from_the_committed_entry(
    isolation: str, memory: str | None, threads: str | None
) -> None:
    setup = Setup(_entry(isolation, tflops="25", vram="10Gi"))
    answer = await _allocate(setup)
    assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == "GPU-AA,GPU-BB"
    assert answer.envs["CUDA_VISIBLE_DEVICES"] == "GPU-AA,GPU-BB"  # ordinals 0, 1 of the limit
    assert answer.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/nvidia-mps"
    assert answer.envs.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") == memory
    assert answer.envs.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") == threads
    assert {(m.container_path, m.host_path, m.read_only) for m in answer.mounts} == {
        ("/tmp/nvidia-mps", "/h/mps/pipe", False),
        ("/var/log/nvidia-mps", "/h/mps/log", True),
        ("/dev/shm", "/h/shm", False),
    }


async def test_compute_percent_limit_sets_the_share() -> None:
    answer = await _allocate(Setup(_entry("hard", compute="40", vram="1Gi")))
    assert answer.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "40"


async def test_an_entry_without_isolation_falls_back_to_the_pod_annotation() -> None:
    setup = Setup(_entry(None, tflops="50", vram="1Gi"))  # the pod's annotation says hard
    workers = setup.workers()
    resource, value = encode_index(10)
    answer = await workers.allocate(resource, tuple(f"d{i}" for i in range(value)))
    assert answer.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    [(key, limits)] = workers.enforced.items()  # what the metrics report as enforced
    assert key == ("ml", "w") and (limits.isolation, limits.sm_percent) == (IsolationMode.HARD, 50)


@pytest.mark.parametrize("state", [MpsState.STARTING, MpsState.RESTARTING, MpsState.FAILED])
async def test_a_daemon_that_does_not_serve_refuses_with_an_event(state: MpsState) -> None:
    setup = Setup(_entry("hard", tflops="25", vram="10Gi"), state)
    with pytest.raises(AllocationRefusedError, match=f"MPS control daemon is {state.value}"):
        await _allocate(setup)
    assert [reason for _, reason, _ in setup.events.recorded] == [MPS_NOT_READY]


async def test_a_daemon_that_comes_back_within_the_wait_is_waited_for() -> None:
    setup = Setup(_entry("soft", vram="1Gi"), MpsState.RESTARTING)
    now = [0.0]

    async def sleep(seconds: float) -> None:
        now[0] += seconds
        if now[0] >= 2:
            setup.status = MpsStatus(MpsState.RUNNING)

    workers = setup.workers()
    workers.commit_wait_s, workers.clock, workers.sleep = 10.0, lambda: now[0], sleep
    resource, value = encode_index(10)
    answer = await workers.allocate(resource, tuple(f"d{i}" for i in range(value)))
    assert answer.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=1024MB,1=1024MB"
    assert setup.events.recorded == []

"""The MPS control daemon under the agent, against the stand-in `nvidia-cuda-mps-control`:
start, compute modes, restart after a crash, failure when it cannot start, and cleanup."""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tensorfusion.adapters.devices.mps_control import MpsControl
from tensorfusion.domain.backoff import Backoff
from tensorfusion.domain.devices.inventory import ComputeMode, ProviderError
from tensorfusion.domain.isolation.mps_daemon import MpsState
from tensorfusion.hypervisor.mps_supervisor import MpsSupervisor
from tests.standins import install_mps_control

GPUS = ("GPU-aaaa", "GPU-bbbb")


class Modes:
    """Compute modes in memory; `refuse` makes setting fail."""

    def __init__(self) -> None:
        self.modes: dict[str, ComputeMode] = {}
        self.refuse = False

    def set_compute_mode(self, uuid: str, mode: ComputeMode) -> ComputeMode:
        if self.refuse:
            raise ProviderError("NVML failed: nvmlDeviceSetComputeMode: Insufficient Permissions")
        previous = self.modes.get(uuid, ComputeMode.DEFAULT)
        self.modes[uuid] = mode
        return previous


@pytest.fixture
def root() -> Iterator[Path]:
    # Short: the daemon's Unix socket path must fit in 107 bytes.
    with tempfile.TemporaryDirectory(prefix="mps") as name:
        yield Path(name)


def _control(root: Path, binary: str | None = None) -> MpsControl:
    return MpsControl(binary=binary or str(install_mps_control(root / "bin")),
                      pipe_dir=root / "pipe", log_dir=root / "log")  # fmt: skip


async def _until(what: str, check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def _commands(root: Path) -> list[str]:
    path = root / "log" / "control.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return [line.removeprefix("command: ") for line in lines if line.startswith("command: ")]


def _supervisor(control: MpsControl, modes: Modes, **kwargs: object) -> MpsSupervisor:
    return MpsSupervisor(control=control, gpus=lambda: GPUS, modes=modes,
                         health_interval_s=0.1, unhealthy_after_s=1.0,
                         backoff=Backoff(initial=0.1, maximum=0.2), **kwargs)  # type: ignore[arg-type]  # fmt: skip


async def test_daemon_runs_with_exclusive_gpus_and_quits_giving_the_modes_back(root: Path) -> None:
    modes = Modes()
    changes: list[MpsState] = []
    supervisor = _supervisor(_control(root), modes)
    supervisor._on_change = lambda: changes.append(supervisor.status.state)
    task = asyncio.create_task(supervisor.run())
    await _until("Running", lambda: supervisor.status.state is MpsState.RUNNING)
    assert modes.modes == dict.fromkeys(GPUS, ComputeMode.EXCLUSIVE_PROCESS)
    assert oct((root / "pipe").stat().st_mode & 0o777) == "0o755"
    assert "get_server_list" in _commands(root)
    await _until("the change reported", lambda: changes[-1:] == [MpsState.RUNNING])
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _commands(root)[-1] == "quit"
    assert not (root / "pipe" / "control").exists()
    assert modes.modes == dict.fromkeys(GPUS, ComputeMode.DEFAULT)
    assert supervisor.compute_modes_set == frozenset()


async def test_a_killed_daemon_is_restarted(root: Path) -> None:
    supervisor = _supervisor(_control(root), Modes())
    task = asyncio.create_task(supervisor.run())
    try:
        await _until("Running", lambda: supervisor.status.state is MpsState.RUNNING)
        pid = int((root / "pipe" / "nvidia-cuda-mps-control.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        await _until("a restart", lambda: supervisor.status.restarts == 1)
        await _until("Running again", lambda: supervisor.status.state is MpsState.RUNNING)
        assert int((root / "pipe" / "nvidia-cuda-mps-control.pid").read_text()) != pid
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_missing_binary_is_failed_and_retried(root: Path) -> None:
    modes = Modes()
    supervisor = _supervisor(_control(root, binary=str(root / "absent")), modes)
    task = asyncio.create_task(supervisor.run())
    try:
        await _until("Failed", lambda: supervisor.status.state is MpsState.FAILED)
        assert "not found" in supervisor.status.message
        assert modes.modes == {}
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_refused_compute_mode_is_failed_until_it_works(root: Path) -> None:
    modes = Modes()
    modes.refuse = True
    supervisor = _supervisor(_control(root), modes)
    task = asyncio.create_task(supervisor.run())
    try:
        await _until("Failed", lambda: supervisor.status.state is MpsState.FAILED)
        assert "EXCLUSIVE_PROCESS" in supervisor.status.message
        modes.refuse = False
        await _until("Running", lambda: supervisor.status.state is MpsState.RUNNING)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_modes_saved_by_an_agent_that_was_killed_are_the_ones_restored(root: Path) -> None:
    (root / "compute-modes.json").write_text('{"GPU-aaaa": "Prohibited"}')
    modes = Modes()
    modes.modes = {"GPU-aaaa": ComputeMode.EXCLUSIVE_PROCESS}  # as the killed agent left it
    supervisor = _supervisor(_control(root), modes)
    task = asyncio.create_task(supervisor.run())
    await _until("Running", lambda: supervisor.status.state is MpsState.RUNNING)
    assert "GPU-bbbb" in (root / "compute-modes.json").read_text()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert modes.modes == {"GPU-aaaa": ComputeMode.PROHIBITED, "GPU-bbbb": ComputeMode.DEFAULT}
    assert not (root / "compute-modes.json").exists()

"""Issue 22 finding 9: the two background tasks that could end silently. The device plugins'
watch fails once and they register again; the leader election fails once and the controller
replica exits with EXIT_FATAL (the kubelet restarts it) instead of staying a silent follower."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tensorfusion.adapters.kubelet.device_plugin import AllocateAnswer, IndexDevicePlugins
from tensorfusion.app.controller import EXIT_FATAL, _wait_for_end, start_election
from tensorfusion.runtime.leader_election import LeaderElector
from tensorfusion.runtime.supervision import Supervisor

from ..unit.kubelet.kubelet_fakes import FakeKubelet, eventually
from ..unit.runtime.test_leader_election_fakes import (
    LEASE,
    NAMESPACE,
    FakeClient,
    FakeStore,
    api_error,
)


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tfs-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def no_allocation(_resource: str, _ids: tuple[str, ...]) -> AllocateAnswer:
    return AllocateAnswer()


async def test_a_failed_kubelet_watch_is_retried_and_the_plugins_register_again(
    socket_dir: Path,
) -> None:
    kubelet = await FakeKubelet(socket_dir / "kubelet.sock").start()
    plugins = IndexDevicePlugins(no_allocation, plugin_dir=socket_dir, poll_interval=0.02,
                                 backoff_initial=0.02, backoff_max=0.05,
                                 resource_names=("tensor-fusion.ai/index_0",))  # fmt: skip
    watch = plugins._watch
    failures: list[int] = []

    async def failing_once(identity: tuple[int, ...]) -> str:
        if not failures:
            failures.append(1)
            raise OSError("injected: stat failed")
        return await watch(identity)

    plugins._watch = failing_once  # type: ignore[method-assign]
    try:
        await plugins.start()
        await eventually(lambda: plugins.registrations >= 2 and plugins.registered,
                         "registered again after the watch failed")  # fmt: skip
        assert failures == [1] and len(kubelet.requests) >= 2
    finally:
        await plugins.stop()
        await kubelet.stop()


async def test_a_device_plugin_run_that_fails_is_restarted_by_the_supervisor(
    socket_dir: Path,
) -> None:
    kubelet = await FakeKubelet(socket_dir / "kubelet.sock").start()
    plugins = IndexDevicePlugins(no_allocation, plugin_dir=socket_dir, poll_interval=0.02,
                                 backoff_initial=0.02, backoff_max=0.05,
                                 resource_names=("tensor-fusion.ai/index_0",))  # fmt: skip
    supervise = plugins._supervise
    runs: list[int] = []

    async def failing_first_run() -> None:
        runs.append(1)
        if len(runs) == 1:
            raise RuntimeError("injected: the first run fails")
        await supervise()

    plugins._supervise = failing_first_run  # type: ignore[method-assign]
    supervisor = Supervisor(sleep=lambda _s: asyncio.sleep(0))
    try:
        supervisor.start("device-plugins", plugins.run)
        await eventually(lambda: plugins.registered, "registered by the restarted run")
        assert len(runs) == 2 and supervisor.stats["device-plugins"].restarts == 1
    finally:
        await supervisor.stop()
        await kubelet.stop()
    assert not os.path.exists(socket_dir / "tensor-fusion.ai-index_0.sock"), "sockets removed"


async def test_a_failed_election_ends_the_replica_with_exit_fatal() -> None:
    async def failing_sleep(_seconds: float) -> None:
        raise RuntimeError("injected: the campaign's poll failed")

    client = FakeClient(FakeStore(), fail_always=api_error(500))
    elector = LeaderElector(client.as_client(), NAMESPACE, LEASE, "pod-0", 5, 3, 1,
                            sleep=failing_sleep)  # fmt: skip

    async def never_leads() -> None:
        raise AssertionError("the failing candidate never leads")

    process: Any = SimpleNamespace(supervisor=Supervisor(), stopping=asyncio.Event(),
                                   start_leading=never_leads, stop_leading=never_leads)  # fmt: skip
    lost = asyncio.Event()
    start_election(process, elector, lost)

    code = await asyncio.wait_for(_wait_for_end(process, lost), 10.0)

    assert code == EXIT_FATAL
    assert process.supervisor.fatal.name == "leader-election"
    assert process.supervisor.stats["leader-election"].failures == 1

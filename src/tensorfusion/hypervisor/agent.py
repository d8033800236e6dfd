"""The node agent's loops (deployment.md §9): discovery at start, every discovery interval and
on demand, the GPU and GPUNode objects written after each discovery, and a heartbeat every
30 s.

`NodeAgent.run()` runs until cancelled and never dies of a failure: a provider error makes the
agent `Degraded` (heartbeats say so) and is retried at the next round; an API failure is
logged and retried. `ready` is true once a discovery has been written; `problems` says why not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Final

from tensorfusion.domain.devices.gpu_objects import AGENT_DEGRADED, AGENT_RUNNING
from tensorfusion.domain.devices.inventory import DeviceProvider, Inventory, ProviderError
from tensorfusion.hypervisor.object_sync import GPUNodeMissingError, GPUObjectSync

__all__ = ["RETRY_S", "NodeAgent"]

_log = logging.getLogger(__name__)
RETRY_S: Final = 5.0


class NodeAgent:
    """Discovery and the objects of one node."""

    def __init__(
        self,
        *,
        provider: DeviceProvider,
        sync: GPUObjectSync,
        discovery_interval_s: float,
        heartbeat_interval_s: float,
        clock: Callable[[], float],
        retry_s: float = RETRY_S,
    ) -> None:
        self._provider = provider
        self._sync = sync
        self._discovery_interval = discovery_interval_s
        self._heartbeat_interval = heartbeat_interval_s
        self._clock = clock
        self._retry = retry_s
        self._wake = asyncio.Event()
        self.inventory: Inventory | None = None
        self.synced = False
        self.provider_error = ""
        self.api_error = ""
        self.discoveries = 0

    @property
    def state(self) -> str:
        """`Degraded` while the provider fails, else `Running` (the heartbeat's state)."""
        return AGENT_DEGRADED if self.provider_error else AGENT_RUNNING

    @property
    def ready(self) -> bool:
        """A discovery has been written to the API server."""
        return self.synced

    def problems(self) -> list[str]:
        """Why the agent is not (fully) working, for `/readyz`."""
        found = []
        if not self.synced:
            found.append("no discovery written yet")
        if self.provider_error:
            found.append(self.provider_error)
        if self.api_error:
            found.append(self.api_error)
        return found

    def discover_now(self) -> None:
        """Ask for a discovery at once (`POST /api/v1/devices/discover`)."""
        self._wake.set()

    async def discover(self) -> bool:
        """One discovery written to the API server; False (and the reason kept) on failure."""
        try:
            inventory = await asyncio.to_thread(self._provider.discover)
        except ProviderError as error:
            if str(error) != self.provider_error:
                _log.error("GPU discovery failed: %s", error)
            self.provider_error = str(error)
            return False
        self.provider_error = ""
        self.inventory = inventory
        self.discoveries += 1
        try:
            await self._sync.sync(inventory, state=self.state)
        except GPUNodeMissingError as error:
            self.api_error = str(error)
            _log.info("%s; retrying", error)
            return False
        except Exception as error:  # an API failure is retried at the next round
            self.api_error = f"writing the GPU objects failed: {error}"
            _log.warning("%s", self.api_error)
            return False
        self.api_error = ""
        if not self.synced:
            _log.info("discovered %d GPUs with %s; GPU objects written",
                      len(inventory.devices), self._provider.name)  # fmt: skip
        self.synced = True
        return True

    async def run(self) -> None:
        """Discovery and heartbeat loops until cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._discoveries())
            group.create_task(self._heartbeats())

    async def _discoveries(self) -> None:
        while True:
            written = await self.discover()
            wait = self._discovery_interval if written else self._retry
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)
            self._wake.clear()

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_interval)
            inventory = self.inventory
            if inventory is None or not self.synced:
                continue
            try:
                await self._sync.heartbeat(inventory, state=self.state)
            except Exception as error:  # the next beat tries again
                self.api_error = f"heartbeat failed: {error}"
                _log.warning("%s", self.api_error)
            else:
                if self.api_error.startswith("heartbeat failed"):
                    self.api_error = ""

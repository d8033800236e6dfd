"""The agent's device-plugin coexistence loop (deployment.md §9.4, §12; `DETECT_IN_USED_GPUS`).

`DeviceUsageLoop` reads which devices the kubelet handed out (pod-resources `List`, else the
`kubelet_internal_checkpoint` file), applies the pure rules of
`domain.devices.device_plugin_usage` and patches `status.usedBy` of this node's GPU objects:
`nvidia-device-plugin`, `3rd-party-device-plugin`, and `tensor-fusion` again on release.

`run()` syncs at start, then polls the checkpoint file's stamp every 30 s (a change syncs at
once) and re-syncs fully 120 s ±15% after each sync. A round that did not complete (reading or
listing failed, a patch failed 3 times with 200 ms × 2^i between tries, or a GPU the kubelet
names has no object yet) is tried again at the next 30 s poll. Nothing raises into the agent:
failures are logged, counted in `stats` and listed by `problems()`.

MIG devices map to their parent GPU through `mig_parents`; the agent's inventory has no MIG
information yet, so the agent passes none (old-style `MIG-GPU-<uuid>/...` IDs still map).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tensorfusion.adapters.kube.object_client import KubeError, ObjectClient
from tensorfusion.adapters.kubelet.pod_resources import (
    DEFAULT_CHECKPOINT_PATH,
    DEFAULT_POD_RESOURCES_SOCKET,
    DeviceAssignments,
    read_device_assignments,
)
from tensorfusion.domain.devices.device_plugin_usage import device_plugin_usage, used_by_changes
from tensorfusion.hypervisor.object_sync import ManagedGPUs

__all__ = [
    "JITTER",
    "PATCH_ATTEMPTS",
    "PATCH_BACKOFF_S",
    "POLL_S",
    "RESYNC_S",
    "DeviceUsageLoop",
    "DeviceUsageStats",
    "FileStamp",
    "SyncReport",
    "file_stamp",
    "kubelet_reader",
]

_log = logging.getLogger(__name__)
POLL_S: Final = 30.0
RESYNC_S: Final = 120.0
JITTER: Final = 0.15
PATCH_ATTEMPTS: Final = 3
PATCH_BACKOFF_S: Final = 0.2

FileStamp = tuple[int, int, int] | None
"""(inode, mtime in ns, size) of a file, None when it cannot be read."""
AssignmentReader = Callable[[], Awaitable[DeviceAssignments]]


def kubelet_reader(
    socket_path: str | Path = DEFAULT_POD_RESOURCES_SOCKET,
    checkpoint_path: str | Path = DEFAULT_CHECKPOINT_PATH,
    timeout: float = 5.0,
) -> AssignmentReader:
    """Pod-resources `List` on `socket_path`, else the checkpoint file."""

    async def read() -> DeviceAssignments:
        return await read_device_assignments(socket_path, checkpoint_path, timeout)

    return read


def file_stamp(path: str | Path = DEFAULT_CHECKPOINT_PATH) -> Callable[[], FileStamp]:
    """The stamp of `path`, to notice the kubelet rewriting it."""

    def stamp() -> FileStamp:
        try:
            found = os.stat(path)
        except OSError:
            return None
        return (found.st_ino, found.st_mtime_ns, found.st_size)

    return stamp


@dataclass(frozen=True, slots=True)
class SyncReport:
    """One round: where the assignments came from, what changed and what did not."""

    complete: bool
    source: str = ""
    usage: Mapping[str, str] = field(default_factory=dict)
    """GPU uuid (lower case) -> usedBy, for the GPUs other device plugins hold."""
    patched: Mapping[str, str] = field(default_factory=dict)
    """GPU name -> the usedBy written."""
    failed: Mapping[str, str] = field(default_factory=dict)
    """GPU name -> why its patch failed."""
    unmatched: tuple[str, ...] = ()
    """GPUs the kubelet names that have no GPU object of this node (yet)."""
    error: str = ""


@dataclass(slots=True)
class DeviceUsageStats:
    """Counters since start."""

    rounds: int = 0
    incomplete_rounds: int = 0
    read_failures: int = 0
    patches: int = 0
    patch_failures: int = 0


class DeviceUsageLoop:
    """`status.usedBy` of one node's GPUs, kept as the kubelet hands devices to other plugins."""

    def __init__(
        self,
        *,
        node: str,
        enabled: bool,
        objects: ObjectClient,
        managed_gpus: ManagedGPUs,
        read_assignments: AssignmentReader | None = None,
        checkpoint_stamp: Callable[[], FileStamp] | None = None,
        extra_resource_prefixes: Sequence[str] = (),
        mig_parents: Callable[[], Mapping[str, str] | None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._node = node
        self.enabled = enabled
        self._objects = objects
        self._managed_gpus = managed_gpus
        self._read = read_assignments or kubelet_reader()
        self._stamp = checkpoint_stamp or file_stamp()
        self._prefixes = tuple(extra_resource_prefixes)
        self._mig_parents = mig_parents
        self._clock = clock
        self._sleep = sleep
        self._rand = rand
        self.stats = DeviceUsageStats()
        self.last: SyncReport | None = None
        self._problems: list[str] = []

    def problems(self) -> list[str]:
        """What the last round could not do (reported, never gating readiness)."""
        return list(self._problems)

    def resync_delay_s(self) -> float:
        """The next full re-sync: 120 s ±15%."""
        return RESYNC_S * (1 + JITTER * (2 * self._rand() - 1))

    async def run(self) -> None:
        """Sync at start, on checkpoint changes, after failures and every 120 s ±15%."""
        if not self.enabled:
            _log.info("DETECT_IN_USED_GPUS is off: other device plugins' GPUs are not watched")
            return
        stamp = self._stamp()
        complete = (await self.sync_once()).complete
        due = self._clock() + self.resync_delay_s()
        while True:
            await self._sleep(max(0.0, min(POLL_S, due - self._clock())))
            current = self._stamp()
            if complete and current == stamp and self._clock() < due:
                continue
            stamp = current
            complete = (await self.sync_once()).complete
            due = self._clock() + self.resync_delay_s()

    async def sync_once(self) -> SyncReport:
        """One round: read the assignments, list the node's GPUs, patch what changed."""
        report = await self._round()
        self.last = report
        self.stats.rounds += 1
        if not report.complete:
            self.stats.incomplete_rounds += 1
        problems = [f"GPU {name}: usedBy not written: {why}" for name, why in report.failed.items()]
        self._problems = [f"device-plugin usage: {p}" for p in [report.error, *problems] if p]
        return report

    async def _round(self) -> SyncReport:
        try:
            found = await self._read()
        except Exception as error:  # socket and file both unusable: try again next poll
            return self._read_failed(f"cannot read the kubelet's device assignments: {error}")
        usage = device_plugin_usage(found.assignments, extra_resource_prefixes=self._prefixes,
                                    mig_parents=self._mig_parents())  # fmt: skip
        try:
            gpus = await self._managed_gpus(self._node)
        except Exception as error:
            return self._read_failed(f"listing the GPUs of node {self._node} failed: {error}")
        current = {name: _used_by(gpu) for name, gpu in gpus.items()}
        patched: dict[str, str] = {}
        failed: dict[str, str] = {}
        for name, used_by in sorted(used_by_changes(current, usage).items()):
            why = await self._patch(name, used_by)
            if why is None:
                _log.info("GPU %s: usedBy %s -> %s (from %s)", name,
                          current[name] or "-", used_by, found.source)  # fmt: skip
                patched[name] = used_by
            elif why:
                failed[name] = why
        unmatched = tuple(sorted(set(usage) - {name.lower() for name in gpus}))
        if unmatched:
            _log.debug("GPUs held by device plugins without a GPU object: %s", unmatched)
        return SyncReport(not failed and not unmatched, found.source, usage, patched, failed,
                          unmatched)  # fmt: skip

    def _read_failed(self, message: str) -> SyncReport:
        self.stats.read_failures += 1
        if not self.last or self.last.error != message:
            _log.warning("device-plugin usage: %s", message)
        return SyncReport(False, error=message)

    async def _patch(self, name: str, used_by: str) -> str | None:
        """None when written, "" when the GPU is gone, else why it failed 3 times."""
        body = {"status": {"usedBy": used_by}}
        for attempt in range(PATCH_ATTEMPTS):
            try:
                await self._objects.patch("GPU", name, body, status=True)
            except KubeError as error:
                if error.code == 404:
                    _log.info("GPU %s is gone; usedBy not written", name)
                    return ""
                failure = str(error)
            except Exception as error:  # a transport error: retried like an API error
                failure = str(error) or type(error).__name__
            else:
                self.stats.patches += 1
                return None
            _log.warning("GPU %s usedBy %s failed (attempt %d of %d): %s",
                         name, used_by, attempt + 1, PATCH_ATTEMPTS, failure)  # fmt: skip
            if attempt < PATCH_ATTEMPTS - 1:
                await self._sleep(PATCH_BACKOFF_S * 2**attempt)
        self.stats.patch_failures += 1
        return failure


def _used_by(gpu: Mapping[str, Any]) -> str:
    return str((gpu.get("status") or {}).get("usedBy") or "")

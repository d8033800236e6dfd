"""Which devices the kubelet handed out (deployment.md §9.4): pod-resources `List`, else the
device manager's checkpoint file.

`list_pod_resources` calls `v1.PodResourcesLister/List` on the kubelet's pod-resources socket;
`read_checkpoint` reads `kubelet_internal_checkpoint`; `read_device_assignments` tries the first
and falls back to the second, saying which source answered. Errors are `PodResourcesError` (API)
and `CheckpointError` (file), each with a message naming the socket or file.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import grpc.aio

from tensorfusion.adapters.kubelet import rpc
from tensorfusion.domain.devices.device_plugin_usage import (
    CHECKPOINT_FILE_NAME,
    CheckpointError,
    DeviceAssignment,
    KubeletCheckpoint,
    assignments_from_checkpoint,
    assignments_from_pod_resources,
    parse_checkpoint,
)
from tensorfusion.domain.devices.kubelet_messages import Empty, ListPodResourcesResponse

__all__ = [
    "DEFAULT_CHECKPOINT_PATH",
    "DEFAULT_POD_RESOURCES_SOCKET",
    "SOURCE_CHECKPOINT",
    "SOURCE_POD_RESOURCES",
    "DeviceAssignments",
    "PodResourcesError",
    "list_pod_resources",
    "read_checkpoint",
    "read_device_assignments",
]

DEFAULT_POD_RESOURCES_SOCKET: Final = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_CHECKPOINT_PATH: Final = f"/var/lib/kubelet/device-plugins/{CHECKPOINT_FILE_NAME}"
SOURCE_POD_RESOURCES: Final = "pod-resources"
SOURCE_CHECKPOINT: Final = "checkpoint"

_log = logging.getLogger(__name__)


class PodResourcesError(RuntimeError):
    """The pod-resources API did not answer (socket missing, kubelet down, bad reply)."""


@dataclass(frozen=True, slots=True)
class DeviceAssignments:
    """The kubelet's device assignments and where they came from."""

    source: str  # SOURCE_POD_RESOURCES or SOURCE_CHECKPOINT
    assignments: tuple[DeviceAssignment, ...]


async def list_pod_resources(
    socket_path: str | Path = DEFAULT_POD_RESOURCES_SOCKET, timeout: float = 5.0
) -> ListPodResourcesResponse:
    """`v1.PodResourcesLister/List` on `socket_path`."""
    path = str(socket_path)
    if not Path(path).exists():
        raise PodResourcesError(f"{path}: pod-resources socket missing")
    try:
        async with rpc.unix_channel(path) as channel:
            return await rpc.call_unary(
                channel,
                rpc.POD_RESOURCES_SERVICE,
                rpc.POD_RESOURCES_LIST,
                Empty(),
                ListPodResourcesResponse,
                timeout,
            )
    except grpc.aio.AioRpcError as error:
        raise PodResourcesError(
            f"{path}: List failed: {error.code().name}: {error.details()}"
        ) from None


def read_checkpoint(path: str | Path = DEFAULT_CHECKPOINT_PATH) -> KubeletCheckpoint:
    """Read and parse the checkpoint file; `CheckpointError` names the file on any failure."""
    try:
        content = Path(path).read_bytes()
    except OSError as error:
        raise CheckpointError(f"{path}: cannot read ({error.strerror or error})") from None
    return parse_checkpoint(content, str(path))


async def read_device_assignments(
    socket_path: str | Path = DEFAULT_POD_RESOURCES_SOCKET,
    checkpoint_path: str | Path = DEFAULT_CHECKPOINT_PATH,
    timeout: float = 5.0,
) -> DeviceAssignments:
    """Pod-resources `List`, else the checkpoint file; raises `CheckpointError` if both fail."""
    try:
        response = await list_pod_resources(socket_path, timeout)
    except PodResourcesError as error:
        _log.debug("falling back to the checkpoint file: %s", error)
    else:
        return DeviceAssignments(SOURCE_POD_RESOURCES, assignments_from_pod_resources(response))
    checkpoint = await asyncio.to_thread(read_checkpoint, checkpoint_path)
    return DeviceAssignments(SOURCE_CHECKPOINT, assignments_from_checkpoint(checkpoint))

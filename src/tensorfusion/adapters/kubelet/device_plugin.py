"""The node agent's kubelet device plugins: the index resources (api.md §6, deployment.md §9.7).

The device-plugin API registers one resource name per endpoint, so each index resource
(`tensor-fusion.ai/index_0` .. `index_f`) gets its own `DevicePluginServer`: a `grpc.aio` server
for `v1beta1.DevicePlugin` on `<plugin dir>/<endpoint>.sock`, advertising 36 healthy devices
(1 + 2 + ... + 8, so the eight values of one name fit on a node at once). `IndexDevicePlugins`
starts them, registers each with the kubelet (`v1beta1.Registration/Register` on
`kubelet.sock`) and watches that socket: when the kubelet restarts (its socket is recreated or
it removed ours) the missing servers are rebound and all re-registered. Failures (watching
included) are logged and retried with exponential backoff; nothing here raises into the agent,
which runs `IndexDevicePlugins.run` under its Supervisor.

`Allocate` asks the agent: `allocate(resource_name, device_ids)` returns the container's
`AllocateAnswer` (env such as `NVIDIA_VISIBLE_DEVICES`, annotations). Raise `AllocationRefusedError`
for an expected refusal (the kubelet sees FAILED_PRECONDITION and retries the pod later).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import grpc
import grpc.aio

from tensorfusion.adapters.kubelet import rpc
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.devices.kubelet_messages import (
    API_VERSION,
    HEALTHY,
    UNHEALTHY,
    AllocateRequest,
    AllocateResponse,
    ContainerAllocateResponse,
    ContainerPreferredAllocationResponse,
    Device,
    DevicePluginOptions,
    DeviceSpec,
    Empty,
    ListAndWatchResponse,
    Mount,
    PreferredAllocationRequest,
    PreferredAllocationResponse,
    PreStartContainerRequest,
    RegisterRequest,
)

__all__ = [
    "DEFAULT_PLUGIN_DIR",
    "DEVICES_PER_INDEX_RESOURCE",
    "KUBELET_SOCKET_NAME",
    "AllocateAnswer",
    "AllocateCallback",
    "AllocationRefusedError",
    "DevicePluginServer",
    "IndexDevicePlugins",
    "endpoint_name",
    "index_devices",
]

DEFAULT_PLUGIN_DIR: Final = "/var/lib/kubelet/device-plugins"
KUBELET_SOCKET_NAME: Final = "kubelet.sock"
DEVICES_PER_INDEX_RESOURCE: Final = 36
_MAX_SOCKET_PATH: Final = 107  # sun_path holds 108 bytes with the terminating NUL

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AllocateAnswer:
    """What the container gets for its devices."""

    envs: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    devices: tuple[DeviceSpec, ...] = ()


AllocateCallback = Callable[[str, tuple[str, ...]], Awaitable[AllocateAnswer]]


class AllocationRefusedError(Exception):
    """Raised by the allocate callback when the devices cannot be given (message for the user)."""


def endpoint_name(resource_name: str) -> str:
    """Socket file of a resource: `tensor-fusion.ai/index_0` -> `tensor-fusion.ai-index_0.sock`."""
    return resource_name.replace("/", "-") + ".sock"


def index_devices(
    resource_name: str, count: int = DEVICES_PER_INDEX_RESOURCE
) -> tuple[Device, ...]:
    """`count` healthy devices `<name>-1` .. `<name>-<count>` (`index_0-1`, ...)."""
    short = resource_name.rsplit("/", 1)[-1]
    return tuple(Device(id=f"{short}-{n}", health=HEALTHY) for n in range(1, count + 1))


class DevicePluginServer:
    """`v1beta1.DevicePlugin` for one resource on one unix socket."""

    def __init__(
        self,
        resource_name: str,
        devices: Sequence[Device],
        allocate: AllocateCallback,
        socket_path: str | Path,
    ) -> None:
        self.resource_name = resource_name
        self.socket_path = str(socket_path)
        self._devices = tuple(devices)
        self._allocate = allocate
        self._server: Any = None
        self._generation = 0
        self._closed = False
        self._changed = asyncio.Condition()

    @property
    def devices(self) -> tuple[Device, ...]:
        return self._devices

    @property
    def serving(self) -> bool:
        """Started, and its socket file is still there."""
        return self._server is not None and os.path.exists(self.socket_path)

    async def start(self) -> None:
        """Bind the socket (a stale file is removed first) and serve."""
        if len(self.socket_path.encode()) > _MAX_SOCKET_PATH:
            raise ValueError(f"{self.socket_path}: unix socket path longer than 107 bytes")
        _unlink(self.socket_path)
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((self._handler(),))
        server.add_insecure_port(rpc.unix_target(self.socket_path))
        await server.start()
        self._closed = False
        self._server = server

    async def stop(self) -> None:
        """End open ListAndWatch streams, stop serving and remove the socket."""
        server, self._server = self._server, None
        async with self._changed:
            self._closed = True
            self._changed.notify_all()
        if server is not None:
            await server.stop(None)
            _unlink(self.socket_path)

    async def set_devices(self, devices: Sequence[Device]) -> None:
        """Replace the advertised devices; open ListAndWatch streams send the new list."""
        async with self._changed:
            self._devices = tuple(devices)
            self._generation += 1
            self._changed.notify_all()

    async def register(self, kubelet_socket: str, timeout: float) -> None:
        """`Register` this endpoint with the kubelet; raises `grpc.aio.AioRpcError` on failure."""
        request = RegisterRequest(
            version=API_VERSION,
            endpoint=os.path.basename(self.socket_path),
            resource_name=self.resource_name,
            options=DevicePluginOptions(),
        )
        async with rpc.unix_channel(kubelet_socket) as channel:
            await rpc.call_unary(
                channel, rpc.REGISTRATION_SERVICE, rpc.REGISTER, request, Empty, timeout
            )

    def _handler(self) -> Any:
        return rpc.generic_handler(
            rpc.DEVICE_PLUGIN_SERVICE,
            {
                rpc.GET_DEVICE_PLUGIN_OPTIONS: rpc.unary_unary_handler(self._options, Empty),
                rpc.LIST_AND_WATCH: rpc.unary_stream_handler(self._list_and_watch, Empty),
                rpc.GET_PREFERRED_ALLOCATION: rpc.unary_unary_handler(
                    self._preferred_allocation, PreferredAllocationRequest
                ),
                rpc.ALLOCATE: rpc.unary_unary_handler(self._allocate_call, AllocateRequest),
                rpc.PRE_START_CONTAINER: rpc.unary_unary_handler(
                    self._pre_start, PreStartContainerRequest
                ),
            },
        )

    async def _options(self, _request: Empty, _context: Any) -> DevicePluginOptions:
        return DevicePluginOptions()

    async def _list_and_watch(
        self, _request: Empty, _context: Any
    ) -> AsyncIterator[ListAndWatchResponse]:
        while not self._closed:
            seen = self._generation
            yield ListAndWatchResponse(self._devices)
            async with self._changed:
                while not self._closed and self._generation == seen:
                    await self._changed.wait()

    async def _preferred_allocation(
        self, request: PreferredAllocationRequest, _context: Any
    ) -> PreferredAllocationResponse:
        answers = []
        for container in request.container_requests:
            chosen = list(dict.fromkeys(container.must_include_device_ids))
            for device_id in container.available_device_ids:
                if len(chosen) >= container.allocation_size:
                    break
                if device_id not in chosen:
                    chosen.append(device_id)
            answers.append(ContainerPreferredAllocationResponse(tuple(chosen)))
        return PreferredAllocationResponse(tuple(answers))

    async def _allocate_call(self, request: AllocateRequest, context: Any) -> AllocateResponse:
        known = {device.id for device in self._devices}
        responses = []
        for container in request.container_requests:
            device_ids = tuple(container.devices_ids)
            unknown = sorted(set(device_ids) - known)
            if unknown:
                message = f"{self.resource_name}: unknown device IDs {unknown}"
                _log.warning("Allocate refused: %s", message)
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)
            try:
                answer = await self._allocate(self.resource_name, device_ids)
            except AllocationRefusedError as refusal:
                _log.warning("Allocate %s %s refused: %s", self.resource_name, device_ids, refusal)
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(refusal))
            except Exception as error:
                _log.exception("Allocate %s %s failed", self.resource_name, device_ids)
                await context.abort(grpc.StatusCode.INTERNAL, f"allocate failed: {error}")
            responses.append(
                ContainerAllocateResponse(
                    envs=dict(answer.envs),
                    mounts=tuple(answer.mounts),
                    devices=tuple(answer.devices),
                    annotations=dict(answer.annotations),
                )
            )
        return AllocateResponse(tuple(responses))

    async def _pre_start(self, _request: PreStartContainerRequest, _context: Any) -> Empty:
        return Empty()


class IndexDevicePlugins:
    """The index-resource device plugins of one node, kept registered with the kubelet."""

    def __init__(
        self,
        allocate: AllocateCallback,
        *,
        plugin_dir: str | Path = DEFAULT_PLUGIN_DIR,
        kubelet_socket: str | Path | None = None,
        resource_names: Sequence[str] = KEYS.index_resource_names,
        devices_per_resource: int = DEVICES_PER_INDEX_RESOURCE,
        poll_interval: float = 1.0,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        register_timeout: float = 10.0,
    ) -> None:
        plugin_dir = Path(plugin_dir)
        self.kubelet_socket = str(kubelet_socket or plugin_dir / KUBELET_SOCKET_NAME)
        self.servers = {
            name: DevicePluginServer(
                name,
                index_devices(name, devices_per_resource),
                allocate,
                plugin_dir / endpoint_name(name),
            )
            for name in resource_names
        }
        self.registrations = 0  # completed registration rounds (all resources)
        self.last_error: str | None = None
        self._poll_interval = poll_interval
        self._backoff = (backoff_initial, backoff_max)
        self._register_timeout = register_timeout
        self._registered = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def registered(self) -> bool:
        """Every resource is registered with the current kubelet (for `/readyz`)."""
        return self._registered.is_set()

    async def wait_registered(self) -> None:
        await self._registered.wait()

    async def start(self) -> None:
        """Start `run()` in a task of its own (tests; the agent runs it under its Supervisor)."""
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name="kubelet-device-plugins")

    async def stop(self) -> None:
        """Stop the task of `start()` and every server; removes the sockets."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._registered.clear()
        for server in self.servers.values():
            await server.stop()

    async def run(self) -> None:
        """Serve, register and watch the kubelet until cancelled; never returns otherwise.

        Every failure (binding, registering, watching) is logged and retried after a backoff;
        on the way out the servers are stopped and their sockets removed."""
        try:
            await self._supervise()
        finally:
            self._registered.clear()
            for server in self.servers.values():
                await server.stop()

    async def set_healthy(self, healthy: bool) -> None:
        """Advertise every device Healthy or Unhealthy (a node whose GPUs fail)."""
        health = HEALTHY if healthy else UNHEALTHY
        for server in self.servers.values():
            devices = [Device(d.id, health, d.topology) for d in server.devices]
            await server.set_devices(devices)

    async def _supervise(self) -> None:
        delay = self._backoff[0]
        while True:
            self._registered.clear()
            try:
                identity = await self._register_all()
                delay = self._backoff[0]
                self.registrations += 1
                self.last_error = None
                self._registered.set()
                _log.info("registered %d index resources with the kubelet", len(self.servers))
                reason = await self._watch(identity)
            except Exception as error:
                self.last_error = _describe(error)
                _log.warning(
                    "device-plugin registration failed, retrying in %.1fs: %s",
                    delay,
                    self.last_error,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._backoff[1])
                continue
            _log.info("re-registering device plugins: %s", reason)

    async def _register_all(self) -> tuple[int, ...]:
        """(Re)bind the servers that are not serving and register all; the kubelet's identity."""
        for server in self.servers.values():
            if not server.serving:
                await server.stop()
                await server.start()
        identity = _identity(self.kubelet_socket)
        if identity is None:
            raise FileNotFoundError(f"{self.kubelet_socket}: kubelet socket missing")
        for server in self.servers.values():
            await server.register(self.kubelet_socket, self._register_timeout)
        return identity

    async def _watch(self, identity: tuple[int, ...]) -> str:
        """Return when the kubelet socket is recreated or one of our sockets disappears."""
        while True:
            await asyncio.sleep(self._poll_interval)
            if _identity(self.kubelet_socket) != identity:
                return "kubelet socket recreated (kubelet restart)"
            gone = [s.resource_name for s in self.servers.values() if not s.serving]
            if gone:
                return f"plugin sockets removed: {', '.join(gone)}"


def _identity(path: str) -> tuple[int, ...] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino, stat.st_ctime_ns)


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _describe(error: Exception) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return f"{type(error).__name__}: {error}"

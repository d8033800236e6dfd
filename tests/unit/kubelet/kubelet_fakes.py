"""Loopback fakes of the kubelet's gRPC services, and a deadline poll for tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from tensorfusion.adapters.kubelet import rpc
from tensorfusion.domain.devices.kubelet_messages import (
    AllocateRequest,
    AllocateResponse,
    Empty,
    ListAndWatchResponse,
    ListPodResourcesResponse,
    RegisterRequest,
)


async def eventually(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Poll `check` until it holds; fail naming `what` after `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)


class _UnixServer:
    """A grpc.aio server on a unix socket serving one generic handler."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self._server: Any = None

    async def _serve(self, handler: Any) -> None:
        self._server = grpc.aio.server()
        self._server.add_generic_rpc_handlers((handler,))
        self._server.add_insecure_port(rpc.unix_target(str(self.socket_path)))
        await self._server.start()

    async def stop(self) -> None:
        """Stop serving and remove the socket, as a stopping kubelet does."""
        if self._server is not None:
            await self._server.stop(None)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)


class FakeKubelet(_UnixServer):
    """`v1beta1.Registration`: records each RegisterRequest; can reject the first few."""

    def __init__(self, socket_path: Path, reject_first: int = 0) -> None:
        super().__init__(socket_path)
        self.requests: list[RegisterRequest] = []
        self.rejected = 0
        self._reject_first = reject_first

    async def start(self) -> FakeKubelet:
        handler = rpc.generic_handler(
            rpc.REGISTRATION_SERVICE,
            {rpc.REGISTER: rpc.unary_unary_handler(self._register, RegisterRequest)},
        )
        await self._serve(handler)
        return self

    @property
    def resource_names(self) -> list[str]:
        return [request.resource_name for request in self.requests]

    async def _register(self, request: RegisterRequest, context: Any) -> Empty:
        if self.rejected < self._reject_first:
            self.rejected += 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet busy")
        self.requests.append(request)
        return Empty()


class FakePodResourcesLister(_UnixServer):
    """`v1.PodResourcesLister/List` answering a fixed response, or failing with `error`."""

    def __init__(
        self, socket_path: Path, response: ListPodResourcesResponse, error: str | None = None
    ) -> None:
        super().__init__(socket_path)
        self.response = response
        self.error = error
        self.calls = 0

    async def start(self) -> FakePodResourcesLister:
        handler = rpc.generic_handler(
            rpc.POD_RESOURCES_SERVICE,
            {rpc.POD_RESOURCES_LIST: rpc.unary_unary_handler(self._list, Empty)},
        )
        await self._serve(handler)
        return self

    async def _list(self, _request: Empty, context: Any) -> ListPodResourcesResponse:
        self.calls += 1
        if self.error is not None:
            await context.abort(grpc.StatusCode.INTERNAL, self.error)
        return self.response


async def allocate(plugin_socket: Path, request: AllocateRequest) -> AllocateResponse:
    """Call a plugin's Allocate as the kubelet does."""
    async with rpc.unix_channel(str(plugin_socket)) as channel:
        return await rpc.call_unary(
            channel, rpc.DEVICE_PLUGIN_SERVICE, rpc.ALLOCATE, request, AllocateResponse, 5.0
        )


async def first_device_list(plugin_socket: Path) -> ListAndWatchResponse:
    """The first ListAndWatch message of a plugin."""
    async with rpc.unix_channel(str(plugin_socket)) as channel:
        call = rpc.call_unary_stream(
            channel, rpc.DEVICE_PLUGIN_SERVICE, rpc.LIST_AND_WATCH, Empty(), ListAndWatchResponse
        )
        response: ListAndWatchResponse = await asyncio.wait_for(call.read(), 5.0)
        call.cancel()
        return response

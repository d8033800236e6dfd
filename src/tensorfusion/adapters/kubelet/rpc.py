"""gRPC plumbing for the kubelet APIs with the domain's wire codec (no generated code).

Method paths of the kubelet services, method handlers built from record types, and unary /
server-streaming calls over a unix-socket channel.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final, TypeVar

import grpc
import grpc.aio

from tensorfusion.domain.devices.kubelet_messages import Message, decode, encode

__all__ = [
    "ALLOCATE",
    "DEVICE_PLUGIN_SERVICE",
    "GET_DEVICE_PLUGIN_OPTIONS",
    "GET_PREFERRED_ALLOCATION",
    "LIST_AND_WATCH",
    "MAX_MESSAGE_BYTES",
    "POD_RESOURCES_LIST",
    "POD_RESOURCES_SERVICE",
    "PRE_START_CONTAINER",
    "REGISTER",
    "REGISTRATION_SERVICE",
    "call_unary",
    "call_unary_stream",
    "generic_handler",
    "unary_stream_handler",
    "unary_unary_handler",
    "unix_channel",
    "unix_target",
]

REGISTRATION_SERVICE: Final = "v1beta1.Registration"
DEVICE_PLUGIN_SERVICE: Final = "v1beta1.DevicePlugin"
POD_RESOURCES_SERVICE: Final = "v1.PodResourcesLister"
REGISTER: Final = "Register"
GET_DEVICE_PLUGIN_OPTIONS: Final = "GetDevicePluginOptions"
LIST_AND_WATCH: Final = "ListAndWatch"
GET_PREFERRED_ALLOCATION: Final = "GetPreferredAllocation"
ALLOCATE: Final = "Allocate"
PRE_START_CONTAINER: Final = "PreStartContainer"
POD_RESOURCES_LIST: Final = "List"
MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024  # the kubelet's own limit for pod-resources

Req = TypeVar("Req", bound=Message)
Resp = TypeVar("Resp", bound=Message)


def unix_target(path: str) -> str:
    """The gRPC target of a unix socket path."""
    return f"unix:{path}"


def unix_channel(path: str) -> Any:
    """An insecure `grpc.aio` channel to a unix socket (16 MiB message limit)."""
    options = [
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ]
    return grpc.aio.insecure_channel(unix_target(path), options=options)


def unary_unary_handler(
    behaviour: Callable[[Req, Any], Awaitable[Message]], request_type: type[Req]
) -> Any:
    """A unary method handler decoding `request_type` and encoding the answer."""
    return grpc.unary_unary_rpc_method_handler(
        behaviour,
        request_deserializer=lambda data: decode(request_type, data),
        response_serializer=encode,
    )


def unary_stream_handler(
    behaviour: Callable[[Req, Any], AsyncIterator[Message]], request_type: type[Req]
) -> Any:
    """A server-streaming method handler (the behaviour is an async generator)."""
    return grpc.unary_stream_rpc_method_handler(
        behaviour,
        request_deserializer=lambda data: decode(request_type, data),
        response_serializer=encode,
    )


def generic_handler(service: str, methods: dict[str, Any]) -> Any:
    """The generic handler serving `methods` (name -> method handler) of `service`."""
    return grpc.method_handlers_generic_handler(service, methods)


async def call_unary(
    channel: Any,
    service: str,
    method: str,
    request: Message,
    response_type: type[Resp],
    timeout: float,
) -> Resp:
    """Call a unary method; raises `grpc.aio.AioRpcError` on failure."""
    stub = channel.unary_unary(
        f"/{service}/{method}",
        request_serializer=encode,
        response_deserializer=lambda data: decode(response_type, data),
    )
    response: Resp = await stub(request, timeout=timeout)
    return response


def call_unary_stream(
    channel: Any, service: str, method: str, request: Message, response_type: type[Resp]
) -> Any:
    """Start a server-streaming call; iterate the returned call with `async for`."""
    stub = channel.unary_stream(
        f"/{service}/{method}",
        request_serializer=encode,
        response_deserializer=lambda data: decode(response_type, data),
    )
    return stub(request)

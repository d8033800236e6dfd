"""The kubelet's gRPC messages as records, encoded by `protobuf_wire`.

Device-plugin API `v1beta1` (Registration, DevicePlugin) and pod-resources API `v1`
(PodResourcesLister.List), field numbers as in the kubelet's `api.proto` files. Each record
lists its fields (`FIELDS`: number, attribute, kind); `encode(record)` writes proto3 bytes
(defaults omitted) and `decode(RecordType, data)` reads them, skipping unknown fields, so newer
kubelets with more fields still decode. Malformed bytes raise `WireError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Final

from tensorfusion.domain.devices.protobuf_wire import (
    Kind,
    Message,
    WireError,
    WireField,
    decode,
    encode,
)

__all__ = [
    "API_VERSION",
    "HEALTHY",
    "UNHEALTHY",
    "AllocateRequest",
    "AllocateResponse",
    "CDIDevice",
    "ContainerAllocateRequest",
    "ContainerAllocateResponse",
    "ContainerDevices",
    "ContainerPreferredAllocationRequest",
    "ContainerPreferredAllocationResponse",
    "ContainerResources",
    "Device",
    "DevicePluginOptions",
    "DeviceSpec",
    "Empty",
    "Kind",
    "KubeletPodResources",
    "ListAndWatchResponse",
    "ListPodResourcesResponse",
    "Message",
    "Mount",
    "NUMANode",
    "PreStartContainerRequest",
    "PreferredAllocationRequest",
    "PreferredAllocationResponse",
    "RegisterRequest",
    "TopologyInfo",
    "WireError",
    "WireField",
    "decode",
    "encode",
]

API_VERSION: Final = "v1beta1"
HEALTHY: Final = "Healthy"
UNHEALTHY: Final = "Unhealthy"


def _f(number: int, name: str, kind: Kind, message: type[Message] | None = None) -> WireField:
    return WireField(number, name, kind, message)


# --- device-plugin API v1beta1 -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Empty(Message):
    """`Empty`, also the (empty) PreStartContainerResponse and ListPodResourcesRequest."""


@dataclass(frozen=True, slots=True)
class DevicePluginOptions(Message):
    pre_start_required: bool = False
    get_preferred_allocation_available: bool = False
    FIELDS: ClassVar = (
        _f(1, "pre_start_required", Kind.BOOL),
        _f(2, "get_preferred_allocation_available", Kind.BOOL),
    )


@dataclass(frozen=True, slots=True)
class RegisterRequest(Message):
    version: str = ""
    endpoint: str = ""  # socket file name inside the device-plugins directory
    resource_name: str = ""
    options: DevicePluginOptions | None = None
    FIELDS: ClassVar = (
        _f(1, "version", Kind.STRING),
        _f(2, "endpoint", Kind.STRING),
        _f(3, "resource_name", Kind.STRING),
        _f(4, "options", Kind.MESSAGE, DevicePluginOptions),
    )


@dataclass(frozen=True, slots=True)
class NUMANode(Message):
    id: int = 0
    FIELDS: ClassVar = (_f(1, "id", Kind.INT),)


@dataclass(frozen=True, slots=True)
class TopologyInfo(Message):
    nodes: tuple[NUMANode, ...] = ()
    FIELDS: ClassVar = (_f(1, "nodes", Kind.MESSAGES, NUMANode),)


@dataclass(frozen=True, slots=True)
class Device(Message):
    id: str = ""
    health: str = ""
    topology: TopologyInfo | None = None
    FIELDS: ClassVar = (
        _f(1, "id", Kind.STRING),
        _f(2, "health", Kind.STRING),
        _f(3, "topology", Kind.MESSAGE, TopologyInfo),
    )


@dataclass(frozen=True, slots=True)
class ListAndWatchResponse(Message):
    devices: tuple[Device, ...] = ()
    FIELDS: ClassVar = (_f(1, "devices", Kind.MESSAGES, Device),)


@dataclass(frozen=True, slots=True)
class PreStartContainerRequest(Message):
    devices_ids: tuple[str, ...] = ()
    FIELDS: ClassVar = (_f(1, "devices_ids", Kind.STRINGS),)


@dataclass(frozen=True, slots=True)
class ContainerPreferredAllocationRequest(Message):
    available_device_ids: tuple[str, ...] = ()
    must_include_device_ids: tuple[str, ...] = ()
    allocation_size: int = 0
    FIELDS: ClassVar = (
        _f(1, "available_device_ids", Kind.STRINGS),
        _f(2, "must_include_device_ids", Kind.STRINGS),
        _f(3, "allocation_size", Kind.INT),
    )


@dataclass(frozen=True, slots=True)
class PreferredAllocationRequest(Message):
    container_requests: tuple[ContainerPreferredAllocationRequest, ...] = ()
    FIELDS: ClassVar = (
        _f(1, "container_requests", Kind.MESSAGES, ContainerPreferredAllocationRequest),
    )


@dataclass(frozen=True, slots=True)
class ContainerPreferredAllocationResponse(Message):
    device_ids: tuple[str, ...] = ()
    FIELDS: ClassVar = (_f(1, "device_ids", Kind.STRINGS),)


@dataclass(frozen=True, slots=True)
class PreferredAllocationResponse(Message):
    container_responses: tuple[ContainerPreferredAllocationResponse, ...] = ()
    FIELDS: ClassVar = (
        _f(1, "container_responses", Kind.MESSAGES, ContainerPreferredAllocationResponse),
    )


@dataclass(frozen=True, slots=True)
class ContainerAllocateRequest(Message):
    devices_ids: tuple[str, ...] = ()
    FIELDS: ClassVar = (_f(1, "devices_ids", Kind.STRINGS),)


@dataclass(frozen=True, slots=True)
class AllocateRequest(Message):
    container_requests: tuple[ContainerAllocateRequest, ...] = ()
    FIELDS: ClassVar = (_f(1, "container_requests", Kind.MESSAGES, ContainerAllocateRequest),)


@dataclass(frozen=True, slots=True)
class CDIDevice(Message):
    name: str = ""
    FIELDS: ClassVar = (_f(1, "name", Kind.STRING),)


@dataclass(frozen=True, slots=True)
class Mount(Message):
    container_path: str = ""
    host_path: str = ""
    read_only: bool = False
    FIELDS: ClassVar = (
        _f(1, "container_path", Kind.STRING),
        _f(2, "host_path", Kind.STRING),
        _f(3, "read_only", Kind.BOOL),
    )


@dataclass(frozen=True, slots=True)
class DeviceSpec(Message):
    container_path: str = ""
    host_path: str = ""
    permissions: str = ""
    FIELDS: ClassVar = (
        _f(1, "container_path", Kind.STRING),
        _f(2, "host_path", Kind.STRING),
        _f(3, "permissions", Kind.STRING),
    )


@dataclass(frozen=True, slots=True)
class ContainerAllocateResponse(Message):
    envs: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    devices: tuple[DeviceSpec, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    cdi_devices: tuple[CDIDevice, ...] = ()
    FIELDS: ClassVar = (
        _f(1, "envs", Kind.STRING_MAP),
        _f(2, "mounts", Kind.MESSAGES, Mount),
        _f(3, "devices", Kind.MESSAGES, DeviceSpec),
        _f(4, "annotations", Kind.STRING_MAP),
        _f(5, "cdi_devices", Kind.MESSAGES, CDIDevice),
    )


@dataclass(frozen=True, slots=True)
class AllocateResponse(Message):
    container_responses: tuple[ContainerAllocateResponse, ...] = ()
    FIELDS: ClassVar = (_f(1, "container_responses", Kind.MESSAGES, ContainerAllocateResponse),)


# --- pod-resources API v1 ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContainerDevices(Message):
    resource_name: str = ""
    device_ids: tuple[str, ...] = ()
    topology: TopologyInfo | None = None
    FIELDS: ClassVar = (
        _f(1, "resource_name", Kind.STRING),
        _f(2, "device_ids", Kind.STRINGS),
        _f(3, "topology", Kind.MESSAGE, TopologyInfo),
    )


@dataclass(frozen=True, slots=True)
class ContainerResources(Message):
    name: str = ""
    devices: tuple[ContainerDevices, ...] = ()
    FIELDS: ClassVar = (
        _f(1, "name", Kind.STRING),
        _f(2, "devices", Kind.MESSAGES, ContainerDevices),
    )


@dataclass(frozen=True, slots=True)
class KubeletPodResources(Message):
    name: str = ""
    namespace: str = ""
    containers: tuple[ContainerResources, ...] = ()
    FIELDS: ClassVar = (
        _f(1, "name", Kind.STRING),
        _f(2, "namespace", Kind.STRING),
        _f(3, "containers", Kind.MESSAGES, ContainerResources),
    )


@dataclass(frozen=True, slots=True)
class ListPodResourcesResponse(Message):
    pod_resources: tuple[KubeletPodResources, ...] = ()
    FIELDS: ClassVar = (_f(1, "pod_resources", Kind.MESSAGES, KubeletPodResources),)

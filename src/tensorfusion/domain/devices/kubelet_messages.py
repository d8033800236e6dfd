"""The kubelet's gRPC messages as records, with a small protobuf wire codec.

Device-plugin API `v1beta1` (Registration, DevicePlugin) and pod-resources API `v1`
(PodResourcesLister.List), field numbers as in the kubelet's `api.proto` files. Each record
lists its fields (`FIELDS`: number, attribute, kind); `encode(record)` writes proto3 bytes
(defaults omitted) and `decode(RecordType, data)` reads them, skipping unknown fields, so newer
kubelets with more fields still decode. Malformed bytes raise `WireError`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Final, TypeVar

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
    "ListAndWatchResponse",
    "ListPodResourcesResponse",
    "Message",
    "Mount",
    "NUMANode",
    "PodResources",
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

_VARINT: Final = 0
_I64: Final = 1
_LEN: Final = 2
_I32: Final = 5
_MASK64: Final = (1 << 64) - 1


class WireError(ValueError):
    """Bytes that are not a valid encoding of the expected message."""


class Kind(Enum):
    """How a field is written on the wire."""

    STRING = "string"
    BOOL = "bool"
    INT = "int"  # int32 / int64 (two's complement varint)
    MESSAGE = "message"
    STRINGS = "repeated string"
    MESSAGES = "repeated message"
    STRING_MAP = "map<string, string>"


@dataclass(frozen=True, slots=True)
class WireField:
    """One field of a message: its number, the record attribute and how it is encoded."""

    number: int
    name: str
    kind: Kind
    message: type[Message] | None = None


class Message:
    """Base of every record: `FIELDS` describes its wire form."""

    __slots__ = ()
    FIELDS: ClassVar[tuple[WireField, ...]] = ()


M = TypeVar("M", bound=Message)


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
class PodResources(Message):
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
    pod_resources: tuple[PodResources, ...] = ()
    FIELDS: ClassVar = (_f(1, "pod_resources", Kind.MESSAGES, PodResources),)


# --- the codec ---------------------------------------------------------------------------


def encode(message: Message) -> bytes:
    """The proto3 wire form of `message` (fields in number order, defaults omitted)."""
    out = bytearray()
    for wire_field in message.FIELDS:
        _encode_field(out, wire_field, getattr(message, wire_field.name))
    return bytes(out)


def decode(cls: type[M], data: bytes) -> M:
    """Read a `cls` from its wire form; unknown fields are skipped."""
    by_number = {wire_field.number: wire_field for wire_field in cls.FIELDS}
    values: dict[str, Any] = {}
    for number, wire_type, payload in _read_fields(data):
        wire_field = by_number.get(number)
        if wire_field is None:
            continue
        expected = _VARINT if wire_field.kind in (Kind.BOOL, Kind.INT) else _LEN
        if wire_type != expected:
            raise WireError(
                f"{cls.__name__}.{wire_field.name}: wire type {wire_type}, expected {expected}"
            )
        _decode_field(values, wire_field, payload, cls.__name__)
    for wire_field in cls.FIELDS:
        if wire_field.kind in (Kind.STRINGS, Kind.MESSAGES) and wire_field.name in values:
            values[wire_field.name] = tuple(values[wire_field.name])
    factory: Any = cls
    result: M = factory(**values)
    return result


def _encode_field(out: bytearray, wire_field: WireField, value: Any) -> None:
    number, kind = wire_field.number, wire_field.kind
    if kind is Kind.STRING:
        if value:
            _write_bytes(out, number, value.encode("utf-8"))
    elif kind in (Kind.BOOL, Kind.INT):
        if value:
            _write_varint(out, (number << 3) | _VARINT)
            _write_varint(out, int(value) & _MASK64)
    elif kind is Kind.MESSAGE:
        if value is not None:
            _write_bytes(out, number, encode(value))
    elif kind is Kind.STRINGS:
        for item in value:
            _write_bytes(out, number, item.encode("utf-8"))
    elif kind is Kind.MESSAGES:
        for item in value:
            _write_bytes(out, number, encode(item))
    else:  # Kind.STRING_MAP: entries are messages {key = 1, value = 2}
        for key, item in value.items():
            entry = bytearray()
            _write_bytes(entry, 1, key.encode("utf-8"))
            _write_bytes(entry, 2, item.encode("utf-8"))
            _write_bytes(out, number, bytes(entry))


def _decode_field(values: dict[str, Any], wire_field: WireField, payload: Any, owner: str) -> None:
    name, kind = wire_field.name, wire_field.kind
    where = f"{owner}.{name}"
    if kind is Kind.STRING:
        values[name] = _text(payload, where)
    elif kind is Kind.BOOL:
        values[name] = payload != 0
    elif kind is Kind.INT:
        values[name] = payload - (1 << 64) if payload >= 1 << 63 else payload
    elif kind is Kind.MESSAGE:
        assert wire_field.message is not None
        values[name] = decode(wire_field.message, payload)
    elif kind is Kind.STRINGS:
        values.setdefault(name, []).append(_text(payload, where))
    elif kind is Kind.MESSAGES:
        assert wire_field.message is not None
        values.setdefault(name, []).append(decode(wire_field.message, payload))
    else:
        key, item = "", ""
        for number, wire_type, entry_payload in _read_fields(payload):
            if number in (1, 2) and wire_type != _LEN:
                raise WireError(f"{where}: map entry field {number} has wire type {wire_type}")
            if number == 1:
                key = _text(entry_payload, where)
            elif number == 2:
                item = _text(entry_payload, where)
        values.setdefault(name, {})[key] = item


def _text(payload: bytes, where: str) -> str:
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError as error:
        raise WireError(f"{where}: not UTF-8 ({error.reason})") from None


def _write_varint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _write_bytes(out: bytearray, number: int, payload: bytes) -> None:
    _write_varint(out, (number << 3) | _LEN)
    _write_varint(out, len(payload))
    out += payload


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    for count in range(10):
        if pos >= len(data):
            raise WireError(f"truncated varint at byte {pos}")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if count == 9 and byte > 1:
                raise WireError(f"varint overflows 64 bits at byte {pos - 1}")
            return result, pos
        shift += 7
    raise WireError(f"varint longer than 10 bytes at byte {pos}")


def _read_fields(data: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, int or bytes payload) for each field of `data`."""
    pos = 0
    while pos < len(data):
        start = pos
        key, pos = _read_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise WireError(f"field number 0 at byte {start}")
        payload: Any
        if wire_type == _VARINT:
            payload, pos = _read_varint(data, pos)
        elif wire_type in (_I64, _I32, _LEN):
            if wire_type == _LEN:
                size, pos = _read_varint(data, pos)
            else:
                size = 8 if wire_type == _I64 else 4
            if pos + size > len(data):
                raise WireError(f"field {number} at byte {start}: {size} bytes past the end")
            payload, pos = data[pos : pos + size], pos + size
        else:
            raise WireError(f"field {number} at byte {start}: unsupported wire type {wire_type}")
        yield number, wire_type, payload

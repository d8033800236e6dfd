"""A small proto3 wire codec for records that describe their fields (`FIELDS`: number,
attribute, kind): `encode(record)` writes the bytes (defaults omitted), `decode(RecordType,
data)` reads them, skipping unknown fields; malformed bytes raise `WireError`. Enough for the
kubelet's messages (`kubelet_messages`), no generated code.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar, Final, TypeVar

__all__ = ["Kind", "Message", "WireError", "WireField", "decode", "encode"]

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

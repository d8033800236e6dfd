"""InfluxDB line protocol: encoding of rows (metrics.md §6.2) and parsing for the embedded store."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from typing import Final

import orjson

from tensorfusion.domain.metrics.rows import FieldValue, MetricRow

__all__ = [
    "LineProtocolError",
    "UnencodableError",
    "encode_row",
    "encode_rows",
    "parse_lines",
    "parse_records",
]

_PRECISION_TO_MS: Final[dict[str, tuple[int, int]]] = {
    # precision: (multiply, divide) to reach milliseconds
    "ms": (1, 1),
    "s": (1000, 1),
    "us": (1, 1000),
    "ns": (1, 1_000_000),
}
_CACHE_LIMIT: Final = 65_536


class LineProtocolError(ValueError):
    """A line that does not parse; the message names the line number and the problem."""


class UnencodableError(ValueError):
    """A row that line protocol cannot carry unambiguously; names the table, key and value."""


class _BadTextError(ValueError):
    """A key or tag value that cannot be written (the caller adds where it occurs)."""


# Tag keys, tag values and field keys: `,`, `=` and space are escaped; CR and LF cannot be
# carried at all and become an escaped space; a tab is written as it is, except at the start of
# a key (parsers take a tab after the space before the fields as whitespace, so such a key is
# refused); two keys that differ only in CR, LF or space (so end up the same) are refused.
_KEY_ESCAPES: Final = str.maketrans({",": "\\,", "=": "\\=", " ": "\\ ", "\n": "\\ ", "\r": "\\ "})
# Parsers disagree on a backslash before these (GreptimeDB reads `\\` as one backslash,
# InfluxDB as two) and all of them misread one at the end of the text.
_UNSAFE_AFTER_BACKSLASH: Final = frozenset("\\,= \n\r")

_tag_cache: dict[str, str] = {}
_key_cache: dict[str, str] = {}


def _check_utf8(text: str) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise _BadTextError(
            f"{text!a} cannot be written: character U+{ord(text[error.start]):04X} at "
            f"position {error.start + 1} is a lone surrogate, which UTF-8 cannot encode"
        ) from None


def _check_backslashes(text: str) -> None:
    index = text.find("\\")
    while index >= 0:
        if index + 1 == len(text) or text[index + 1] in _UNSAFE_AFTER_BACKSLASH:
            raise _BadTextError(
                f"{text!r} cannot be written: a backslash is allowed only before a character "
                "other than a backslash, ',', '=', space, CR or LF, and not at the end"
            )
        index = text.find("\\", index + 2)


def _escape_tag(value: str) -> str:
    cached = _tag_cache.get(value)
    if cached is not None:
        return cached
    _check_utf8(value)
    if "\\" in value:
        _check_backslashes(value)
    escaped = value.translate(_KEY_ESCAPES)
    if len(_tag_cache) >= _CACHE_LIMIT:
        _tag_cache.clear()
    _tag_cache[value] = escaped
    return escaped


def _key_prefix(key: str) -> str:
    """`key=` with the key escaped (tag keys and field keys escape the same characters)."""
    cached = _key_cache.get(key)
    if cached is not None:
        return cached
    if key.startswith("\t"):
        raise _BadTextError(
            f"{key!r} cannot be written: a key must not begin with a tab (parsers read a tab "
            "before the fields as whitespace)"
        )
    prefix = _escape_tag(key) + "="
    if len(_key_cache) >= _CACHE_LIMIT:
        _key_cache.clear()
    _key_cache[key] = prefix
    return prefix


def _escape_measurement(name: str) -> str:
    _check_utf8(name)
    return name.replace(",", "\\,").replace(" ", "\\ ")


def _string_field(value: str) -> str:
    _check_utf8(value)
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _collision(keys: Iterable[str], prefixes: Iterable[str]) -> tuple[str, str] | None:
    """Two keys written the same way (CR and LF read back as a space), or None."""
    seen: dict[str, str] = {}
    for key, prefix in zip(keys, prefixes, strict=True):
        first = seen.setdefault(prefix, key)
        if first != key:
            return first, key
    return None


def _collision_message(kind: str, pair: tuple[str, str]) -> str:
    return (
        f"{kind}s {pair[0]!r} and {pair[1]!r} cannot both be written: CR and LF are written as "
        "a space, so both would read back as the same key"
    )


class _Shape:
    """A compiled line layout for rows of one table with the same keys and field types."""

    __slots__ = ("template",)

    def __init__(self, table: str, tag_keys: tuple[str, ...], fields: tuple[tuple[str, type], ...]):
        field_keys = [key for key, _ in fields]
        for what, keys in (("tag key", tag_keys), ("field key", field_keys)):
            pair = _collision(keys, map(_key_prefix, keys))
            if pair is not None:
                raise _BadTextError(_collision_message(what, pair))
        parts = [_escape_measurement(table).replace("%", "%%")]
        for key in tag_keys:
            parts.append("," + _key_prefix(key).replace("%", "%%") + "%s")
        separator = " "
        for key, kind in fields:
            suffix = "i" if kind is int else ""
            parts.append(separator + _key_prefix(key).replace("%", "%%") + "%s" + suffix)
            separator = ","
        parts.append(" %d")
        self.template = "".join(parts)


# Keyed by (table, tag keys..., "", field keys..., field types...): one flat tuple per row.
_shapes: dict[tuple[object, ...], _Shape | None] = {}
_FAST_TYPES: Final = frozenset({float, int, bool})


def _shape_for(row: MetricRow) -> _Shape | None:
    fields = row.fields
    key = (row.table, *row.tags, "", *fields, *map(type, fields.values()))
    shape = _shapes.get(key, _MISSING_SHAPE)
    if shape is _MISSING_SHAPE:
        field_types = tuple(map(type, fields.values()))
        if fields and all(kind in _FAST_TYPES for kind in field_types):
            shape = _Shape(
                row.table, tuple(row.tags), tuple(zip(row.fields, field_types, strict=False))
            )
        else:
            shape = None
        if len(_shapes) >= _CACHE_LIMIT:
            _shapes.clear()
        _shapes[key] = shape
    return shape


_MISSING_SHAPE: Final = _Shape("", (), ())


def encode_row(row: MetricRow, skipped: set[tuple[str, str]] | None = None) -> str | None:
    """One line for a row, or None when no field remains (all skipped).

    Empty tags are left out; NaN and infinite floats are skipped and, when `skipped` is given,
    recorded there as (table, column) so the caller can log each column once. Floats are
    written with shortest round-trip digits.
    Raises UnencodableError for a key or tag value that no parser would read back as written.
    """
    try:
        shape = _shape_for(row)
        if shape is not None:
            tag_values = row.tags.values()
            if all(tag_values):
                numbers = orjson.dumps(list(row.fields.values()))
                if b"null" not in numbers:
                    cache = _tag_cache
                    return shape.template % (
                        *[cache.get(v) or _escape_tag(v) for v in tag_values],
                        *numbers[1:-1].decode("ascii").split(","),
                        row.ts_ms,
                    )
    except _BadTextError:
        pass  # the general path names the offending key
    return _encode_slow(row, skipped)


def _escaped(table: str, where: str, text: str, escape: Callable[[str], str]) -> str:
    try:
        return escape(text)
    except _BadTextError as error:
        raise UnencodableError(f"table {table}, {where}: {error}") from None


def _encode_slow(row: MetricRow, skipped: set[tuple[str, str]] | None) -> str | None:
    table = row.table
    parts = [_escaped(table, "measurement", table, _escape_measurement)]
    tags = {
        tag: _escaped(table, "tag key", tag, _key_prefix)
        for tag, value in row.tags.items()
        if value
    }
    pair = _collision(tags, tags.values())
    if pair is not None:
        raise UnencodableError(f"table {table}: {_collision_message('tag key', pair)}")
    for tag, prefix in tags.items():
        parts.append("," + prefix + _escaped(table, f"tag {tag!r}", row.tags[tag], _escape_tag))
    written: dict[str, str] = {}
    separator = " "
    for key, value in row.fields.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, float):
            if not math.isfinite(value):
                if skipped is not None:
                    skipped.add((row.table, key))
                continue
            text = repr(value)
        elif isinstance(value, int):
            text = f"{value}i"
        elif isinstance(value, str):
            text = _escaped(table, f"field {key!r}", value, _string_field)
        else:
            text = _encode_other(row.table, key, value)
        prefix = _escaped(table, "field key", key, _key_prefix)
        first = written.setdefault(prefix, key)
        if first != key:
            raise UnencodableError(
                f"table {table}: {_collision_message('field key', (first, key))}"
            )
        parts.append(separator + prefix + text)
        separator = ","
    if separator == " ":
        return None
    parts.append(f" {row.ts_ms}")
    return "".join(parts)


def _encode_other(table: str, key: str, value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{int(value)}i"
    if isinstance(value, float):
        return repr(float(value))
    raise TypeError(
        f"table {table}, field {key}: {value!r} has type {type(value).__name__}; "
        "allowed: float, int, bool, str"
    )


def encode_rows(rows: Iterable[MetricRow], skipped: set[tuple[str, str]] | None = None) -> str:
    """Lines for many rows joined by newlines (rows with no field are left out)."""
    lines = [line for row in rows if (line := encode_row(row, skipped)) is not None]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------- parsing


def _records(body: str) -> Iterator[tuple[int, list[str]]]:
    """Split a body into (line number, [head, fields, timestamp?]) records.

    Backslash escapes are kept for the later steps; double quotes delimit strings only in the
    field section, where they may contain newlines.
    """
    line_number = 1
    sections: list[str] = []
    current: list[str] = []
    section = 0
    in_string = False
    start_line = 1
    index = 0
    length = len(body)
    while index <= length:
        char = body[index] if index < length else "\n"
        if index < length and char == "\\" and index + 1 < length and body[index + 1] != "\n":
            current.append(body[index : index + 2])
            index += 2
            continue
        if in_string:
            if char == '"':
                in_string = False
            if char == "\n":
                line_number += 1
            current.append(char)
            index += 1
            continue
        if char == '"' and section == 1 and current and current[-1] == "=":
            in_string = True
            current.append(char)
        elif char == " " or (char == "\t" and not current):
            # A tab inside a key or value belongs to it; between sections it is whitespace.
            if current:
                sections.append("".join(current))
                current = []
                section += 1
        elif char in {"\n", "\r"}:
            if current:
                sections.append("".join(current))
                current = []
            if sections and not sections[0].startswith("#"):
                yield start_line, sections
            sections = []
            section = 0
            if char == "\n":
                line_number += 1
            start_line = line_number
        else:
            current.append(char)
        index += 1
    if in_string:
        raise LineProtocolError(f"line {start_line}: unterminated string field")


def _split_unescaped(text: str, separator: str, *, quotes: bool) -> list[str]:
    """Split on a separator not escaped by a backslash (and outside strings when `quotes`)."""
    parts: list[str] = []
    current: list[str] = []
    index = 0
    in_string = False
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            current.append(text[index : index + 2])
            index += 2
            continue
        if quotes and char == '"':
            in_string = not in_string
        if char == separator and not in_string:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
        index += 1
    parts.append("".join(current))
    return parts


def _unescape(text: str) -> str:
    """Undo the escapes of measurement, tag and field keys: `\\,`, `\\=`, `\\ `."""
    if "\\" not in text:
        return text
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text) and text[index + 1] in ",= ":
            out.append(text[index + 1])
            index += 2
            continue
        out.append(char)
        index += 1
    return "".join(out)


def _parse_field_value(text: str, line_number: int, key: str) -> FieldValue:
    if not text:
        raise LineProtocolError(f"line {line_number}: field {key[:100]!r} has no value")
    if text[0] == '"':
        if len(text) < 2 or text[-1] != '"':
            raise LineProtocolError(f"line {line_number}: field {key[:100]!r}: unterminated string")
        body = text[1:-1]
        out: list[str] = []
        index = 0
        while index < len(body):
            char = body[index]
            if char == "\\" and index + 1 < len(body) and body[index + 1] in '"\\':
                out.append(body[index + 1])
                index += 2
                continue
            out.append(char)
            index += 1
        return "".join(out)
    if text in ("t", "T", "true", "True", "TRUE"):
        return True
    if text in ("f", "F", "false", "False", "FALSE"):
        return False
    if text[-1] in "iu":
        try:
            return int(text[:-1])
        except ValueError:
            raise LineProtocolError(
                f"line {line_number}: field {key[:100]!r}: {text[:100]!r} is not an integer"
            ) from None
    try:
        value = float(text)
    except ValueError:
        raise LineProtocolError(
            f"line {line_number}: field {key[:100]!r}: {text[:100]!r} is not a number, "
            "boolean or string"
        ) from None
    if not math.isfinite(value):
        raise LineProtocolError(
            f"line {line_number}: field {key[:100]!r}: {text[:100]!r} is not finite"
        )
    return value


def _precision_factors(precision: str) -> tuple[int, int]:
    try:
        return _PRECISION_TO_MS[precision]
    except KeyError:
        raise LineProtocolError(
            f"precision {precision!r} is not supported; allowed: {', '.join(_PRECISION_TO_MS)}"
        ) from None


def _parse_record(
    line_number: int, sections: list[str], factors: tuple[int, int], default_ts_ms: int
) -> MetricRow:
    if len(sections) not in (2, 3):
        raise LineProtocolError(
            f"line {line_number}: expected 'measurement[,tags] fields [timestamp]'"
        )
    head = _split_unescaped(sections[0], ",", quotes=False)
    measurement = _unescape(head[0])
    if not measurement:
        raise LineProtocolError(f"line {line_number}: missing measurement")
    tags: dict[str, str] = {}
    for pair in head[1:]:
        key, sep, value = _partition_unescaped(pair)
        if not sep or not key or not value:
            raise LineProtocolError(f"line {line_number}: malformed tag {pair[:100]!r}")
        tags[_unescape(key)] = _unescape(value)
    fields: dict[str, FieldValue] = {}
    for pair in _split_unescaped(sections[1], ",", quotes=True):
        key, sep, value = _partition_unescaped(pair)
        if not sep or not key:
            raise LineProtocolError(f"line {line_number}: malformed field {pair[:100]!r}")
        name = _unescape(key)
        fields[name] = _parse_field_value(value, line_number, name)
    if len(sections) < 3:
        return MetricRow(measurement, default_ts_ms, tags, fields)
    stamp_text = sections[2]
    digits = stamp_text.removeprefix("-")
    if len(digits) > 32 or not (digits.isascii() and digits.isdigit()):
        raise LineProtocolError(
            f"line {line_number}: timestamp {stamp_text[:40]!r} is not an integer"
        )
    multiply, divide = factors
    return MetricRow(measurement, int(stamp_text) * multiply // divide, tags, fields)


def parse_records(
    body: str, *, precision: str = "ms", default_ts_ms: int = 0
) -> Iterator[MetricRow | LineProtocolError]:
    """Each line of a body parsed on its own: its row, or the error naming the line (an
    unterminated string at the end is the last item). LineProtocolError for a bad precision."""
    factors = _precision_factors(precision)
    records = _records(body)
    while True:
        try:
            line_number, sections = next(records)
        except StopIteration:
            return
        except LineProtocolError as error:
            yield error
            return
        try:
            yield _parse_record(line_number, sections, factors, default_ts_ms)
        except LineProtocolError as error:
            yield error


def parse_lines(body: str, *, precision: str = "ms", default_ts_ms: int = 0) -> list[MetricRow]:
    """Parse a body whole; raises LineProtocolError naming the first bad line."""
    rows: list[MetricRow] = []
    for item in parse_records(body, precision=precision, default_ts_ms=default_ts_ms):
        if isinstance(item, LineProtocolError):
            raise item
        rows.append(item)
    return rows


def _partition_unescaped(pair: str) -> tuple[str, str, str]:
    index = 0
    while index < len(pair):
        char = pair[index]
        if char == "\\":
            index += 2
            continue
        if char == "=":
            return pair[:index], "=", pair[index + 1 :]
        index += 1
    return pair, "", ""

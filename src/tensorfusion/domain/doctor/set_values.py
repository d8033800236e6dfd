"""Helm's `--set` syntax (its `strvals` parser), for `tensor-fusion doctor --set` (doctor.md).

`a.b.c=v` nests maps, `a\\.b=v` is the key `a.b` (a backslash escapes any character, `\\,` a
comma), `a[0].b=v` and `a[2]=v` index lists (growing them with nulls), `a={x,y}` is a list,
`a=1,b=2` two assignments. Values are typed as Helm types them: `true`/`false` (any case) are
booleans, `null` is null (which deletes the key when merged over the chart's values), `0` and
integers that do not start with `0` are integers, everything else (`1.5`, `007`, ``) is a string.
Expressions are applied in order into the user's values, as `helm --set` applies them.

Helm accepts a few expressions that set nothing (`=v`, `a.`, `a[0]` without a value); those
are refused here, like every expression Helm rejects, with a `SetError` naming the expression.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = [
    "MAX_INDEX",
    "MAX_NESTED_NAME_LEVEL",
    "SetError",
    "apply_sets",
    "parse_set",
    "typed_value",
]

MAX_INDEX: Final = 65536
"""Helm's largest list index."""
MAX_NESTED_NAME_LEVEL: Final = 30
"""Helm's deepest `a.b.c...` nesting."""

_INTEGER: Final = re.compile(r"[+-]?[0-9]+")
_INT64: Final = range(-(2**63), 2**63)


class SetError(ValueError):
    """A `--set` expression that cannot be applied; the message names it and the problem."""


def parse_set(expression: str) -> dict[str, Any]:
    """The values one `--set` expression writes, on its own."""
    return apply_sets({}, [expression])


def apply_sets(values: Mapping[str, Any], expressions: Sequence[str]) -> dict[str, Any]:
    """A copy of `values` with each expression applied in order (Helm's `strvals.ParseInto`).

    Apply them to the user's values (the merged `--values` files), then merge the result over
    the chart's values: an index then replaces the chart's list, as with Helm.
    """
    data = copy.deepcopy(dict(values))
    for expression in expressions:
        _SetExpressionParser(expression, data).parse()
    return data


def typed_value(text: str) -> Any:
    """A `--set` value as Helm types it."""
    folded = text.casefold()
    if folded == "true":
        return True
    if folded == "false":
        return False
    if folded == "null":
        return None
    if text == "0":
        return 0
    if text and text[0] != "0" and _INTEGER.fullmatch(text) and int(text) in _INT64:
        return int(text)
    return text


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return "map"
    if isinstance(value, list):
        return "list"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "string"


class _SetExpressionParser:
    """One expression, read character by character as Helm's parser reads it."""

    def __init__(self, expression: str, data: dict[str, Any]) -> None:
        self.text = expression
        self.position = 0
        self.data = data

    def fail(self, problem: str) -> SetError:
        return SetError(f'--set "{self.text}": {problem}')

    def at_end(self) -> bool:
        return self.position >= len(self.text)

    def read_until(self, stops: str) -> tuple[str, str | None]:
        """Characters up to a stop character (consumed and returned; None at the end)."""
        chars: list[str] = []
        while not self.at_end():
            char = self.text[self.position]
            self.position += 1
            if char in stops:
                return "".join(chars), char
            if char == "\\":
                if self.at_end():
                    break  # Helm drops a trailing lone backslash
                chars.append(self.text[self.position])
                self.position += 1
                continue
            chars.append(char)
        return "".join(chars), None

    def parse(self) -> None:
        while not self.at_end():
            self.key(self.data, [], 0)

    def key(self, data: dict[str, Any], path: list[str], level: int) -> None:
        """One assignment below `data` (at `path`): key, then `=`, `.` or `[`."""
        name, last = self.read_until("=[,.")
        where = ".".join([*path, name])
        if last is None:
            raise self.fail(f'key "{where}" has no value')
        if last == ",":
            raise self.fail(f'key "{where}" has no value (cannot end with ,)')
        if not name:
            raise self.fail(f'empty key name before "{last}" at character {self.position}')
        if last == "=":
            data[name] = self.value()
        elif last == ".":
            if level + 1 > MAX_NESTED_NAME_LEVEL:
                raise self.fail(
                    "value name nested level is greater than maximum supported nested level "
                    f"of {MAX_NESTED_NAME_LEVEL}"
                )
            inner = data.get(name, {})
            if not isinstance(inner, dict):
                raise self.fail(f'key "{where}" is a {_kind(inner)}, not a map')
            if self.at_end():
                raise self.fail(f'key "{where}." has no value')
            self.key(inner, [*path, name], level + 1)
            data[name] = inner
        else:
            items = data.get(name, [])
            if not isinstance(items, list):
                raise self.fail(f'key "{where}" is a {_kind(items)}, not a list')
            index = self.index(where)
            data[name] = self.list_item(items, index, f"{where}[{index}]", level)

    def index(self, where: str) -> int:
        text, last = self.read_until("]")
        if last is None:
            raise self.fail(f'error parsing index of "{where}": no closing "]"')
        if not _INTEGER.fullmatch(text):
            raise self.fail(f'error parsing index of "{where}": "{text}" is not a whole number')
        index = int(text)
        if index < 0:
            raise self.fail(f"negative {index} index not allowed")
        if index > MAX_INDEX:
            raise self.fail(
                f"index of {index} is greater than maximum supported index of {MAX_INDEX}"
            )
        return index

    def list_item(self, items: list[Any], index: int, where: str, level: int) -> list[Any]:
        """The list with the assignment after `name[index]` made (`=`, `[` or `.` follows)."""
        rest, last = self.read_until("[.=")
        if rest:
            raise self.fail(f'unexpected data at end of array index: "{rest}"')
        if last is None:
            raise self.fail(f'key "{where}" has no value')
        if last == "=":
            return _set_index(items, index, self.value())
        if last == "[":
            current = items[index] if index < len(items) else None
            if current is None:
                current = []
            if not isinstance(current, list):
                raise self.fail(f'key "{where}" is a {_kind(current)}, not a list')
            inner_index = self.index(where)
            inner = self.list_item(current, inner_index, f"{where}[{inner_index}]", level)
            return _set_index(items, index, inner)
        current = items[index] if index < len(items) else {}
        inner_map = current if isinstance(current, dict) else {}  # Helm starts over here
        self.key(inner_map, [where], level)
        return _set_index(items, index, inner_map)

    def value(self) -> Any:
        """The value after `=`: a `{x,y}` list or a scalar, up to the next unescaped comma."""
        if self.at_end():
            return ""
        if self.text[self.position] != "{":
            text, _ = self.read_until(",")
            return typed_value(text)
        self.position += 1
        items: list[Any] = []
        while True:
            text, last = self.read_until(",}")
            if last is None:
                raise self.fail("list must terminate with '}'")
            items.append(typed_value(text))
            if last == "}":
                if not self.at_end() and self.text[self.position] == ",":
                    self.position += 1
                return items


def _set_index(items: list[Any], index: int, value: Any) -> list[Any]:
    if len(items) <= index:
        items.extend([None] * (index + 1 - len(items)))
    items[index] = value
    return items

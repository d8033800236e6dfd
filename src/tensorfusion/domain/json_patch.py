"""RFC 6902 JSON Patch of two JSON documents, and JSON Pointer (RFC 6901) escaping.

`json_patch_diff(old, new)` returns operations that turn `old` into `new` when applied in
order. Objects are compared member by member, arrays element by element (a longer array gets
`add` at the end, a shorter one `remove` from the end). Scalars compare with their JSON type, so
`1`, `1.0` and `true` differ.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["escape_pointer_token", "json_copy", "json_equal", "json_patch_diff", "pointer"]


def escape_pointer_token(token: str) -> str:
    """`~` → `~0`, then `/` → `~1`."""
    return token.replace("~", "~0").replace("/", "~1")


def pointer(*tokens: str | int) -> str:
    """JSON Pointer of a path (`pointer("metadata", "a/b")` → `/metadata/a~1b`)."""
    return "".join("/" + escape_pointer_token(str(token)) for token in tokens)


def json_copy(value: Any) -> Any:
    """Deep copy of a JSON tree (dicts, lists, scalars)."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or kind is float or value is None:
        return value
    if kind is dict:
        return {key: json_copy(item) for key, item in value.items()}
    if kind is list:
        return [json_copy(item) for item in value]
    if isinstance(value, Mapping):
        return {key: json_copy(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_copy(item) for item in value]
    return value


_KINDS: dict[type, str] = {dict: "object", list: "array", tuple: "array", bool: "bool",
                           int: "int", float: "float", str: "str"}  # fmt: skip


def _kind(value: Any) -> str:
    known = _KINDS.get(type(value))
    if known is not None:
        return known
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    return type(value).__name__


def json_equal(a: Any, b: Any) -> bool:
    """Deep equality with JSON types (`True != 1`)."""
    kind = _kind(a)
    if kind != _kind(b):
        return False
    if kind == "object":
        return a.keys() == b.keys() and all(json_equal(a[key], b[key]) for key in a)
    if kind == "array":
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def json_patch_diff(old: Any, new: Any) -> list[dict[str, Any]]:
    """Operations (`add`, `remove`, `replace`) that turn `old` into `new`."""
    ops: list[dict[str, Any]] = []
    _diff(old, new, "", ops)
    return ops


def _diff(old: Any, new: Any, path: str, ops: list[dict[str, Any]]) -> None:
    # Each node is visited once: containers are walked (an equal one yields no operation),
    # scalars compared with their JSON type.
    if old is new:
        return
    kind, new_kind = _kind(old), _kind(new)
    if kind == "object" and new_kind == "object":
        _diff_objects(old, new, path, ops)
    elif kind == "array" and new_kind == "array":
        _diff_arrays(old, new, path, ops)
    elif kind != new_kind or old != new:
        ops.append({"op": "replace", "path": path, "value": json_copy(new)})


def _diff_objects(
    old: Mapping[str, Any], new: Mapping[str, Any], path: str, ops: list[dict[str, Any]]
) -> None:
    for key in old:
        if key not in new:
            ops.append({"op": "remove", "path": f"{path}/{escape_pointer_token(key)}"})
    for key, value in new.items():
        if key in old:
            before = old[key]
            if before is value or (type(before) is type(value) is str and before == value):
                continue  # the common case of a pod's unchanged strings, without a path
            _diff(before, value, f"{path}/{escape_pointer_token(key)}", ops)
        else:
            ops.append({"op": "add", "path": f"{path}/{escape_pointer_token(key)}",
                        "value": json_copy(value)})  # fmt: skip


def _diff_arrays(
    old: Sequence[Any], new: Sequence[Any], path: str, ops: list[dict[str, Any]]
) -> None:
    common = min(len(old), len(new))
    for index in range(common):
        _diff(old[index], new[index], f"{path}/{index}", ops)
    for index in range(common, len(new)):
        ops.append({"op": "add", "path": f"{path}/{index}", "value": json_copy(new[index])})
    for index in reversed(range(common, len(old))):
        ops.append({"op": "remove", "path": f"{path}/{index}"})

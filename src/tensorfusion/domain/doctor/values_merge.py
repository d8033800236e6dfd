"""Chart values as Helm merges them (doctor.md): YAML files, then `--set`, over the chart's own.

`merge_layers` is the whole of it, in Helm's order: the `--values` files merged in order (maps
merge, anything else replaces), the `--set` expressions applied into that, and the result
coalesced over the chart's `values.yaml`, where an explicit null deletes the key. It also says
where each final value came from (`value_sources`), for checks that care whether a value sits
in a file. Reading the files is the caller's job: functions here take texts and their names.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import yaml

from tensorfusion.domain.doctor.set_values import apply_sets, parse_set

__all__ = [
    "CHART_SOURCE",
    "SET_SOURCE",
    "MergedValues",
    "ValuesError",
    "key_path",
    "load_values",
    "merge_layers",
    "merge_values",
    "value_sources",
]

CHART_SOURCE: Final = "chart"
"""The source name of the chart's own `values.yaml`."""
SET_SOURCE: Final = "--set"
"""The source name of a value given with `--set`."""

_TIMESTAMP: Final = "tag:yaml.org,2002:timestamp"
_SETS: Final = object()
_ABSENT: Final = object()
_HIDES: Final = object()


class ValuesError(ValueError):
    """A values file that cannot be used; the message names the file, the line and the problem."""


class _Loader(yaml.SafeLoader):
    """YAML as Helm reads values: dates stay strings (no timestamp type)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != _TIMESTAMP]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


@dataclass(frozen=True, slots=True)
class MergedValues:
    """The merged values and, per leaf key path (`key_path`), the source of its value."""

    values: dict[str, Any]
    sources: dict[str, str]


def load_values(text: str, source: str) -> dict[str, Any]:
    """A values document: a map (an empty document is `{}`); keys become strings as in Helm."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        document = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as error:
        raise ValuesError(f"{source}: {_describe(error)}") from None
    except yaml.YAMLError as error:
        raise ValuesError(f"{source}: not valid YAML: {error}") from None
    finally:
        loader.dispose()
    if document is None:
        return {}
    if not isinstance(document, dict):
        assert node is not None
        raise ValuesError(
            f"{source}: line {node.start_mark.line + 1}: the document must be a map of keys, "
            f"not {_kind(document)}"
        )
    try:
        values: dict[str, Any] = _string_keys(document)
    except RecursionError:
        raise ValuesError(f"{source}: an alias refers to itself (a recursive value)") from None
    return values


def merge_values(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """`overlay` over `base` (Helm's coalescing): maps merge, anything else replaces, an
    explicit null deletes the key. Neither input is changed."""
    merged = copy.deepcopy(dict(base))
    for key, value in overlay.items():
        current = merged.get(key)
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(current, Mapping):
            merged[key] = merge_values(current, value)
        elif isinstance(value, Mapping):
            merged[key] = merge_values({}, value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def merge_layers(
    chart: Mapping[str, Any],
    files: Sequence[tuple[str, Mapping[str, Any]]],
    sets: Sequence[str],
) -> MergedValues:
    """`helm --values F1 --values F2 --set E1 --set E2` over the chart's values.

    `files` are (name, loaded values) in command-line order; `sets` the `--set` expressions in
    order. Raises `SetError` for an expression Helm would refuse.
    """
    user: dict[str, Any] = {}
    for _, document in files:
        user = _merge_files(user, document)
    user = apply_sets(user, sets)
    values = merge_values(chart, user)
    layers: list[tuple[str, Mapping[str, Any]]] = [(CHART_SOURCE, chart), *files]
    layers.extend((SET_SOURCE, parse_set(expression)) for expression in sets)
    return MergedValues(values, value_sources(values, layers))


def value_sources(
    values: Mapping[str, Any], layers: Sequence[tuple[str, Mapping[str, Any]]]
) -> dict[str, str]:
    """For each leaf of `values` (a scalar, a list or an empty map), the name of the last of
    `layers` (name, values; in precedence order, the chart's first) that sets it, keyed by
    `key_path`. A later layer that nulls or replaces a parent hides the earlier layers' values
    but not the chart's, which Helm merges in last."""
    sources: dict[str, str] = {}
    for path in _leaf_paths(values, ()):
        for index in range(len(layers) - 1, -1, -1):
            name, layer = layers[index]
            found = _lookup(layer, path)
            if found is _SETS:
                sources[key_path(path)] = name
                break
            if found is _HIDES and index > 0:
                if _lookup(layers[0][1], path) is _SETS:
                    sources[key_path(path)] = layers[0][0]
                break
    return sources


def key_path(keys: Sequence[str]) -> str:
    """`("greptime", "password")` → `greptime.password`; dots in a key escaped as in `--set`."""
    return ".".join(key.replace("\\", "\\\\").replace(".", "\\.") for key in keys)


def _merge_files(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """Helm's merge of two `--values` files: maps merge, anything else (null too) replaces."""
    merged = copy.deepcopy(dict(base))
    for key, value in overlay.items():
        current = merged.get(key)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            merged[key] = _merge_files(current, value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _leaf_paths(values: Mapping[str, Any], prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
    paths: list[tuple[str, ...]] = []
    for key, value in values.items():
        path = (*prefix, str(key))
        if isinstance(value, Mapping) and value:
            paths.extend(_leaf_paths(value, path))
        else:
            paths.append(path)
    return paths


def _lookup(layer: Mapping[str, Any], path: tuple[str, ...]) -> object:
    """Whether a layer sets `path` (`_SETS`), leaves it alone (`_ABSENT`), or nulls or replaces
    it or a parent (`_HIDES`)."""
    node: Any = layer
    for key in path:
        if not isinstance(node, Mapping):
            return _HIDES
        if key not in node:
            return _ABSENT
        node = node[key]
        if node is None:
            return _HIDES
    return _SETS


def _describe(error: yaml.MarkedYAMLError) -> str:
    mark = error.problem_mark or error.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    problem = error.problem or "not valid YAML"
    return f"{where}{error.context}: {problem}" if error.context else f"{where}{problem}"


def _string_keys(value: Any) -> Any:
    """Keys as Helm sees them after its YAML-to-JSON step: `1` → "1", `true` → "true"."""
    if isinstance(value, dict):
        return {_key_text(key): _string_keys(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_string_keys(item) for item in value]
    return value


def _key_text(key: object) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    return str(key)


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return type(value).__name__

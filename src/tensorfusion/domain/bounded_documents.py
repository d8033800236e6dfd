"""YAML and JSON documents read under bounds: size, nesting depth and expanded node count.

Every document that enters from outside (an HTTP body, a file given to the CLI, a mounted
configuration) is read through `load_yaml_document` or `load_json_document`, so a deeply nested
or alias-expanding body is refused with a `DocumentLimitError` naming the limit instead of
raising `RecursionError` or exhausting memory later. The limits are listed in docs/limits.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson
import yaml

__all__ = [
    "DEFAULT_LIMITS",
    "KUBERNETES_ANNOTATIONS_BYTES",
    "KUBERNETES_OBJECT_BYTES",
    "DocumentError",
    "DocumentLimitError",
    "DocumentLimits",
    "annotations_size_problem",
    "load_json_document",
    "load_yaml_document",
    "nesting_problem",
]

KUBERNETES_OBJECT_BYTES: Final = 3 * 512 * 1024
"""Bytes of one object as the API server accepts it (etcd's 1.5 MiB request limit)."""

KUBERNETES_ANNOTATIONS_BYTES: Final = 256 * 1024
"""Bytes of an object's annotations, keys and values together (as apimachinery bounds them)."""


@dataclass(frozen=True, slots=True)
class DocumentLimits:
    """Bounds on one document: encoded size, nesting depth and nodes after alias expansion."""

    max_bytes: int = KUBERNETES_OBJECT_BYTES
    max_depth: int = 100
    max_nodes: int = 1_000_000


DEFAULT_LIMITS: Final = DocumentLimits()


class DocumentError(ValueError):
    """A document that cannot be read: not UTF-8, not valid YAML or JSON."""


class DocumentLimitError(DocumentError):
    """A document over one of its limits; the message names the limit."""


def _too_large(size: int, limits: DocumentLimits) -> DocumentLimitError:
    return DocumentLimitError(f"document is {size} bytes: the limit is {limits.max_bytes} bytes")


def _too_deep(limits: DocumentLimits) -> DocumentLimitError:
    return DocumentLimitError(f"document nests deeper than {limits.max_depth} levels (the limit)")


def _too_many(limits: DocumentLimits) -> DocumentLimitError:
    return DocumentLimitError(
        f"document expands to more than {limits.max_nodes} nodes (the limit; YAML aliases count"
        " once per use)"
    )


_COLLECTION_START: Final = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_COLLECTION_END: Final = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
_LOADER: Final[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _check_yaml_events(text: str, limits: DocumentLimits) -> None:
    """Walk the parser's events (no recursion) and refuse a document over its limits."""
    depth = 0
    nodes = 0
    anchored: dict[str, int] = {}
    # Each open collection: (anchor or None, node count when it opened).
    open_collections: list[tuple[str | None, int]] = []
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, _COLLECTION_START):
            depth += 1
            if depth > limits.max_depth:
                raise _too_deep(limits)
            open_collections.append((event.anchor, nodes))
            nodes += 1
        elif isinstance(event, _COLLECTION_END):
            depth -= 1
            anchor, at_start = open_collections.pop()
            if anchor is not None:
                anchored[anchor] = nodes - at_start
        elif isinstance(event, yaml.ScalarEvent):
            nodes += 1
            if event.anchor is not None:
                anchored[event.anchor] = 1
        elif isinstance(event, yaml.AliasEvent):
            nodes += anchored.get(event.anchor or "", 1)
        else:
            continue
        if nodes > limits.max_nodes:
            raise _too_many(limits)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc)
    return f"not valid YAML{where}: {problem}"


def _size(data: bytes | str) -> int:
    return len(data) if isinstance(data, bytes) else len(data.encode("utf-8", "surrogatepass"))


def _text(data: bytes | str, limits: DocumentLimits) -> str:
    size = _size(data)
    if size > limits.max_bytes:
        raise _too_large(size, limits)
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentError(
            f"not UTF-8 text (byte {exc.start}): a binary file or another encoding"
        ) from None


def load_yaml_document(data: bytes | str, limits: DocumentLimits = DEFAULT_LIMITS) -> Any:
    """One YAML document (None when empty), refused with `DocumentLimitError` over `limits`
    and with `DocumentError` when it is not UTF-8 or not valid YAML."""
    text = _text(data, limits)
    if "\x00" in text:
        raise DocumentError("not text: the document holds a NUL character (a binary file?)")
    try:
        _check_yaml_events(text, limits)
        return yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        if "nesting depth" in str(exc):  # libyaml's own bound, met before ours in flow style
            raise _too_deep(limits) from None
        raise DocumentError(_yaml_problem(exc)) from None
    except RecursionError:
        raise _too_deep(limits) from None


def load_json_document(data: bytes | str, limits: DocumentLimits = DEFAULT_LIMITS) -> Any:
    """One JSON document, refused with `DocumentLimitError` over `limits` and with
    `DocumentError` when it is not valid JSON."""
    size = _size(data)
    if size > limits.max_bytes:
        raise _too_large(size, limits)
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if "limit exceeded" in str(exc):  # orjson stops at 1,024 levels, past our limit
            raise _too_deep(limits) from None
        raise DocumentError(f"not valid JSON: {exc}") from None
    problem = nesting_problem(value, limits)
    if problem is not None:
        raise DocumentLimitError(problem)
    return value


def nesting_problem(value: Any, limits: DocumentLimits = DEFAULT_LIMITS) -> str | None:
    """Why a decoded document is over the depth or node limit, or None (iterative walk)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    nodes = 0
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if nodes > limits.max_nodes:
            return str(_too_many(limits))
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limits.max_depth:
            return str(_too_deep(limits))
        stack.extend((child, depth + 1) for child in children)
    return None


def annotations_size_problem(manifest: Mapping[str, Any]) -> str | None:
    """Why an object's annotations are over Kubernetes' total size, or None."""
    metadata = manifest.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    if not isinstance(annotations, Mapping):
        return None
    size = sum(
        len(str(key).encode("utf-8", "surrogatepass"))
        + len(str(value).encode("utf-8", "surrogatepass"))
        for key, value in annotations.items()
    )
    if size > KUBERNETES_ANNOTATIONS_BYTES:
        return (
            f"metadata.annotations: {size} bytes in total: the limit is"
            f" {KUBERNETES_ANNOTATIONS_BYTES} bytes (as the API server bounds them)"
        )
    return None

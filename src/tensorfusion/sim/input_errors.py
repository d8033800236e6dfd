"""One error type for bad simulator input: file, object, field, value and what is allowed."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from pydantic import BaseModel, ValidationError

from tensorfusion.domain.bounded_documents import DocumentError, DocumentLimits, load_yaml_document

__all__ = [
    "InputError",
    "describe_validation_error",
    "load_model",
    "parse_yaml",
    "read_bounded",
    "read_file_bounded",
    "read_yaml",
]

ModelT = TypeVar("ModelT", bound=BaseModel)


class InputError(ValueError):
    """Bad input in a file the user gave; the CLI prints it and exits 2."""


def read_bounded(handle: BinaryIO, label: str, what: str, max_bytes: int) -> bytes:
    """At most `max_bytes` from `handle`, or InputError naming `label`, the size and the limit."""
    data = handle.read(max_bytes + 1)
    if len(data) <= max_bytes:
        return data
    try:
        status = os.fstat(handle.fileno())
        size = f"{status.st_size:,} bytes" if stat.S_ISREG(status.st_mode) else ""
    except (OSError, ValueError):
        size = ""
    raise InputError(
        f"{label}: {what} is {size or f'over {max_bytes:,} bytes'}: the limit is"
        f" {max_bytes:,} bytes for a {what}"
    )


def read_file_bounded(path: Path, what: str, max_bytes: int) -> bytes:
    """The bytes of `path`, or InputError when it cannot be read or is over `max_bytes`."""
    try:
        with path.open("rb") as handle:
            return read_bounded(handle, str(path), what, max_bytes)
    except OSError as exc:
        raise InputError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None


def parse_yaml(data: bytes, label: str, what: str, limits: DocumentLimits) -> Any:
    """One YAML document under `limits`, or InputError naming `label` and the problem."""
    try:
        return load_yaml_document(data, limits)
    except DocumentError as exc:
        raise InputError(f"{label}: {what}: {exc}") from None


def read_yaml(path: Path, what: str, limits: DocumentLimits) -> Any:
    """Load one YAML document under `limits` (size, depth, nodes), or raise InputError naming
    the file and the limit; a binary or non-UTF-8 file is an InputError too."""
    return parse_yaml(read_file_bounded(path, what, limits.max_bytes), str(path), what, limits)


def describe_validation_error(path: Path, obj: str, exc: ValidationError) -> InputError:
    """Turn a pydantic error into one message per problem, naming the field and value."""
    lines = []
    for error in exc.errors():
        field = ""
        for part in error["loc"]:
            if isinstance(part, int):
                field += f"[{part}]"
            elif not str(part).startswith("function-"):
                field += f".{part}" if field else str(part)
        value = error.get("input")
        shown = "" if isinstance(value, dict | list) else f" invalid value {value!r}:"
        message = error["msg"].removeprefix("Value error, ")
        lines.append(
            f"{path}: {obj}: {field}:{shown} {message}" if field else f"{path}: {obj}: {message}"
        )
    return InputError("\n".join(lines))


def load_model(
    path: Path, what: str, model: type[ModelT], shape: str, limits: DocumentLimits
) -> ModelT:
    """Read a YAML mapping under `limits` and validate it as `model`; InputError on any problem.

    `what` names the file in messages ("cluster file"), `shape` says what the top level must
    hold ("a mapping with nodes, pools and hardware").
    """
    data = read_yaml(path, what, limits)
    if not isinstance(data, dict):
        raise InputError(f"{path}: {what} must be {shape}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise describe_validation_error(path, what.removesuffix(" file"), exc) from None

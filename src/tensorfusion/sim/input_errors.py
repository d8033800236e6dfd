"""One error type for bad simulator input: file, object, field, value and what is allowed."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

__all__ = ["InputError", "describe_validation_error", "load_model", "read_yaml"]

ModelT = TypeVar("ModelT", bound=BaseModel)


class InputError(ValueError):
    """Bad input in a file the user gave; the CLI prints it and exits 2."""


def read_yaml(path: Path, what: str) -> Any:
    """Load one YAML document, or raise InputError naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(f"{path}: not valid YAML{where}: {problem}") from None


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


def load_model(path: Path, what: str, model: type[ModelT], shape: str) -> ModelT:
    """Read a YAML mapping and validate it as `model`; InputError on any problem.

    `what` names the file in messages ("cluster file"), `shape` says what the top level must
    hold ("a mapping with nodes, pools and hardware").
    """
    data = read_yaml(path, what)
    if not isinstance(data, dict):
        raise InputError(f"{path}: {what} must be {shape}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise describe_validation_error(path, what.removesuffix(" file"), exc) from None

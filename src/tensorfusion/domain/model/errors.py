"""One error type for every invalid object, with messages that name kind, object, field and value.

Format, one line per problem::

    GPUPool "p1": spec.capacityConfig.oversubscription.tflopsOversellRatio: invalid value 50:
    must be between 100 and 100000

(on one line in the real message).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError
from pydantic_core import ErrorDetails

__all__ = ["FieldIssue", "ModelError", "describe_value", "issues_from"]

_MAX_VALUE_TEXT: Final = 80

_MESSAGES: Final[dict[str, str]] = {
    "missing": "required field is missing",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "bool_type": "must be a boolean (true or false)",
    "bool_parsing": "must be a boolean (true or false)",
    "string_type": "must be a string",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "list_type": "must be a list",
}


@dataclass(frozen=True, slots=True)
class FieldIssue:
    """One invalid field: its wire path, the offending value (as text) and what is allowed."""

    path: str
    message: str
    value: str | None = None

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        if self.value is None:
            return f"{where}{self.message}"
        return f"{where}invalid value {self.value}: {self.message}"


class ModelError(ValueError):
    """An object that does not match the resource model (api.md); carries every problem found."""

    def __init__(
        self,
        kind: str | None,
        name: str | None,
        issues: Sequence[FieldIssue],
        namespace: str | None = None,
    ) -> None:
        self.kind = kind
        self.name = name
        self.namespace = namespace
        self.issues: tuple[FieldIssue, ...] = tuple(issues)
        super().__init__("\n".join(f"{self.subject}: {issue}" for issue in self.issues))

    @property
    def subject(self) -> str:
        """``Kind "name"`` (``Kind "namespace/name"`` when namespaced)."""
        who = self.name if not self.namespace else f"{self.namespace}/{self.name or ''}"
        label = self.kind or "object"
        return f'{label} "{who}"' if who else f"{label} <unnamed>"


def describe_value(value: Any) -> str:
    """Compact JSON text of a bad value, shortened when long."""
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > _MAX_VALUE_TEXT:
        text = text[: _MAX_VALUE_TEXT - 3] + "..."
    return text


def _path(loc: Iterable[int | str]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _message(error: ErrorDetails) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind in ("enum", "literal_error") and "expected" in ctx:
        return f"must be one of {ctx['expected']}"
    if kind == "value_error" and "error" in ctx:
        return str(ctx["error"])
    return _MESSAGES.get(kind, error["msg"])


def issues_from(error: ValidationError, prefix: Sequence[int | str] = ()) -> list[FieldIssue]:
    """Translate a pydantic error into field issues with wire paths (``prefix`` is prepended)."""
    issues: list[FieldIssue] = []
    for detail in error.errors(include_url=False):
        path = _path([*prefix, *detail["loc"]])
        if detail["type"] == "missing":
            issues.append(FieldIssue(path, _message(detail)))
        else:
            issues.append(FieldIssue(path, _message(detail), describe_value(detail["input"])))
    return issues

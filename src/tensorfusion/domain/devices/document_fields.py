"""Typed reads of a YAML document's fields; the first bad field is one `ProviderError`.

Messages follow the project's format (`tensorfusion.domain.model.errors`), prefixed with the
file: `sim.yaml: gpus[1].vram: invalid value "80XB": not a quantity (example: 80Gi)`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from decimal import ROUND_FLOOR
from typing import Any, NoReturn

import yaml

from tensorfusion.domain.devices.inventory import ProviderError
from tensorfusion.domain.durations import DurationError, parse_go_duration
from tensorfusion.domain.model.errors import FieldIssue, describe_value
from tensorfusion.domain.quantities import Quantity, QuantityError, parse_quantity

__all__ = ["DocumentFields", "join", "load_yaml"]


def join(path: str, key: str | int) -> str:
    """`path.key`, or `path[key]` for a list index."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def load_yaml(text: str, source: str) -> Any:
    """One YAML document; ProviderError with line and column when it is not YAML."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ProviderError(f"{source}: not valid YAML{where}: {problem}") from None


class DocumentFields:
    """Reads the fields of the document `source` names; every read checks type and range."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, rule: str, value: Any) -> NoReturn:
        """Raise `<source>: <path>: invalid value <value>: <rule>`."""
        issue = FieldIssue(path, rule, describe_value(value))
        raise ProviderError(f"{self.source}: {issue}")

    def problem(self, path: str, message: str) -> NoReturn:
        """Raise `<source>: <path>: <message>` (a problem not tied to one value)."""
        raise ProviderError(f"{self.source}: {FieldIssue(path, message)}")

    def mapping(
        self,
        path: str,
        value: Any,
        allowed: Sequence[str],
        required: Sequence[str] = (),
    ) -> Mapping[str, Any]:
        """A mapping with only `allowed` keys and every `required` one."""
        if not isinstance(value, Mapping):
            self.fail(path, "must be a mapping", value)
        for key in value:
            if not isinstance(key, str) or key not in allowed:
                self.problem(
                    join(path, str(key)), f"unknown field (allowed: {', '.join(sorted(allowed))})"
                )
        for key in required:
            if key not in value:
                self.problem(join(path, key), "required field is missing")
        return value

    def sequence(self, path: str, value: Any, *, non_empty: bool = False) -> list[Any]:
        """A list (non-empty when asked)."""
        if not isinstance(value, list):
            self.fail(path, "must be a list", value)
        if non_empty and not value:
            self.fail(path, "must not be empty", value)
        return value

    def text(self, path: str, value: Any) -> str:
        """A non-empty string."""
        if not isinstance(value, str) or not value.strip():
            self.fail(path, "must be a non-empty string", value)
        return value

    def integer(self, path: str, value: Any, low: int, high: int) -> int:
        """An integer from `low` to `high`."""
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.fail(path, f"must be an integer from {low} to {high}", value)
        return value

    def number(self, path: str, value: Any, low: float = 0.0, high: float | None = None) -> float:
        """A finite number from `low` (to `high` when given)."""
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok and (not math.isfinite(value) or value < low or (high is not None and value > high)):
            ok = False
        if not ok:
            rule = f"from {low:g} to {high:g}" if high is not None else f"of at least {low:g}"
            self.fail(path, f"must be a number {rule}", value)
        return float(value)

    def quantity(self, path: str, value: Any, example: str) -> Quantity:
        """A non-negative number or quantity text (`80Gi`, `989.5`, `1500m`)."""
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            self.fail(path, f"must be a quantity (example: {example})", value)
        try:
            quantity = parse_quantity(str(value))
        except QuantityError:
            self.fail(path, f"not a quantity (example: {example})", value)
        if quantity.value < 0:
            self.fail(path, "must not be negative", value)
        return quantity

    def byte_count(self, path: str, value: Any) -> int:
        """Bytes: an integer or a quantity (`80Gi`, `512M`), not negative; fractions dropped."""
        quantity = self.quantity(path, value, "80Gi")
        return int(quantity.value.to_integral_value(rounding=ROUND_FLOOR))

    def seconds(self, path: str, value: Any) -> float:
        """Seconds: a non-negative number or a Go duration (`30s`, `2m`, `1h30m`)."""
        if isinstance(value, str):
            try:
                return parse_go_duration(value) / 1e9
            except DurationError:
                pass
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if number and math.isfinite(value) and value >= 0:
            return float(value)
        self.fail(path, "must be seconds (a number of at least 0) or a duration (30s, 2m)", value)

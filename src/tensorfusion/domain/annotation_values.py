"""Parsers for single annotation values; each raises `InvalidValueError(rule)` on bad input.

The rule texts are the `<rule>` part of the error format (`annotation_errors.py`).
"""

from __future__ import annotations

import re
from decimal import Decimal
from enum import StrEnum
from typing import Final, TypeVar

from tensorfusion.domain.quantities import Quantity, QuantityError, parse_quantity

__all__ = [
    "RULE_BOOL",
    "InvalidValueError",
    "enum_rule",
    "parse_bool",
    "parse_enum",
    "parse_index_list",
    "parse_int",
    "parse_name_list",
    "parse_non_empty",
    "parse_percent",
    "parse_percent_milli",
    "parse_quantity_value",
    "parse_tflops_milli",
    "parse_vram_bytes",
]

RULE_BOOL: Final = 'must be "true" or "false"'
_INTEGER: Final = re.compile(r"[+-]?[0-9]+")
_LEADING_NUMBER: Final = re.compile(r"^[0-9]+(?:\.[0-9]+)?")

E = TypeVar("E", bound=StrEnum)


class InvalidValueError(ValueError):
    """A value that breaks `rule`."""

    def __init__(self, rule: str) -> None:
        super().__init__(rule)
        self.rule = rule


def parse_bool(text: str) -> bool:
    """Exactly "true" or "false"."""
    if text == "true":
        return True
    if text == "false":
        return False
    raise InvalidValueError(RULE_BOOL)


def parse_int(text: str, minimum: int, maximum: int | None = None) -> int:
    """A decimal integer in `minimum..maximum` (no upper bound when None)."""
    stripped = text.strip()
    if _INTEGER.fullmatch(stripped):
        value = int(stripped)
        if value >= minimum and (maximum is None or value <= maximum):
            return value
    if maximum is None:
        if minimum == 0:
            raise InvalidValueError("must be a non-negative integer")
        raise InvalidValueError(f"must be an integer of at least {minimum}")
    raise InvalidValueError(f"must be an integer between {minimum} and {maximum}")


def parse_quantity_value(text: str, example: str) -> Quantity:
    """A Kubernetes quantity ≥ 0."""
    try:
        value = parse_quantity(text)
    except QuantityError as error:
        rule = error.rule if error.out_of_range else f"not a quantity (example: {example})"
        raise InvalidValueError(rule) from None
    if value.value < 0:
        raise InvalidValueError("must not be negative")
    return value


def parse_percent(text: str) -> Quantity:
    """A quantity with 0 < v ≤ 100 (percent of one GPU)."""
    try:
        value = parse_quantity(text)
    except QuantityError as error:
        rule = error.rule if error.out_of_range else "not a quantity (example: 50)"
        raise InvalidValueError(rule) from None
    if not Decimal(0) < value.value <= Decimal(100):
        raise InvalidValueError("must be greater than 0 and at most 100")
    return value


def parse_tflops_milli(text: str) -> int:
    """TFLOPs quantity ≥ 0 in thousandths (rounded up)."""
    return parse_quantity_value(text, "100").milli()


def parse_vram_bytes(text: str) -> int:
    """VRAM quantity ≥ 0 in bytes (rounded up)."""
    match = _LEADING_NUMBER.match(text.strip())
    example = f"{match.group(0)}Gi" if match else "16Gi"
    return parse_quantity_value(text, example).ceil()


def parse_percent_milli(text: str) -> int:
    """Compute percent 0 < v ≤ 100 in thousandths of a percent."""
    return parse_percent(text).milli()


def parse_index_list(text: str) -> tuple[int, ...]:
    """Comma list of distinct integers ≥ 0, 1..128 entries, spaces allowed."""
    rule = "must be a comma-separated list of 1 to 128 distinct integers >= 0"
    items = [item.strip() for item in text.split(",")]
    if not 1 <= len(items) <= 128 or any(not (i.isascii() and i.isdigit()) for i in items):
        raise InvalidValueError(rule)
    values = tuple(int(item) for item in items)
    if len(set(values)) != len(values):
        raise InvalidValueError(rule)
    return values


def parse_name_list(text: str) -> tuple[str, ...]:
    """Comma list, items trimmed, empty items dropped."""
    return tuple(item for item in (part.strip() for part in text.split(",")) if item)


def parse_non_empty(text: str) -> str:
    """Any non-blank string (returned trimmed)."""
    stripped = text.strip()
    if not stripped:
        raise InvalidValueError("must not be empty")
    return stripped


def enum_rule(enum: type[StrEnum] | tuple[str, ...]) -> str:
    """`must be one of a, b, c`."""
    values = enum if isinstance(enum, tuple) else tuple(member.value for member in enum)
    return "must be one of " + ", ".join(values)


def parse_enum(text: str, enum: type[E]) -> E:
    """A member value of `enum` (exact, case-sensitive)."""
    try:
        return enum(text)
    except ValueError:
        raise InvalidValueError(enum_rule(enum)) from None

"""Kubernetes resource quantities: exact parsing, arithmetic and canonical printing.

Values are exact decimals (never floats). The allocator works in integer units derived from
them: TFLOPs in milli-TFLOPs, VRAM in bytes, percent in milli-percent.

Parsing is bounded as Kubernetes' `resource.Quantity` bounds it: an exponent fits an int32 and
a value is at most max int64 in magnitude (Kubernetes caps a larger value silently; here it is
refused), rounded up to nano. The text is at most `MAX_QUANTITY_CHARS` long (Kubernetes has no
such limit, but every value it can hold is written in far fewer characters).
"""

from __future__ import annotations

import functools
import json
import re
from decimal import ROUND_CEILING, Context, Decimal, localcontext
from enum import Enum
from typing import Final

__all__ = [
    "MAX_QUANTITY_CHARS",
    "MAX_QUANTITY_EXPONENT",
    "MAX_QUANTITY_MAGNITUDE",
    "Quantity",
    "QuantityError",
    "QuantityFormat",
    "format_bytes",
    "format_milli",
    "parse_quantity",
]


class QuantityFormat(Enum):
    """How a quantity prints: the family of its suffix."""

    BINARY_SI = "BinarySI"
    DECIMAL_SI = "DecimalSI"
    DECIMAL_EXPONENT = "DecimalExponent"


MAX_QUANTITY_CHARS: Final = 128
"""The longest quantity text read."""
MAX_QUANTITY_EXPONENT: Final = 2**31 - 1
"""The largest `e` exponent (Kubernetes: an int32; the least is -2^31)."""
MAX_QUANTITY_MAGNITUDE: Final = 2**63 - 1
"""The largest value in magnitude (Kubernetes: max int64)."""
NOT_A_QUANTITY: Final = "not a quantity"


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity, or one beyond the bounds.

    Reads `invalid value "<text>": <rule>` (the one error format); `rule` alone is for callers
    that name the field themselves, `out_of_range` tells a bound from bad syntax.
    """

    def __init__(self, text: object, rule: str = NOT_A_QUANTITY) -> None:
        self.text = text if isinstance(text, str) else repr(text)
        self.rule = rule
        self.out_of_range = rule != NOT_A_QUANTITY
        super().__init__(f"invalid value {_quote(self.text)}: {rule}")


def _quote(text: str) -> str:
    return json.dumps(text if len(text) <= 80 else text[:80] + "...", ensure_ascii=False)


_PATTERN: Final = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)

_BINARY: Final[dict[str, int]] = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL: Final[dict[str, int]] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_DECIMAL_BY_EXPONENT: Final[dict[int, str]] = {v: k for k, v in _DECIMAL.items()}
_BINARY_BY_SHIFT: Final[list[tuple[int, str]]] = sorted(
    ((v, k) for k, v in _BINARY.items()), reverse=True
)
_NANO: Final = Decimal("1e-9")
_BELOW_NANO: Final = Decimal("1e-10")
# Exact for every bounded text: its digits, times at most 2^60 (19 digits), with room to spare.
_CONTEXT: Final = Context(prec=MAX_QUANTITY_CHARS + 40)
_TOO_LONG: Final = f"longer than {MAX_QUANTITY_CHARS} characters"
_EXPONENT_RANGE: Final = (
    f"exponent outside {-MAX_QUANTITY_EXPONENT - 1}..{MAX_QUANTITY_EXPONENT} (an int32, as "
    "Kubernetes reads it)"
)
_MAGNITUDE_RANGE: Final = (
    f"must be at most {MAX_QUANTITY_MAGNITUDE} in magnitude (max int64, Kubernetes' largest "
    "quantity)"
)


class Quantity:
    """An exact Kubernetes quantity with the print format of the suffix it was written with."""

    __slots__ = ("_format", "_value")

    def __init__(
        self, value: Decimal | int | str = 0, fmt: QuantityFormat = QuantityFormat.DECIMAL_SI
    ) -> None:
        if isinstance(value, str):
            parsed = parse_quantity(value)
            self._value: Decimal = parsed.value
            self._format: QuantityFormat = parsed.format
            return
        self._value = _round_to_nano(Decimal(value))
        self._format = fmt

    @property
    def value(self) -> Decimal:
        """The exact numeric value."""
        return self._value

    @property
    def format(self) -> QuantityFormat:
        """The print format (from the suffix of the parsed text)."""
        return self._format

    def is_zero(self) -> bool:
        """True when the value is zero."""
        return self._value == 0

    def milli(self) -> int:
        """The value in thousandths, rounded up."""
        return int((self._value * 1000).to_integral_value(rounding=ROUND_CEILING))

    def ceil(self) -> int:
        """The value rounded up to a whole number."""
        return int(self._value.to_integral_value(rounding=ROUND_CEILING))

    def __str__(self) -> str:
        return _canonical(self._value, self._format)

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Quantity):
            return self._value == other._value
        if isinstance(other, int | Decimal):
            return self._value == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._value)

    def __lt__(self, other: Quantity) -> bool:
        return self._value < other._value

    def __le__(self, other: Quantity) -> bool:
        return self._value <= other._value

    def __gt__(self, other: Quantity) -> bool:
        return self._value > other._value

    def __ge__(self, other: Quantity) -> bool:
        return self._value >= other._value

    def __add__(self, other: Quantity) -> Quantity:
        return Quantity(self._value + other._value, self._pick_format(other))

    def __sub__(self, other: Quantity) -> Quantity:
        return Quantity(self._value - other._value, self._pick_format(other))

    def __mul__(self, factor: int) -> Quantity:
        return Quantity(self._value * factor, self._format)

    __rmul__ = __mul__

    def __neg__(self) -> Quantity:
        return Quantity(-self._value, self._format)

    def _pick_format(self, other: Quantity) -> QuantityFormat:
        return other._format if self._value == 0 else self._format


def parse_quantity(text: str) -> Quantity:
    """Parse Kubernetes quantity text ("16Gi", "100", "1500m", "1e3") exactly, within bounds."""
    if not isinstance(text, str):
        raise QuantityError(text)
    if len(text) > MAX_QUANTITY_CHARS:
        raise QuantityError(text, _TOO_LONG)
    return _parse_text(text)


@functools.lru_cache(maxsize=8192)
def _parse_text(text: str) -> Quantity:
    # Quantities are immutable, and clusters repeat the same few texts ("312", "80Gi").
    match = _PATTERN.fullmatch(text)
    if match is None:
        raise QuantityError(text)
    number = Decimal(match["number"])
    if match["sign"] == "-":
        number = -number
    suffix = match["suffix"] or ""
    exponent = 0
    if suffix in _BINARY:
        fmt = QuantityFormat.BINARY_SI
        with localcontext(_CONTEXT):
            number *= 2 ** _BINARY[suffix]
    elif suffix in _DECIMAL:
        exponent, fmt = _DECIMAL[suffix], QuantityFormat.DECIMAL_SI
    else:
        exponent, fmt = int(suffix[1:]), QuantityFormat.DECIMAL_EXPONENT
        if not -MAX_QUANTITY_EXPONENT - 1 <= exponent <= MAX_QUANTITY_EXPONENT:
            raise QuantityError(text, _EXPONENT_RANGE)
    with localcontext(_CONTEXT):
        quantity = Quantity(_scaled(number, exponent), fmt)
    if abs(quantity.value) > MAX_QUANTITY_MAGNITUDE:
        raise QuantityError(text, _MAGNITUDE_RANGE)
    return quantity


def _scaled(number: Decimal, exponent: int) -> Decimal:
    """number × 10^exponent, exact in the bounds; far above them: a value beyond them; far below
    a nano: a tenth of a nano (it rounds as any value under a nano does)."""
    if number == 0:
        return number
    magnitude = number.adjusted() + exponent
    if magnitude > 19:
        return Decimal(MAX_QUANTITY_MAGNITUDE + 1).copy_sign(number)
    if magnitude < -10:
        return _BELOW_NANO.copy_sign(number)
    return number.scaleb(exponent)


@functools.lru_cache(maxsize=8192)
def format_milli(milli: int) -> str:
    """Canonical decimal text of a value given in thousandths (TFLOPs, percent)."""
    if milli % 1000:
        return f"{milli}m"
    return _integer_text(milli // 1000)


@functools.lru_cache(maxsize=8192)
def format_bytes(count: int) -> str:
    """Canonical binary text of a byte count ("80Gi", "1536Mi", "512")."""
    if abs(count) >= 1024:
        for shift, suffix in _BINARY_BY_SHIFT:
            if count % (1 << shift) == 0:
                return f"{count >> shift}{suffix}"
        return str(count)
    return _integer_text(count)


def _integer_text(value: int) -> str:
    """DecimalSI text of a whole number ("0", "312", "2k", "12M")."""
    if value == 0:
        return "0"
    exponent = 0
    while exponent < 18 and value % 1000 == 0:
        value //= 1000
        exponent += 3
    return f"{value}{_DECIMAL_BY_EXPONENT[exponent]}"


def _round_to_nano(value: Decimal) -> Decimal:
    with localcontext(_CONTEXT):
        if value == value.to_integral_value():
            return value.quantize(Decimal(1)) if value.as_tuple().exponent != 0 else value
        return value.quantize(_NANO, rounding=ROUND_CEILING).normalize()


def _canonical(value: Decimal, fmt: QuantityFormat) -> str:
    if value == 0:
        return "0"
    if fmt is QuantityFormat.BINARY_SI and abs(value) >= 1024 and value == value.to_integral():
        whole = int(value)
        for shift, suffix in _BINARY_BY_SHIFT:
            if whole % (1 << shift) == 0:
                return f"{whole >> shift}{suffix}"
        return str(whole)
    return _decimal_text(value, fmt)


def _decimal_text(value: Decimal, fmt: QuantityFormat) -> str:
    with localcontext(_CONTEXT):
        sign, digits, exponent = value.normalize().as_tuple()
        assert isinstance(exponent, int)
        mantissa = int("".join(map(str, digits)))
        # Move trailing zeros into the exponent, then align the exponent down to a multiple of 3.
        while mantissa % 10 == 0 and mantissa != 0:
            mantissa //= 10
            exponent += 1
        aligned = max(-9, exponent - exponent % 3)
        if fmt is not QuantityFormat.DECIMAL_EXPONENT:
            aligned = min(aligned, 18)
        mantissa *= 10 ** (exponent - aligned)
        prefix = "-" if sign else ""
        if fmt is QuantityFormat.DECIMAL_EXPONENT:
            return f"{prefix}{mantissa}" + (f"e{aligned}" if aligned else "")
        return f"{prefix}{mantissa}{_DECIMAL_BY_EXPONENT[aligned]}"

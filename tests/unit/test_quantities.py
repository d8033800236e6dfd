"""Kubernetes quantities: exact parsing, canonical printing, arithmetic without floats."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensorfusion.domain.quantities import (
    Quantity,
    QuantityError,
    QuantityFormat,
    format_bytes,
    format_milli,
    parse_quantity,
)


@pytest.mark.parametrize(
    ("text", "value", "printed"),
    [
        ("16Gi", Decimal(16 * 2**30), "16Gi"),
        ("100", Decimal(100), "100"),
        ("1500m", Decimal("1.5"), "1500m"),
        ("1e3", Decimal(1000), "1e3"),
        ("1E3", Decimal(1000), "1e3"),
        ("0.5", Decimal("0.5"), "500m"),
        ("81920Mi", Decimal(80 * 2**30), "80Gi"),
        ("1.5Gi", Decimal(1536 * 2**20), "1536Mi"),
        ("1000", Decimal(1000), "1k"),
        ("312", Decimal(312), "312"),
        ("100u", Decimal("0.0001"), "100u"),
        ("12e6", Decimal(12_000_000), "12e6"),
        ("1023", Decimal(1023), "1023"),
        ("0", Decimal(0), "0"),
        ("+5", Decimal(5), "5"),
        ("-2Gi", Decimal(-2 * 2**30), "-2Gi"),
        (".5", Decimal("0.5"), "500m"),
        ("2000000", Decimal(2_000_000), "2M"),
        ("1n", Decimal("1e-9"), "1n"),
    ],
)
def test_parse_and_print_exactly(text: str, value: Decimal, printed: str) -> None:
    quantity = parse_quantity(text)
    assert quantity.value == value
    assert str(quantity) == printed


@pytest.mark.parametrize("text", ["3Gx", "", "16GB", " 1", "1 ", "1.2.3", "Gi", "1Kb", "e3", "--1"])
def test_rejects_what_kubernetes_rejects(text: str) -> None:
    with pytest.raises(QuantityError, match="not a quantity"):
        parse_quantity(text)


def test_binary_amount_not_a_power_of_1024_prints_plain() -> None:
    assert format_bytes(2_000_000) == "2000000"
    assert format_bytes(1000) == "1k"


def test_arithmetic_is_exact_and_keeps_the_format() -> None:
    total = parse_quantity("0.1") + parse_quantity("0.2")
    assert total.value == Decimal("0.3")
    assert str(parse_quantity("1Gi") + parse_quantity("512Mi")) == "1536Mi"
    assert str(parse_quantity("8Gi") * 3) == "24Gi"
    assert (parse_quantity("1Gi") - parse_quantity("1Gi")).is_zero()
    assert parse_quantity("1500m").milli() == 1500
    assert parse_quantity("1Ki").ceil() == 1024
    assert parse_quantity("0.0001").milli() == 1  # rounded up
    assert Quantity(0) + parse_quantity("2Gi") == parse_quantity("2Gi")
    assert (Quantity(0) + parse_quantity("2Gi")).format is QuantityFormat.BINARY_SI


def test_sub_nano_values_round_up_to_nano() -> None:
    assert parse_quantity("0.0000000001").value == Decimal("1e-9")


@given(st.integers(-(2**63 - 1), 2**63 - 1))
def test_milli_and_byte_texts_parse_back(value: int) -> None:
    assert parse_quantity(format_milli(value)).milli() == value
    assert parse_quantity(format_bytes(value)).ceil() == value


@given(st.decimals(min_value=-(10**12), max_value=10**12, places=3, allow_nan=False))
def test_printed_text_parses_back_to_the_same_value(value: Decimal) -> None:
    for fmt in QuantityFormat:
        quantity = Quantity(value, fmt)
        assert parse_quantity(str(quantity)) == quantity


# ---- bounds (as Kubernetes' resource.Quantity: int32 exponent, max int64 value) -------------


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("1e400", "must be at most 9223372036854775807 in magnitude"),
        ("-1e400", "must be at most 9223372036854775807 in magnitude"),
        ("9223372036854775808", "must be at most 9223372036854775807 in magnitude"),
        ("8Ei", "must be at most 9223372036854775807 in magnitude"),
        ("9223372036854775807.0000000001", "must be at most"),  # rounded up to nano first
        ("1e2147483648", "exponent outside -2147483648..2147483647"),
        ("1e-2147483649", "exponent outside"),
        ("9" * 10_000, "longer than 128 characters"),
        ("0." + "0" * 200 + "1", "longer than 128 characters"),
    ],
)
def test_values_beyond_the_bounds_are_refused_in_the_one_format(text: str, rule: str) -> None:
    with pytest.raises(QuantityError) as caught:
        parse_quantity(text)
    assert caught.value.out_of_range and rule in caught.value.rule
    assert str(caught.value).startswith(f'invalid value "{text[:80]}')
    assert str(caught.value).endswith(caught.value.rule)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("9223372036854775807", Decimal(2**63 - 1)),
        ("-9223372036854775807", Decimal(-(2**63 - 1))),
        ("7Ei", Decimal(7 * 2**60)),
        ("1e-2147483648", Decimal("1e-9")),  # far below a nano: rounds up to 1n
        ("0e2147483647", Decimal(0)),
        ("1." + "0" * 100 + "1", Decimal("1.000000001")),  # every digit counts
    ],
)
def test_values_within_the_bounds_parse_exactly(text: str, value: Decimal) -> None:
    assert parse_quantity(text).value == value


def test_syntax_errors_are_not_range_errors() -> None:
    with pytest.raises(QuantityError) as caught:
        parse_quantity("lots")
    assert not caught.value.out_of_range
    assert str(caught.value) == 'invalid value "lots": not a quantity'

"""Building blocks of the resource model: the wire base class, quantity and bounded types.

Field names on the wire are camelCase; Python attributes are snake_case. Aliases come from a
camel-case generator, and fields whose wire name is not plain camel case (``totalTFlops``,
``totalVRAM``, ...) give their alias explicitly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any, ClassVar, Final

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError, core_schema

from tensorfusion.domain.durations import DurationError, parse_go_duration
from tensorfusion.domain.quantities import Quantity, QuantityError, parse_quantity

__all__ = [
    "FreeForm",
    "GoDuration",
    "Int32",
    "Int64",
    "NonNegativeQuantity",
    "Percent",
    "PercentInt",
    "QuantityAnnotation",
    "QuantityValue",
    "Range",
    "Timestamp",
    "WireFormat",
    "WireModel",
]


class WireModel(BaseModel):
    """Base of every object of the API: camelCase aliases, tolerant of unknown fields.

    ``crd_preserve_unknown_fields`` marks models whose CRD schema keeps unknown fields
    (``x-kubernetes-preserve-unknown-fields``) instead of letting the API server prune them.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
        extra="allow",
    )

    crd_preserve_unknown_fields: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class WireFormat:
    """OpenAPI ``format`` of a field (``int32``, ``int64``, ``date-time``); schema only."""

    name: str


@dataclass(frozen=True, slots=True)
class Range:
    """Inclusive bounds of an integer or quantity field, checked on load and written to the CRD."""

    minimum: int | None = None
    maximum: int | None = None

    def describe(self) -> str:
        """What the bounds allow, in words."""
        if self.minimum is not None and self.maximum is not None:
            return f"must be between {self.minimum} and {self.maximum}"
        if self.minimum is not None:
            return f"must be at least {self.minimum}"
        return f"must be at most {self.maximum}"

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def _check(self, value: Any) -> Any:
        number = value.value if isinstance(value, Quantity) else Decimal(value)
        if (self.minimum is not None and number < self.minimum) or (
            self.maximum is not None and number > self.maximum
        ):
            raise PydanticCustomError("out_of_range", self.describe())
        return value


_QUANTITY_HINT: Final = 'must be a Kubernetes quantity such as "16Gi", "100" or "500m"'


def _to_quantity(value: Any) -> Quantity:
    if isinstance(value, Quantity):
        return value
    if isinstance(value, bool):
        raise PydanticCustomError("quantity", _QUANTITY_HINT)
    if isinstance(value, float) and not math.isfinite(value):
        raise PydanticCustomError("quantity", _QUANTITY_HINT)
    if isinstance(value, int | float | str):
        try:
            return parse_quantity(value if isinstance(value, str) else repr(value))
        except QuantityError as error:
            if error.out_of_range:
                raise PydanticCustomError("quantity", "{rule}", {"rule": error.rule}) from None
            raise PydanticCustomError("quantity", _QUANTITY_HINT) from None
    raise PydanticCustomError("quantity", _QUANTITY_HINT)


class QuantityAnnotation:
    """Marks a :class:`Quantity` field: parsed from a string or number, written canonically."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            _to_quantity,
            serialization=core_schema.plain_serializer_function_ser_schema(
                str, return_schema=core_schema.str_schema()
            ),
        )


class _GoDurationAnnotation:
    """A Go ``time.Duration`` string (``"30s"``, ``"5m"``, ``"1h30m"``)."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    @staticmethod
    def _check(value: str) -> str:
        try:
            parse_go_duration(value)
        except DurationError:
            raise PydanticCustomError(
                "duration", 'must be a duration such as "30s", "5m" or "1h30m"'
            ) from None
        return value


QUANTITY: Final = QuantityAnnotation()

QuantityValue = Annotated[Quantity, QUANTITY]
"""A Kubernetes quantity (TFLOPs, bytes, percent), any sign."""
NonNegativeQuantity = Annotated[Quantity, QUANTITY, Range(minimum=0)]
"""A quantity that must not be negative."""
Percent = Annotated[Quantity, QUANTITY, Range(minimum=0, maximum=100)]
"""A quantity from 0 to 100 (percent of one GPU)."""
Int32 = Annotated[int, WireFormat("int32")]
PercentInt = Annotated[int, WireFormat("int32"), Range(0, 100)]
"""An integer percent, 0 to 100."""
Int64 = Annotated[int, WireFormat("int64")]
Timestamp = Annotated[str, WireFormat("date-time")]
"""An RFC 3339 time, kept as written."""
GoDuration = Annotated[str, _GoDurationAnnotation()]
FreeForm = dict[str, Any]
"""A free-form object kept verbatim (``x-kubernetes-preserve-unknown-fields``)."""

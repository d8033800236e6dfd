"""OpenAPI v3 structural schemas for CRDs, derived from the pydantic models.

Rules of a Kubernetes structural schema that this follows: every node has a ``type`` (except
int-or-string and preserve-unknown nodes), no ``$ref``, no ``nullable``, ``anyOf`` only for
int-or-string quantities, ``properties`` and ``additionalProperties`` never together.
Optional fields are simply not ``required``. Scalar Python defaults become ``default``.
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Mapping, Sequence
from enum import Enum
from typing import Annotated, Any, Final, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from tensorfusion.domain.model.base import QuantityAnnotation, Range, WireFormat
from tensorfusion.domain.model.meta import KubeObject
from tensorfusion.domain.quantities import Quantity

__all__ = ["QUANTITY_PATTERN", "SchemaError", "model_schema", "resource_schema"]

QUANTITY_PATTERN: Final = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


class SchemaError(TypeError):
    """A model uses a Python type that has no structural-schema form."""


def _quantity_schema() -> dict[str, Any]:
    return {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": True,
    }


def _description(doc: str | None) -> str | None:
    if not doc:
        return None
    paragraph = doc.strip().split("\n\n", 1)[0]
    return " ".join(paragraph.replace("``", "`").split())


def _apply_metadata(schema: dict[str, Any], metadata: Iterable[Any]) -> dict[str, Any]:
    for item in metadata:
        if isinstance(item, WireFormat):
            schema["format"] = item.name
        elif isinstance(item, Range) and schema.get("type") == "integer":
            if item.minimum is not None:
                schema["minimum"] = item.minimum
            if item.maximum is not None:
                schema["maximum"] = item.maximum
    return schema


def _type_schema(annotation: Any, metadata: Sequence[Any] = ()) -> dict[str, Any]:
    origin = get_origin(annotation)
    if origin is Annotated:
        inner, *extra = get_args(annotation)
        return _type_schema(inner, [*extra, *metadata])
    if origin in (Union, types.UnionType):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(members) != 1:
            raise SchemaError(f"unions other than Optional are not structural: {annotation!r}")
        return _type_schema(members[0], metadata)
    if annotation is Quantity:
        if not any(isinstance(item, QuantityAnnotation) for item in metadata):
            raise SchemaError("Quantity fields must use QuantityValue or a variant")
        return _quantity_schema()
    if origin is Literal:
        values = list(get_args(annotation))
        if not all(isinstance(value, str) for value in values):
            raise SchemaError(f"only string literals are supported: {annotation!r}")
        return {"type": "string", "enum": values}
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return {"type": "string", "enum": [member.value for member in annotation]}
    if annotation is bool:
        return {"type": "boolean"}
    if annotation is int:
        return _apply_metadata({"type": "integer"}, metadata)
    if annotation is float:
        return {"type": "number"}
    if annotation is str:
        return _apply_metadata({"type": "string"}, metadata)
    if origin in (list, Sequence):
        (item,) = get_args(annotation)
        return {"type": "array", "items": _type_schema(item)}
    if origin in (dict, Mapping):
        key, value = get_args(annotation)
        if key is not str:
            raise SchemaError(f"map keys must be strings: {annotation!r}")
        if value is Any:
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        return {"type": "object", "additionalProperties": _type_schema(value)}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return model_schema(annotation)
    raise SchemaError(f"no structural schema for {annotation!r}")


def _scalar_default(field: FieldInfo) -> Any:
    default = field.default
    if default is PydanticUndefined or default is None:
        return None
    if isinstance(default, Enum):
        return default.value
    if isinstance(default, bool | int | float | str):
        return default
    return None


def _field_schema(field: FieldInfo) -> dict[str, Any]:
    schema = _type_schema(field.annotation, field.metadata)
    default = _scalar_default(field)
    if default is not None:
        schema["default"] = default
    if field.description:
        schema["description"] = field.description
    return schema


def model_schema(model: type[BaseModel], *, skip: Iterable[str] = ()) -> dict[str, Any]:
    """The structural schema of a model (an ``object`` with sorted ``properties``)."""
    skipped = set(skip)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, field in model.model_fields.items():
        if name in skipped:
            continue
        wire = field.alias or name
        properties[wire] = _field_schema(field)
        if field.is_required():
            required.append(wire)
    schema: dict[str, Any] = {"type": "object"}
    description = _description(model.__doc__)
    if description:
        schema["description"] = description
    if properties:
        schema["properties"] = dict(sorted(properties.items()))
    if required:
        schema["required"] = sorted(required)
    if getattr(model, "crd_preserve_unknown_fields", False):
        schema["x-kubernetes-preserve-unknown-fields"] = True
    return schema


def resource_schema(model: type[KubeObject]) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of a kind: apiVersion, kind, metadata, then spec and status."""
    schema = model_schema(model, skip=("api_version", "kind", "metadata"))
    properties = schema.setdefault("properties", {})
    properties["apiVersion"] = {
        "type": "string",
        "description": "Versioned schema of this representation of an object.",
    }
    properties["kind"] = {"type": "string", "description": "The REST resource of this object."}
    properties["metadata"] = {"type": "object"}
    schema["properties"] = dict(sorted(properties.items()))
    return schema

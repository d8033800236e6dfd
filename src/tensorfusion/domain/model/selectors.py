"""Kubernetes label and node selectors as used in pool and template specs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tensorfusion.domain.model.base import WireModel

__all__ = [
    "LabelSelector",
    "LabelSelectorRequirement",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
]


class LabelSelectorRequirement(WireModel):
    """One ``matchExpressions`` entry of a label selector."""

    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)


class LabelSelector(WireModel):
    """A label query; an empty selector matches everything."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list)


class NodeSelectorRequirement(WireModel):
    """One requirement of a node selector term, on labels or fields."""

    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] = Field(default_factory=list)


class NodeSelectorTerm(WireModel):
    """Requirements that must all hold (AND)."""

    match_expressions: list[NodeSelectorRequirement] = Field(default_factory=list)
    match_fields: list[NodeSelectorRequirement] = Field(default_factory=list)


class NodeSelector(WireModel):
    """Core ``NodeSelector``: the union (OR) of its terms."""

    node_selector_terms: list[NodeSelectorTerm]

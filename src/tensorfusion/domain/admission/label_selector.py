"""Kubernetes `LabelSelector` matching (matchLabels and matchExpressions) over plain dicts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["SelectorError", "selector_matches"]


class SelectorError(ValueError):
    """A selector that is not a valid LabelSelector."""


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """True when `labels` satisfy `selector`; an empty selector matches everything."""
    if not isinstance(selector, Mapping):
        raise SelectorError("selector must be an object")
    match_labels = selector.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise SelectorError("matchLabels must be an object")
    for key, value in match_labels.items():
        if labels.get(key) != value:
            return False
    expressions = selector.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise SelectorError("matchExpressions must be a list")
    return all(_expression_matches(expression, labels) for expression in expressions)


def _expression_matches(expression: Any, labels: Mapping[str, str]) -> bool:
    if not isinstance(expression, Mapping):
        raise SelectorError("a matchExpressions item must be an object")
    key = expression.get("key")
    operator = expression.get("operator")
    values = expression.get("values") or []
    if not isinstance(key, str) or not key or not isinstance(values, list):
        raise SelectorError("a matchExpressions item needs a key and a list of values")
    if operator in ("In", "NotIn"):
        if not values:
            raise SelectorError(f"operator {operator} needs values")
        present = key in labels and str(labels[key]) in values
        return present if operator == "In" else not present
    if operator in ("Exists", "DoesNotExist"):
        if values:
            raise SelectorError(f"operator {operator} takes no values")
        return bool((key in labels) == (operator == "Exists"))
    raise SelectorError(f"unknown operator {operator!r}")

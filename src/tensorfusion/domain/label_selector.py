"""Kubernetes `LabelSelector` reading and matching (matchLabels and matchExpressions)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pydantic import ValidationError

from tensorfusion.domain.model import LabelSelector, unknown_fields
from tensorfusion.domain.model.errors import describe_value, issues_from

__all__ = ["SelectorError", "parse_selector", "selector_matches"]

_SELECTOR_RULE: Final = "must be a label selector object (matchLabels, matchExpressions)"


class SelectorError(ValueError):
    """A selector that is not a valid LabelSelector; the message names the field and value."""


def parse_selector(value: Any, where: str) -> LabelSelector:
    """Validate a raw selector written at `where` (a field path used in error messages)."""
    if not isinstance(value, Mapping):
        raise SelectorError(f"{where}: invalid value {describe_value(value)}: {_SELECTOR_RULE}")
    try:
        selector = LabelSelector.model_validate(value)
    except ValidationError as error:
        raise SelectorError("; ".join(map(str, issues_from(error, (where,))))) from None
    problems = [f"{where}.{path}: unknown field" for path in unknown_fields(selector)]
    for i, requirement in enumerate(selector.match_expressions):
        field = f"{where}.matchExpressions[{i}]"
        if not requirement.key:
            problems.append(f"{field}.key: must not be empty")
        if requirement.operator in ("In", "NotIn") and not requirement.values:
            problems.append(f"{field}.values: operator {requirement.operator} needs values")
        if requirement.operator in ("Exists", "DoesNotExist") and requirement.values:
            problems.append(
                f"{field}.values: invalid value {describe_value(requirement.values)}: "
                f"operator {requirement.operator} takes no values"
            )
    if problems:
        raise SelectorError("; ".join(problems))
    return selector


def selector_matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """True when `labels` satisfy `selector`; an empty selector matches everything."""
    if any(labels.get(key) != value for key, value in selector.match_labels.items()):
        return False
    for requirement in selector.match_expressions:
        present = requirement.key in labels
        if requirement.operator == "In" and not (
            present and labels[requirement.key] in requirement.values
        ):
            return False
        if (
            requirement.operator == "NotIn"
            and present
            and (labels[requirement.key] in requirement.values)
        ):
            return False
        if requirement.operator == "Exists" and not present:
            return False
        if requirement.operator == "DoesNotExist" and present:
            return False
    return True

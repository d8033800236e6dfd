"""NodeAffinity: `nodeSelector` and required node affinity, compiled once per pod.

Terms of `nodeSelectorTerms` are ORed; within a term all `matchExpressions` and `matchFields`
must hold. A term kube-scheduler cannot parse (unknown operator, wrong value count, a Gt/Lt value
that is not an integer, a field other than `metadata.name`) matches no node, and so does a term
with neither list.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from tensorfusion.domain.scheduling.native.node import NodeFacts
from tensorfusion.domain.scheduling.native.resources import NativeInputError

__all__ = [
    "NODE_AFFINITY",
    "NODE_AFFINITY_REASON",
    "AffinityRequirement",
    "AffinityTerm",
    "RequiredNodeAffinity",
]

NODE_AFFINITY: Final = "NodeAffinity"
NODE_AFFINITY_REASON: Final = "node(s) didn't match Pod's node affinity/selector"

_INTEGER: Final = re.compile(r"[+-]?[0-9]+")
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_IN, _NOT_IN, _EXISTS, _DOES_NOT_EXIST, _GT, _LT = (
    "In",
    "NotIn",
    "Exists",
    "DoesNotExist",
    "Gt",
    "Lt",
)


def _int64(text: str) -> int | None:
    if not _INTEGER.fullmatch(text):
        return None
    number = int(text)
    return number if _INT64_MIN <= number <= _INT64_MAX else None


@dataclass(frozen=True, slots=True)
class AffinityRequirement:
    """One `matchExpressions` entry (operator In, NotIn, Exists, DoesNotExist, Gt or Lt)."""

    key: str
    operator: str
    values: frozenset[str] = frozenset()
    bound: int = 0

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a node with these labels satisfies the requirement."""
        operator = self.operator
        value = labels.get(self.key)
        if operator == _IN:
            return value is not None and value in self.values
        if operator == _NOT_IN:
            return value is None or value not in self.values
        if operator == _EXISTS:
            return value is not None
        if operator == _DOES_NOT_EXIST:
            return value is None
        if value is None:
            return False
        number = _int64(value)
        if number is None:
            return False
        return number > self.bound if operator == _GT else number < self.bound

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> AffinityRequirement | None:
        """Compile an expression; None when kube-scheduler would reject it."""
        key = raw.get("key")
        operator = raw.get("operator")
        values = raw.get("values") or []
        if not isinstance(key, str) or not isinstance(values, list):
            return None
        texts = [str(v) for v in values]
        if operator in (_IN, _NOT_IN):
            return cls(key, operator, frozenset(texts)) if texts else None
        if operator in (_EXISTS, _DOES_NOT_EXIST):
            return None if texts else cls(key, operator)
        if operator in (_GT, _LT):
            bound = _int64(texts[0]) if len(texts) == 1 else None
            return None if bound is None else cls(key, operator, bound=bound)
        return None


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """One ORed term: label requirements and `metadata.name` requirements, all ANDed."""

    expressions: tuple[AffinityRequirement, ...] = ()
    name_in: tuple[frozenset[str], ...] = ()
    name_not_in: tuple[frozenset[str], ...] = ()
    valid: bool = True

    def matches(self, node: NodeFacts) -> bool:
        """Whether the node satisfies every requirement of the term."""
        if not self.valid:
            return False
        labels = node.labels
        for expression in self.expressions:
            if not expression.matches(labels):
                return False
        name = node.name
        return all(name in names for names in self.name_in) and all(
            name not in names for names in self.name_not_in
        )

    @classmethod
    def parse(cls, raw: object) -> AffinityTerm:
        """Compile a term; an unparsable or empty term never matches."""
        if not isinstance(raw, Mapping):
            return cls(valid=False)
        raw_expressions = raw.get("matchExpressions") or []
        raw_fields = raw.get("matchFields") or []
        if not isinstance(raw_expressions, list) or not isinstance(raw_fields, list):
            return cls(valid=False)
        if not raw_expressions and not raw_fields:
            return cls(valid=False)
        expressions = []
        for item in raw_expressions:
            parsed = AffinityRequirement.parse(item) if isinstance(item, Mapping) else None
            if parsed is None:
                return cls(valid=False)
            expressions.append(parsed)
        name_in: list[frozenset[str]] = []
        name_not_in: list[frozenset[str]] = []
        for item in raw_fields:
            if not isinstance(item, Mapping) or item.get("key") != "metadata.name":
                return cls(valid=False)
            values = item.get("values") or []
            if not isinstance(values, list) or len(values) != 1:
                return cls(valid=False)
            if item.get("operator") == _IN:
                name_in.append(frozenset(str(v) for v in values))
            elif item.get("operator") == _NOT_IN:
                name_not_in.append(frozenset(str(v) for v in values))
            else:
                return cls(valid=False)
        return cls(tuple(expressions), tuple(name_in), tuple(name_not_in))


@dataclass(frozen=True, slots=True)
class RequiredNodeAffinity:
    """A pod's `nodeSelector` plus its required node affinity (None: no affinity given)."""

    node_selector: tuple[tuple[str, str], ...] = ()
    terms: tuple[AffinityTerm, ...] | None = None

    def matches(self, node: NodeFacts) -> bool:
        """Whether the node satisfies the selector and at least one affinity term."""
        labels = node.labels
        for key, value in self.node_selector:
            if labels.get(key) != value:
                return False
        if self.terms is None:
            return True
        return any(term.matches(node) for term in self.terms)

    @property
    def is_empty(self) -> bool:
        """True when every node matches."""
        return not self.node_selector and self.terms is None

    @classmethod
    def from_pod_spec(cls, spec: Mapping[str, Any]) -> RequiredNodeAffinity:
        """Compile `spec.nodeSelector` and `spec.affinity.nodeAffinity.required...`."""
        selector = spec.get("nodeSelector") or {}
        if not isinstance(selector, Mapping):
            raise NativeInputError(f"spec.nodeSelector: expected a map, got {selector!r}")
        pairs = tuple(sorted((str(k), str(v)) for k, v in selector.items()))
        affinity = spec.get("affinity") or {}
        node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
        required = (
            node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
            if isinstance(node_affinity, Mapping)
            else None
        )
        if required is None:
            return cls(pairs, None)
        raw_terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
        if not isinstance(raw_terms, list):
            return cls(pairs, ())
        return cls(pairs, tuple(AffinityTerm.parse(term) for term in raw_terms))

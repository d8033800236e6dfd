"""One error format for annotation problems (admission.md §2).

A problem reads `<full annotation key>: invalid value "<value>": <rule>`; problems not tied to one
annotation name the object or field instead. `AnnotationError` carries every problem found in one
request; its message joins them with "; " in the order of the table in admission.md §5.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

__all__ = [
    "TABLE_ORDER",
    "AnnotationError",
    "Code",
    "Problem",
    "invalid_value",
    "problem",
    "rank_of",
    "reason_of",
]


class Code(IntEnum):
    """The HTTP-ish status code of a denial."""

    BAD_REQUEST = 400
    FORBIDDEN = 403
    CONFLICT = 409
    SERVICE_UNAVAILABLE = 503


_REASONS: Final[dict[int, str]] = {
    Code.BAD_REQUEST: "BadRequest",
    Code.FORBIDDEN: "Forbidden",
    Code.CONFLICT: "Conflict",
    Code.SERVICE_UNAVAILABLE: "ServiceUnavailable",
}

# Which code wins when one request has problems of several kinds.
_SEVERITY: Final[tuple[int, ...]] = (
    Code.SERVICE_UNAVAILABLE,
    Code.CONFLICT,
    Code.BAD_REQUEST,
    Code.FORBIDDEN,
)

# The rows of the admission.md §5 table, flattened; combination rows have their own names.
TABLE_ORDER: Final[tuple[str, ...]] = (
    "enabled-replicas",
    "workload-profile",
    "gpupool",
    "is-local-gpu",
    "sidecar-worker",
    "dedicated-gpu",
    "autoscale",
    "gang-enabled",
    "require-gpu-topology",
    "isolation",
    "partition-id",
    "worker-pod-template",
    "tflops-limit",
    "tflops-request",
    "vram-limit",
    "vram-request",
    "compute-percent-limit",
    "compute-percent-request",
    "tflops-with-compute-percent",
    "gpu-count",
    "gpu-indices",
    "gpu-count-with-gpu-indices",
    "qos",
    "gpu-model",
    "vendor",
    "inject-container",
    "autoscale-target",
    "disable-features",
    "gang-min-members",
    "gang-timeout",
    "eviction-protection",
    "gpu-topology-max-tier",
    "gpu-topology-source",
    "host-port",
)
_RANKS: Final[dict[str, int]] = {name: rank for rank, name in enumerate(TABLE_ORDER)}
_UNRANKED: Final = len(TABLE_ORDER)
_MAX_VALUE_CHARS: Final = 80


def rank_of(key: str) -> int:
    """Position of an annotation (full key or bare name) in the §5 table; after it if absent."""
    return _RANKS.get(key.rsplit("/", 1)[-1], _UNRANKED)


def reason_of(code: int) -> str:
    """Kubernetes `status.reason` for a code (`BadRequest`, `Forbidden`, ...)."""
    return _REASONS.get(code, "InternalError")


@dataclass(frozen=True, slots=True)
class Problem:
    """One denial reason: the message, its rank in the §5 table and its code."""

    message: str
    rank: int = _UNRANKED
    code: int = Code.BAD_REQUEST


def _quote(value: str) -> str:
    if len(value) > _MAX_VALUE_CHARS:
        value = value[:_MAX_VALUE_CHARS] + "..."
    return json.dumps(value, ensure_ascii=False)


def invalid_value(
    key: str, value: str, rule: str, *, rank_as: str = "", code: int = Code.BAD_REQUEST
) -> Problem:
    """`<key>: invalid value "<value>": <rule>`, ranked by the key (or by `rank_as`)."""
    rank = rank_of(rank_as or key)
    return Problem(f"{key}: invalid value {_quote(value)}: {rule}", rank, code)


def problem(message: str, *, about: str = "", code: int = Code.BAD_REQUEST) -> Problem:
    """A problem not tied to one annotation value; `about` names the annotation for ranking."""
    return Problem(message, rank_of(about) if about else _UNRANKED, code)


class AnnotationError(ValueError):
    """Every problem found in one request, in table order, with the code of the denial."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        ordered = tuple(sorted(problems, key=lambda item: item.rank))
        if not ordered:
            raise ValueError("AnnotationError needs at least one problem")
        self.problems: tuple[Problem, ...] = ordered
        super().__init__(self.message)

    @property
    def message(self) -> str:
        """All problem messages joined by "; "."""
        return "; ".join(item.message for item in self.problems)

    @property
    def code(self) -> int:
        """503 over 409 over 400 over 403."""
        codes = {item.code for item in self.problems}
        for code in _SEVERITY:
            if code in codes:
                return code
        return self.problems[0].code

    @property
    def reason(self) -> str:
        """`status.reason` matching `code`."""
        return reason_of(self.code)

    def __str__(self) -> str:
        return self.message

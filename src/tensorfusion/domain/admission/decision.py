"""The result of admitting one pod: the answer plus the writes the shell must perform."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tensorfusion.domain.admission.replica_gate import CounterIncrement
from tensorfusion.domain.admission.workload import WorkloadWrite
from tensorfusion.domain.annotation_errors import AnnotationError

__all__ = ["AdmissionDecision", "AdmissionOutcome"]


class AdmissionOutcome(StrEnum):
    """What happened to the pod."""

    UNTOUCHED = "untouched"  # allowed, no patch
    SCHEDULER_ONLY = "scheduler-only"  # progressive-migration scheduler patch only
    MUTATED = "mutated"  # TF pipeline applied
    DENIED = "denied"


@dataclass(frozen=True, slots=True)
class AdmissionDecision:
    """Answer, patch, warnings and the side effects to perform (none on a dry run).

    `mutated_pod` is the pod as admitted (the original when untouched, None when denied).
    On a TF pod the shell performs, in order and unless `dry_run`: `counter_increment`, then
    `workload` (create, or patch with `workload.spec_patch(existing)`).
    """

    allowed: bool
    outcome: AdmissionOutcome
    code: int | None = None
    reason: str | None = None
    message: str = ""
    patch: tuple[dict[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()
    mutated_pod: Mapping[str, Any] | None = None
    workload: WorkloadWrite | None = None
    counter_increment: CounterIncrement | None = None
    dry_run: bool = False

    @classmethod
    def deny(
        cls, error: AnnotationError, warnings: tuple[str, ...] = (), *, dry_run: bool = False
    ) -> AdmissionDecision:
        """A denial carrying the error's code, reason and joined message."""
        return cls(
            allowed=False,
            outcome=AdmissionOutcome.DENIED,
            code=error.code,
            reason=error.reason,
            message=error.message,
            warnings=warnings,
            dry_run=dry_run,
        )

    @property
    def has_writes(self) -> bool:
        """True when the shell has a counter or workload to write (never on a dry run)."""
        return not self.dry_run and (
            self.workload is not None or self.counter_increment is not None
        )

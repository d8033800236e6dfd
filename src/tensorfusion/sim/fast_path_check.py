"""`--verify-fast-path`: every indexed decision shadowed by a full evaluation of every node."""

from __future__ import annotations

from dataclasses import dataclass, field

from tensorfusion.domain.scheduling.decision import Decision

__all__ = ["MAX_MISMATCHES_KEPT", "FastPathCheck", "FastPathMismatch"]

MAX_MISMATCHES_KEPT = 5


@dataclass(frozen=True, slots=True)
class FastPathMismatch:
    """One decision where the indexed search and the full evaluation disagreed."""

    pod: str
    fast: Decision
    full: Decision


@dataclass(slots=True)
class FastPathCheck:
    """The decisions compared so far and the first disagreements."""

    decisions: int = 0
    mismatches: int = 0
    examples: list[FastPathMismatch] = field(default_factory=list)

    def record(self, pod: str, fast: Decision, full: Decision) -> None:
        """Compare one pair of decisions (node, GPUs and combined score)."""
        self.decisions += 1
        if (fast.node, fast.gpus, fast.combined) != (full.node, full.gpus, full.combined):
            self.mismatches += 1
            if len(self.examples) < MAX_MISMATCHES_KEPT:
                self.examples.append(FastPathMismatch(pod, fast, full))

"""One check's outcome (doctor.md): what every static and live check returns."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["CheckResult", "Status", "exit_code"]


class Status(StrEnum):
    """PASS, WARN, FAIL or SKIP (a check that could not run, with the reason in `found`)."""

    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"


@dataclass(frozen=True, slots=True)
class CheckResult:
    """A check of the guide: its id (`ha.replicas`), the guide step it comes from (`1`, `2`,
    `verify`, `more`), the status, what was found, the fix (a values snippet or a command; empty
    when passing) and, for live checks, the `kubectl` command that shows the same."""

    id: str
    step: str
    status: Status
    found: str
    fix: str = ""
    command: str = ""

    def to_json(self) -> dict[str, Any]:
        """`{id, step, status, found, fix}` (and `command` when set), as `--output json` prints."""
        body: dict[str, Any] = {"id": self.id, "step": self.step, "status": self.status.value,
                                "found": self.found, "fix": self.fix}  # fmt: skip
        if self.command:
            body["command"] = self.command
        return body


def exit_code(results: list[CheckResult], *, strict: bool = False) -> int:
    """0 when no check failed (and, with `strict`, none warned), else 1."""
    bad = {Status.FAIL, Status.WARN} if strict else {Status.FAIL}
    return 1 if any(result.status in bad for result in results) else 0

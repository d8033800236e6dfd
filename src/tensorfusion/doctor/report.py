"""The doctor's report: text grouped by guide step, or JSON (doctor.md, Output).

Text: one heading per guide step in the guide's order (steps 1 to 8, verify, more; a check of
several steps, `5, more`, is listed under its first), one line per check
`STATUS id: found`, under a check that did not pass its fix (a values snippet or a command)
and the `kubectl` command that shows the same, then a summary line. JSON: the list of
`CheckResult.to_json()`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Final

from rich.text import Text

from tensorfusion.domain.doctor.results import CheckResult, Status

__all__ = ["STEP_TITLES", "format_json", "format_text", "grouped", "summary"]

STEP_TITLES: Final = {
    "1": "Step 1. Make the control plane highly available",
    "2": "Step 2. Use a highly available GreptimeDB",
    "3": "Step 3. Set up alerting",
    "4": "Step 4. Pin component versions",
    "5": "Step 5. Migrate workloads gradually",
    "6": "Step 6. Review the scheduler configuration",
    "7": "Step 7. Control how components are updated",
    "8": "Step 8. Set conservative capacity policies",
    "verify": "Verify the deployment",
    "more": "More recommendations",
}
"""The guide's sections, in the order the report lists them."""

_STYLES: Final = {
    Status.PASS: "bold green",
    Status.WARN: "bold yellow",
    Status.FAIL: "bold red",
    Status.SKIP: "bold blue",
}
_INDENT: Final = " " * 7


def _first_step(step: str) -> str:
    return step.split(",", 1)[0].strip()


def grouped(results: Iterable[CheckResult]) -> list[tuple[str, list[CheckResult]]]:
    """(step, results) in the guide's order, each group in the given order; unknown steps
    after the known ones, in the order first seen."""
    groups: dict[str, list[CheckResult]] = {}
    for result in results:
        groups.setdefault(_first_step(result.step), []).append(result)
    order = list(STEP_TITLES)
    return sorted(
        groups.items(), key=lambda item: order.index(item[0]) if item[0] in order else len(order)
    )


def summary(results: Sequence[CheckResult]) -> str:
    """`N checks: a PASS, b WARN, c FAIL, d SKIP`."""
    counts = Counter(result.status for result in results)
    parts = ", ".join(f"{counts[status]} {status.value}" for status in Status)
    return f"{len(results)} check{'s' if len(results) != 1 else ''}: {parts}"


def _block(label: str, text: str) -> str:
    lines = text.splitlines() or [""]
    pad = _INDENT + " " * (len(label) + 1)
    return "\n".join([f"{_INDENT}{label} {lines[0]}", *(pad + line for line in lines[1:])])


def format_text(results: Sequence[CheckResult]) -> Text:
    """The report as styled text (plain when printed where colours are off)."""
    text = Text()
    for step, checks in grouped(results):
        text.append(STEP_TITLES.get(step, f"Step {step}") + "\n", style="bold")
        for check in checks:
            text.append("  ")
            text.append(f"{check.status.value:<4}", style=_STYLES[check.status])
            text.append(f" {check.id}: {check.found}\n")
            if check.status is Status.PASS:
                continue
            if check.fix:
                text.append(_block("fix:", check.fix) + "\n")
            if check.command:
                text.append(_block("see:", check.command) + "\n", style="dim")
        text.append("\n")
    text.append(summary(results))
    return text


def format_json(results: Sequence[CheckResult]) -> str:
    """The list of `CheckResult.to_json()`, indented."""
    return json.dumps([result.to_json() for result in results], indent=2)

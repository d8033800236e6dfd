"""A line-protocol body from outside, parsed and checked row by row (metrics.md §9.3).

Bad lines and rows that do not fit the schema are dropped alone and counted by reason; the
rest are kept for the store.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Final

from tensorfusion.domain.metrics.line_protocol import LineProtocolError, parse_records
from tensorfusion.domain.metrics.row_check import DropReason, ExtraTagCheck, RowProblem, check_row
from tensorfusion.domain.metrics.rows import MetricRow

__all__ = ["MAX_EXAMPLES", "Intake", "take_in_body", "take_in_rows"]

MAX_EXAMPLES: Final = 5
"""Messages kept per batch to name what was dropped (the counts cover every row)."""


@dataclass(slots=True)
class Intake:
    """The rows kept, the rows dropped by reason, and the first few drop messages."""

    rows: list[MetricRow] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)
    dropped_by_table: Counter[tuple[str, str]] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    @property
    def dropped_total(self) -> int:
        """Rows dropped, every reason."""
        return sum(self.dropped.values())

    def drop(self, reason: DropReason, message: str, table: str = "") -> None:
        """Count one dropped row (`table` empty when the line named none that parsed)."""
        self.dropped[reason.value] += 1
        self.dropped_by_table[(table, reason.value)] += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(message)

    def summary(self) -> str:
        """`N rows dropped (reason: n, ...): first messages`, for a log line or a reply."""
        reasons = ", ".join(f"{reason}: {count}" for reason, count in sorted(self.dropped.items()))
        return f"{self.dropped_total} rows dropped ({reasons}): " + "; ".join(self.examples)


def take_in_rows(
    rows: list[MetricRow],
    *,
    now_ms: int,
    extra_tag_ok: ExtraTagCheck | None = None,
    intake: Intake | None = None,
) -> Intake:
    """Rows checked against the schema and the time window (`check_row`)."""
    intake = intake if intake is not None else Intake()
    for row in rows:
        checked = check_row(row, now_ms=now_ms, extra_tag_ok=extra_tag_ok)
        if isinstance(checked, RowProblem):
            table = row.table if checked.reason is not DropReason.UNKNOWN_TABLE else ""
            intake.drop(checked.reason, checked.message, table)
        else:
            intake.rows.append(checked)
    return intake


def take_in_body(
    body: str, *, precision: str, now_ms: int, extra_tag_ok: ExtraTagCheck | None = None
) -> Intake:
    """Each line parsed and checked; a line without a time gets `now_ms`. LineProtocolError
    only for an unsupported precision (the whole request is wrong)."""
    intake = Intake()
    parsed: list[MetricRow] = []
    for item in parse_records(body, precision=precision, default_ts_ms=now_ms):
        if isinstance(item, LineProtocolError):
            intake.drop(DropReason.MALFORMED, str(item))
        else:
            parsed.append(item)
    return take_in_rows(parsed, now_ms=now_ms, extra_tag_ok=extra_tag_ok, intake=intake)

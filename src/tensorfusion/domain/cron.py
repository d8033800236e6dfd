"""Five-field cron expressions (minute hour day-of-month month day-of-week, UTC) for maintenance
windows (deployment.md §11 step 4) and cron scaling rules (docs/autoscaling.md): `*`, numbers,
ranges `a-b`, lists `a,b`, steps `*/n` and `a-b/n`; day-of-week 0-7 (0 and 7 are Sunday); names
are not accepted. When both day fields are restricted, a day matches either (as cron does).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

__all__ = [
    "MAX_LOOKBACK_MINUTES",
    "CronError",
    "CronSchedule",
    "last_fired",
    "parse_cron",
    "window_open",
]

_FIELDS: Final = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31),
                  ("month", 1, 12), ("day of week", 0, 7))  # fmt: skip
_MAX_SCAN_MINUTES: Final = 31 * 24 * 60
MAX_LOOKBACK_MINUTES: Final = _MAX_SCAN_MINUTES
"""How far back `last_fired` looks (31 days)."""


class CronError(ValueError):
    """Not a five-field cron expression; says which field and why."""


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """The minutes, hours, days, months and weekdays (0 = Sunday) an expression matches."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    days_restricted: bool
    weekdays_restricted: bool

    def matches(self, moment: datetime) -> bool:
        """Whether the minute of `moment` (UTC) is one the expression fires at."""
        moment = moment.astimezone(UTC)
        if moment.minute not in self.minutes or moment.hour not in self.hours:
            return False
        if moment.month not in self.months:
            return False
        day = moment.day in self.days
        weekday = (moment.isoweekday() % 7) in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return day or weekday
        return day and weekday


def _values(part: str, name: str, low: int, high: int) -> set[int]:
    step = 1
    if "/" in part:
        part, _, step_text = part.partition("/")
        if not step_text.isdigit() or int(step_text) == 0:
            raise CronError(f"{name}: step {step_text!r} must be a positive number")
        step = int(step_text)
    if part == "*":
        start, end = low, high
    elif "-" in part:
        first, _, last = part.partition("-")
        if not (first.isdigit() and last.isdigit()):
            raise CronError(f"{name}: {part!r} is not a range of numbers")
        start, end = int(first), int(last)
    elif part.isdigit():
        start = end = int(part)
        if step != 1:
            end = high
    else:
        raise CronError(f"{name}: {part!r} is not a number, range, list or *")
    if not low <= start <= end <= high:
        raise CronError(f"{name}: {part!r} must lie within {low}-{high}")
    return set(range(start, end + 1, step))


def parse_cron(text: str) -> CronSchedule:
    """The schedule of a five-field expression; CronError names the field that is wrong."""
    fields = text.split()
    if len(fields) != 5:
        raise CronError(f"{text!r}: must have 5 fields (minute hour day month weekday), "
                        f"not {len(fields)}")  # fmt: skip
    sets: list[set[int]] = []
    for field, (name, low, high) in zip(fields, _FIELDS, strict=True):
        values: set[int] = set()
        for part in field.split(","):
            values |= _values(part, name, low, high)
        sets.append(values)
    weekdays = {0 if day == 7 else day for day in sets[4]}
    return CronSchedule(
        text=text, minutes=frozenset(sets[0]), hours=frozenset(sets[1]),
        days=frozenset(sets[2]), months=frozenset(sets[3]), weekdays=frozenset(weekdays),
        days_restricted=fields[2] != "*", weekdays_restricted=fields[4] != "*",
    )  # fmt: skip


def window_open(schedules: tuple[CronSchedule, ...], duration_s: float, now: datetime) -> bool:
    """Whether a window is open at `now`: some schedule fired at most `duration_s` ago."""
    if not schedules or duration_s <= 0:
        return False
    minute = now.astimezone(UTC).replace(second=0, microsecond=0)
    for back in range(min(int(duration_s // 60) + 1, _MAX_SCAN_MINUTES)):
        moment = minute - timedelta(minutes=back)
        if (now - moment).total_seconds() >= duration_s:
            break
        if any(schedule.matches(moment) for schedule in schedules):
            return True
    return False


def last_fired(schedule: CronSchedule, now: datetime) -> datetime | None:
    """The latest minute at or before `now` the schedule fired at, within
    `MAX_LOOKBACK_MINUTES`; None when it did not fire in that time."""
    minute = now.astimezone(UTC).replace(second=0, microsecond=0)
    for back in range(MAX_LOOKBACK_MINUTES):
        moment = minute - timedelta(minutes=back)
        if schedule.matches(moment):
            return moment
    return None

"""The alert state machine of one rule (alerting.md §4.2-§4.3, §7.3): pure, clock passed in."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from tensorfusion.domain.alerting.alerts import (
    DEFAULT_JOB,
    AlertNotice,
    build_labels,
    fingerprint,
    template_row,
)
from tensorfusion.domain.alerting.rules import AlertRule
from tensorfusion.domain.alerting.templates import TemplateExecutionError

__all__ = [
    "MAX_ROWS",
    "AlertEntry",
    "EvaluationOutcome",
    "RuleState",
    "firing_ends_at",
    "resolve_records",
]

MAX_ROWS: Final = 1000
_MIN_RESEND_BASIS_MS: Final = 60_000


def firing_ends_at(rule: AlertRule, now_ms: int) -> int:
    """`endsAt` of a firing alert: now + 4 x max(evaluationInterval, 60s)."""
    return now_ms + 4 * max(rule.interval_ms, _MIN_RESEND_BASIS_MS)


@dataclass(slots=True)
class AlertEntry:
    """One alert instance (a fingerprint) of a rule, pending or firing."""

    fingerprint: str
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at_ms: int
    count: int = 1
    firing: bool = False
    last_sent_ms: int | None = None

    def to_record(self, rule: str) -> dict[str, Any]:
        """The persisted form (firing entries only are persisted)."""
        return {
            "rule": rule,
            "fingerprint": self.fingerprint,
            "labels": dict(self.labels),
            "annotations": dict(self.annotations),
            "startsAt": self.starts_at_ms,
            "lastSentAt": self.last_sent_ms,
        }


@dataclass(frozen=True, slots=True)
class EvaluationOutcome:
    """What one evaluation produced: notices to send, row errors, and whether firing changed."""

    notices: tuple[AlertNotice, ...]
    row_errors: tuple[str, ...]
    firing_changed: bool
    rows_seen: int


@dataclass(slots=True)
class RuleState:
    """The entries of one rule, keyed by fingerprint."""

    entries: dict[str, AlertEntry] = field(default_factory=dict)

    def firing(self) -> list[AlertEntry]:
        """Entries currently firing."""
        return [entry for entry in self.entries.values() if entry.firing]

    def pending(self) -> list[AlertEntry]:
        """Entries counted but not yet firing."""
        return [entry for entry in self.entries.values() if not entry.firing]

    def evaluate(
        self,
        rule: AlertRule,
        rows: Sequence[Mapping[str, Any]],
        now_ms: int,
        *,
        truncated: bool = False,
        job: str = DEFAULT_JOB,
    ) -> EvaluationOutcome:
        """Apply one successful query result (at most MAX_ROWS rows) taken at `now_ms`."""
        notices: list[AlertNotice] = []
        errors: list[str] = []
        seen: set[str] = set()
        firing_changed = False
        for row in rows:
            data = rule.text_data(template_row(row))
            try:
                instance = rule.alert_target_instance.render(data)
                summary = rule.summary.render(data)
                description = rule.description.render(data)
            except TemplateExecutionError as error:
                errors.append(f"rule {rule.name}: row skipped, template failed: {error}")
                continue
            labels = build_labels(rule.name, rule.severity, job, instance, row)
            key = fingerprint(labels)
            if key in seen:
                continue
            seen.add(key)
            annotations = {
                "summary": summary,
                "description": description,
                "runbook_url": rule.runbook_url,
            }
            entry = self.entries.get(key)
            if entry is None:
                entry = AlertEntry(key, labels, annotations, now_ms, count=1)
                self.entries[key] = entry
            else:
                entry.count += 1
                entry.annotations = annotations
                entry.labels = labels
            if entry.count >= rule.effective_count:
                if not entry.firing:
                    entry.firing = True
                    firing_changed = True
                entry.last_sent_ms = now_ms
                notices.append(self._notice(rule, entry, firing_ends_at(rule, now_ms), False))
        if not truncated:
            for key in [k for k in self.entries if k not in seen]:
                entry = self.entries.pop(key)
                if entry.firing:
                    firing_changed = True
                    notices.append(self._notice(rule, entry, now_ms, True))
        return EvaluationOutcome(tuple(notices), tuple(errors), firing_changed, len(seen))

    def resolve_all(self, rule_name: str, now_ms: int) -> list[AlertNotice]:
        """Resolve every firing entry now and drop all state (the rule was removed)."""
        notices = [
            AlertNotice(
                rule_name,
                entry.fingerprint,
                dict(entry.labels),
                dict(entry.annotations),
                entry.starts_at_ms,
                now_ms,
                True,
            )
            for entry in self.entries.values()
            if entry.firing
        ]
        self.entries.clear()
        return notices

    def restore(self, rule: AlertRule, records: Iterable[Mapping[str, Any]]) -> None:
        """Bring persisted firing entries back as firing, count = consecutiveCount."""
        for record in records:
            entry = AlertEntry(
                fingerprint=str(record["fingerprint"]),
                labels={str(k): str(v) for k, v in dict(record["labels"]).items()},
                annotations={str(k): str(v) for k, v in dict(record["annotations"]).items()},
                starts_at_ms=int(record["startsAt"]),
                count=rule.effective_count,
                firing=True,
                last_sent_ms=(
                    int(record["lastSentAt"]) if record.get("lastSentAt") is not None else None
                ),
            )
            self.entries[entry.fingerprint] = entry

    @staticmethod
    def _notice(rule: AlertRule, entry: AlertEntry, ends_at_ms: int, resolved: bool) -> AlertNotice:
        return AlertNotice(
            rule.name,
            entry.fingerprint,
            dict(entry.labels),
            dict(entry.annotations),
            entry.starts_at_ms,
            ends_at_ms,
            resolved,
        )


def resolve_records(records: Iterable[Mapping[str, Any]], now_ms: int) -> list[AlertNotice]:
    """Resolution notices for persisted entries whose rule no longer exists."""
    return [
        AlertNotice(
            str(record["rule"]),
            str(record["fingerprint"]),
            {str(k): str(v) for k, v in dict(record["labels"]).items()},
            {str(k): str(v) for k, v in dict(record["annotations"]).items()},
            int(record["startsAt"]),
            now_ms,
            True,
        )
        for record in records
    ]

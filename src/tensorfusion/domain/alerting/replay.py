"""Rule evaluation over a simulated clock (`alerts test`, the simulator report), synchronous.

Each rule is evaluated every `evaluationInterval` from `start_ms + interval` (so the first
window is full) up to `end_ms`, with the simulated form of `{{ .Conditions }}`. The same state
machine as the live evaluator decides what fires and resolves.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tensorfusion.domain.alerting.alerts import DEFAULT_JOB
from tensorfusion.domain.alerting.rules import AlertRule
from tensorfusion.domain.alerting.state import MAX_ROWS, RuleState
from tensorfusion.domain.alerting.templates import TemplateExecutionError
from tensorfusion.domain.metrics.conditions import simulated_conditions
from tensorfusion.domain.timestamps import format_rfc3339_ms

__all__ = ["AlertEvent", "QueryRunner", "ReplayReport", "TabularResult", "replay_alerts"]


class TabularResult(Protocol):
    """Columns and rows of a query result."""

    @property
    def columns(self) -> tuple[str, ...]:
        """Column names."""

    @property
    def rows(self) -> Sequence[tuple[Any, ...]]:
        """Row tuples."""


class QueryRunner(Protocol):
    """A synchronous store, e.g. `DuckDBMetricsStore`."""

    def query(self, sql: str) -> TabularResult:
        """Run one query; raise an exception on failure."""


@dataclass(frozen=True, slots=True)
class AlertEvent:
    """An alert that started firing or resolved at a simulated time."""

    time_ms: int
    rule: str
    kind: str  # "firing" or "resolved"
    labels: Mapping[str, str]
    summary: str
    description: str
    starts_at_ms: int

    @property
    def instance(self) -> str:
        """The `instance` label ("" when absent)."""
        return self.labels.get("instance", "")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "time": format_rfc3339_ms(self.time_ms),
            "rule": self.rule,
            "kind": self.kind,
            "severity": self.labels.get("severity", ""),
            "instance": self.instance,
            "labels": dict(self.labels),
            "summary": self.summary,
            "description": self.description,
            "startsAt": format_rfc3339_ms(self.starts_at_ms),
        }


@dataclass(slots=True)
class ReplayReport:
    """Events in time order, alerts still firing at the end, errors and warnings."""

    events: list[AlertEvent] = field(default_factory=list)
    still_firing: list[AlertEvent] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    evaluations: int = 0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "evaluations": self.evaluations,
            "events": [event.as_dict() for event in self.events],
            "stillFiring": [event.as_dict() for event in self.still_firing],
            "errors": list(self.errors),
            "warnings": list(self.warnings),
        }


def replay_alerts(
    rules: Sequence[AlertRule],
    runner: QueryRunner,
    start_ms: int,
    end_ms: int,
    *,
    job: str = DEFAULT_JOB,
) -> ReplayReport:
    """Evaluate `rules` against `runner` on a simulated clock from start to end (inclusive)."""
    report = ReplayReport()
    for rule in rules:
        if rule.calls_now:
            report.warnings.append(
                f"rule {rule.name}: the query calls now() or current_timestamp itself and is "
                "not simulation-safe; use {{ .Conditions }} for the time window"
            )
    states = {rule.name: RuleState() for rule in rules}
    queue: list[tuple[int, int, AlertRule]] = [
        (start_ms + rule.interval_ms, index, rule) for index, rule in enumerate(rules)
    ]
    heapq.heapify(queue)
    while queue:
        now_ms, index, rule = heapq.heappop(queue)
        if now_ms > end_ms:
            continue
        heapq.heappush(queue, (now_ms + rule.interval_ms, index, rule))
        report.evaluations += 1
        state = states[rule.name]
        try:
            sql = rule.render_query(simulated_conditions(now_ms, rule.interval_ms))
            result = runner.query(sql)
        except TemplateExecutionError as error:
            report.errors.append(f"rule {rule.name}: query template failed: {error}")
            continue
        except Exception as error:  # a store error leaves this rule's state unchanged
            report.errors.append(f"rule {rule.name} at {format_rfc3339_ms(now_ms)}: {error}")
            continue
        rows = [dict(zip(result.columns, row, strict=True)) for row in result.rows[:MAX_ROWS]]
        truncated = len(result.rows) > MAX_ROWS
        if truncated:
            report.warnings.append(
                f"rule {rule.name} at {format_rfc3339_ms(now_ms)}: {len(result.rows)} rows, "
                f"only the first {MAX_ROWS} were used"
            )
        was_firing = {entry.fingerprint for entry in state.firing()}
        outcome = state.evaluate(rule, rows, now_ms, truncated=truncated, job=job)
        report.errors.extend(outcome.row_errors)
        for notice in outcome.notices:
            if notice.resolved or notice.fingerprint not in was_firing:
                report.events.append(
                    AlertEvent(
                        now_ms,
                        rule.name,
                        "resolved" if notice.resolved else "firing",
                        notice.labels,
                        notice.annotations.get("summary", ""),
                        notice.annotations.get("description", ""),
                        notice.starts_at_ms,
                    )
                )
    for rule in rules:
        for entry in states[rule.name].firing():
            report.still_firing.append(
                AlertEvent(
                    end_ms,
                    rule.name,
                    "firing",
                    entry.labels,
                    entry.annotations.get("summary", ""),
                    entry.annotations.get("description", ""),
                    entry.starts_at_ms,
                )
            )
    report.events.sort(key=lambda event: (event.time_ms, event.rule))
    return report

"""The alert rule model (alerting.md §1) and per-rule validation (§2.1)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from tensorfusion.domain.alerting.durations import parse_rule_interval
from tensorfusion.domain.alerting.read_query import ReadQueryError, check_read_query
from tensorfusion.domain.alerting.templates import (
    GoTemplate,
    TemplateExecutionError,
    TemplateSyntaxError,
    compile_template,
)
from tensorfusion.domain.durations import DurationError
from tensorfusion.domain.metrics.conditions import (
    Dialect,
    simulated_conditions,
    wall_conditions,
)
from tensorfusion.domain.metrics.schema import AGENT_SAMPLED_TABLES, DEFAULT_AGENT_SAMPLE_INTERVAL_S

__all__ = [
    "RENDERED_TEXT_LIMITS",
    "AlertRule",
    "RuleProblem",
    "RuleSet",
    "RuleValidationError",
    "load_rules",
    "parse_rule",
]

# Canonical field names, looked up case-insensitively.
_FIELDS: Final[dict[str, str]] = {
    name.lower(): name
    for name in (
        "name",
        "query",
        "threshold",
        "evaluationInterval",
        "consecutiveCount",
        "severity",
        "summary",
        "description",
        "alertTargetInstance",
        "runbookURL",
        "testMode",
    )
}
_TEMPLATE_FIELDS: Final = ("query", "summary", "description", "alertTargetInstance")
RENDERED_TEXT_LIMITS: Final[dict[str, int]] = {
    "summary": 4096,
    "description": 16384,
    "alertTargetInstance": 1024,
}
"""Characters a rendered field keeps; longer text is cut ending with the templates' marker."""
_NOW_CALL: Final = re.compile(r"\b(now\s*\(|current_timestamp\b)", re.IGNORECASE)
MIN_INTERVAL_MS: Final = 1000


@dataclass(frozen=True, slots=True)
class AlertRule:
    """One validated rule. `definition` is the normalised input, used to diff reloads."""

    name: str
    query: GoTemplate
    threshold: float
    evaluation_interval: str
    interval_ms: int
    consecutive_count: int
    severity: str
    summary: GoTemplate
    description: GoTemplate
    alert_target_instance: GoTemplate
    runbook_url: str
    test_mode: bool
    definition: tuple[tuple[str, Any], ...] = field(repr=False, compare=True)

    @property
    def effective_count(self) -> int:
        """Evaluations in a row before firing: 0 behaves as 1."""
        return max(1, self.consecutive_count)

    @property
    def calls_now(self) -> bool:
        """True when the query reads the wall clock itself (not simulation-safe)."""
        return _NOW_CALL.search(self.query.source) is not None

    def query_data(self, conditions: str) -> dict[str, Any]:
        """The data the query template sees."""
        return {
            "Threshold": self.threshold,
            "Conditions": conditions,
            "Name": self.name,
            "Severity": self.severity,
            "EvaluationInterval": self.evaluation_interval,
            "ConsecutiveCount": self.effective_count,
        }

    def text_data(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """Data of summary, description and alertTargetInstance: row columns, then rule keys."""
        data = dict(row)
        data["Threshold"] = self.threshold
        data["Name"] = self.name
        data["Severity"] = self.severity
        data["EvaluationInterval"] = self.evaluation_interval
        data["ConsecutiveCount"] = self.effective_count
        return data

    def render_query(self, conditions: str) -> str:
        """The SQL to run, with `{{ .Conditions }}` expanded as given."""
        return self.query.render(self.query_data(conditions))


@dataclass(frozen=True, slots=True)
class RuleProblem:
    """A rejected rule: its position in the list, its name if any, and why."""

    index: int
    name: str
    message: str

    def __str__(self) -> str:
        label = f"alert rule #{self.index + 1}" + (f" ({self.name})" if self.name else "")
        return f"{label}: {self.message}"


@dataclass(frozen=True, slots=True)
class RuleSet:
    """The outcome of loading a rule list: valid rules, rejected ones and warnings."""

    rules: tuple[AlertRule, ...] = ()
    problems: tuple[RuleProblem, ...] = ()
    warnings: tuple[str, ...] = ()

    def by_name(self) -> dict[str, AlertRule]:
        """Valid rules keyed by name."""
        return {rule.name: rule for rule in self.rules}


class RuleValidationError(ValueError):
    """One rule failed validation; the message names the field, the value and what is allowed."""


def _canonical_keys(raw: Mapping[Any, Any], warnings: list[str], label: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, value in raw.items():
        canonical = _FIELDS.get(str(key).lower())
        if canonical is None:
            warnings.append(f"{label}: unknown key {key!r} ignored")
            continue
        if canonical in values:
            raise RuleValidationError(f"field {canonical} is given twice (as {key!r})")
        values[canonical] = value
    return values


def _unencodable_at(text: str) -> int | None:
    """Index of the first character UTF-8 cannot encode (a lone surrogate), or None."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return error.start
    return None


def _printable(text: str) -> str:
    """The text with characters UTF-8 cannot encode written as `\\udXXX` escapes."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _text(values: Mapping[str, Any], name: str, *, required: bool) -> str:
    value = values.get(name)
    if value is None:
        if required:
            raise RuleValidationError(f"field {name} is required")
        return ""
    if not isinstance(value, str):
        raise RuleValidationError(f"field {name}: {value!r} is not a string")
    index = _unencodable_at(value)
    if index is not None:
        raise RuleValidationError(
            f"field {name}: character U+{ord(value[index]):04X} at position {index + 1} "
            "cannot be encoded as UTF-8 (a lone surrogate, e.g. from a YAML \\u escape); "
            "only valid Unicode text is allowed"
        )
    return value


def _template(values: Mapping[str, Any], name: str, *, required: bool) -> GoTemplate:
    text = _text(values, name, required=required)
    if required and not text.strip():
        raise RuleValidationError(f"field {name} is empty")
    try:
        return compile_template(text, max_chars=RENDERED_TEXT_LIMITS.get(name))
    except TemplateSyntaxError as error:
        raise RuleValidationError(f"field {name} does not parse as a template: {error}") from None


def parse_rule(raw: object, index: int, warnings: list[str]) -> AlertRule:
    """Validate one rule mapping; raises ValueError naming field, value and what is allowed."""
    if not isinstance(raw, Mapping):
        raise RuleValidationError(f"is not a mapping but {type(raw).__name__}")
    name_hint = _printable(raw["name"]) if isinstance(raw.get("name"), str) else ""
    label = f"alert rule #{index + 1}" + (f" ({name_hint})" if name_hint else "")
    values = _canonical_keys(raw, warnings, label)
    name = _text(values, "name", required=True).strip()
    if not name:
        raise RuleValidationError("field name is empty")
    templates = {key: _template(values, key, required=key == "query") for key in _TEMPLATE_FIELDS}
    interval_text = values.get("evaluationInterval")
    if interval_text is None:
        raise RuleValidationError("field evaluationInterval is required")
    try:
        interval_ms = parse_rule_interval(interval_text)
    except DurationError as error:
        raise RuleValidationError(f"field evaluationInterval: {error}") from None
    if interval_ms < MIN_INTERVAL_MS:
        raise RuleValidationError(
            f"field evaluationInterval: {interval_text!r} is below the minimum of 1s"
        )
    count = values.get("consecutiveCount", 1)
    if count is None:
        count = 1
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise RuleValidationError(f"field consecutiveCount: {count!r} is not an integer >= 0")
    threshold = values.get("threshold", 0)
    if threshold is None:
        threshold = 0
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise RuleValidationError(f"field threshold: {threshold!r} is not a number")
    severity = _text(values, "severity", required=True).strip()
    if not severity:
        raise RuleValidationError("field severity is empty")
    test_mode = values.get("testMode", False)
    if test_mode is None:
        test_mode = False
    if not isinstance(test_mode, bool):
        raise RuleValidationError(f"field testMode: {test_mode!r} is not true or false")
    runbook = _text(values, "runbookURL", required=False)
    definition = tuple(sorted((key, repr(value)) for key, value in values.items()))
    rule = AlertRule(
        name=name,
        query=templates["query"],
        threshold=float(threshold),
        evaluation_interval=str(interval_text),
        interval_ms=interval_ms,
        consecutive_count=count,
        severity=severity,
        summary=templates["summary"],
        description=templates["description"],
        alert_target_instance=templates["alertTargetInstance"],
        runbook_url=runbook,
        test_mode=test_mode,
        definition=definition,
    )
    _check_query(rule)
    sampled = [name for name in AGENT_SAMPLED_TABLES if name in rule.query.source]
    if sampled and interval_ms < 2 * DEFAULT_AGENT_SAMPLE_INTERVAL_S * 1000:
        warnings.append(
            f"{label}: evaluationInterval {interval_text} is shorter than twice the agents' "
            f"sampling interval ({DEFAULT_AGENT_SAMPLE_INTERVAL_S:g}s) of {', '.join(sampled)}: a "
            "window can hold no sample, the rule then sees nothing and may never fire; use 30s "
            "or more (docs/alerting.md)"
        )
    return rule


def _check_query(rule: AlertRule) -> None:
    """The query, as every store and the simulated clock render it, is one SELECT statement."""
    forms = (
        wall_conditions(Dialect.GREPTIME, rule.evaluation_interval, rule.interval_ms),
        wall_conditions(Dialect.DUCKDB, rule.evaluation_interval, rule.interval_ms),
        simulated_conditions(rule.interval_ms, rule.interval_ms),
    )
    for conditions in forms:
        try:
            check_read_query(rule.render_query(conditions))
        except TemplateExecutionError as error:
            raise RuleValidationError(f"field query does not render: {error}") from None
        except ReadQueryError as error:
            raise RuleValidationError(f"field query {error}") from None


def load_rules(raw_rules: object) -> RuleSet:
    """Validate a rule list; a bad rule is rejected and reported, the others still load."""
    if raw_rules is None:
        return RuleSet()
    if not isinstance(raw_rules, Sequence) or isinstance(raw_rules, str):
        problem = RuleProblem(-1, "", f"alertRules is not a list but {type(raw_rules).__name__}")
        return RuleSet(problems=(problem,))
    rules: list[AlertRule] = []
    problems: list[RuleProblem] = []
    warnings: list[str] = []
    seen: set[str] = set()
    for index, raw in enumerate(raw_rules):
        raw_name = raw.get("name") if isinstance(raw, Mapping) else None
        name_hint = _printable(raw_name.strip()) if isinstance(raw_name, str) else ""
        try:
            rule = parse_rule(raw, index, warnings)
        except RuleValidationError as error:
            problems.append(RuleProblem(index, name_hint, str(error)))
            continue
        if rule.name in seen:
            problems.append(
                RuleProblem(
                    index, rule.name, f"field name: {rule.name!r} is used by an earlier rule"
                )
            )
            continue
        seen.add(rule.name)
        rules.append(rule)
    return RuleSet(tuple(rules), tuple(problems), tuple(warnings))

"""The hot-reloaded dynamic configuration (`config.yaml`, deployment.md §3.5)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tensorfusion.domain.alerting.durations import parse_rule_interval
from tensorfusion.domain.alerting.rules import RuleSet, load_rules
from tensorfusion.domain.bounded_documents import DocumentError, load_yaml_document
from tensorfusion.domain.durations import DurationError
from tensorfusion.domain.metrics.retention import RetentionError, parse_ttl

__all__ = ["DEFAULT_TTL", "DynamicConfig", "DynamicConfigError", "parse_dynamic_config"]

DEFAULT_TTL: Final = "30d"
DEFAULT_RECORD_INTERVAL: Final = "10s"
DEFAULT_MAX_CRASH_COUNT: Final = 5
_MIN_RECORD_INTERVAL_MS: Final = 5000


class DynamicConfigError(ValueError):
    """The whole file is rejected (not YAML, or not a mapping); the previous config stays."""


@dataclass(frozen=True, slots=True)
class DynamicConfig:
    """The keys this project acts on, plus the whole parsed document in `raw`."""

    rules: RuleSet = field(default_factory=RuleSet)
    metrics_ttl: str = DEFAULT_TTL
    metrics_record_interval: str = DEFAULT_RECORD_INTERVAL
    metrics_record_interval_ms: int = 10_000
    metrics_extra_pod_labels: Mapping[str, str] = field(default_factory=dict)
    hypervisor_max_crash_count: int = DEFAULT_MAX_CRASH_COUNT
    raw: Mapping[str, Any] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def parse_dynamic_config(
    text: str, source: str, previous: DynamicConfig | None = None
) -> DynamicConfig:
    """Parse `config.yaml` text.

    Raises DynamicConfigError when the document is not YAML, over the document limits
    (`bounded_documents`) or not a mapping. A bad value of
    one key keeps that key's previous value (or the default) and is listed in `problems`; a bad
    rule is rejected alone (see `load_rules`).
    """
    before = previous or DynamicConfig()
    try:
        document = load_yaml_document(text) if text.strip() else {}
    except DocumentError as error:
        raise DynamicConfigError(f"{source}: {error}") from None
    if document is None:
        document = {}
    if not isinstance(document, Mapping):
        raise DynamicConfigError(
            f"{source}: the document must be a mapping of keys, not {type(document).__name__}"
        )
    problems: list[str] = []
    warnings: list[str] = []
    rules = load_rules(document.get("alertRules"))
    problems.extend(f"{source}: {problem}" for problem in rules.problems)
    warnings.extend(f"{source}: {warning}" for warning in rules.warnings)
    extra_rules = document.get("extraAlertRules")
    if extra_rules:
        warnings.append(
            f"{source}: extraAlertRules is accepted but not acted on in this version; "
            "append rules to alertRules instead"
        )
    ttl = document.get("metricsTTL", DEFAULT_TTL)
    try:
        parse_ttl(ttl)
    except RetentionError as error:
        problems.append(f"{source}: metricsTTL: {error}; keeping {before.metrics_ttl!r}")
        ttl = before.metrics_ttl
    interval = document.get("metricsRecordInterval", DEFAULT_RECORD_INTERVAL)
    try:
        interval_ms = parse_rule_interval(interval)
        if interval_ms < _MIN_RECORD_INTERVAL_MS:
            raise DurationError(f"{interval!r} is below the minimum of 5s")
    except DurationError as error:
        problems.append(
            f"{source}: metricsRecordInterval: {error}; keeping {before.metrics_record_interval!r}"
        )
        interval, interval_ms = before.metrics_record_interval, before.metrics_record_interval_ms
    labels = document.get("metricsExtraPodLabels") or {}
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in labels.items()
    ):
        problems.append(
            f"{source}: metricsExtraPodLabels: {labels!r} must map pod label keys to "
            "non-empty tag names; keeping the previous mapping"
        )
        labels = before.metrics_extra_pod_labels
    crashes = document.get("hypervisorMaxCrashCount", DEFAULT_MAX_CRASH_COUNT)
    if isinstance(crashes, bool) or not isinstance(crashes, int) or crashes < 0:
        problems.append(
            f"{source}: hypervisorMaxCrashCount: invalid value {crashes!r}: must be a whole "
            f"number, 0 to disable; keeping {before.hypervisor_max_crash_count}"
        )
        crashes = before.hypervisor_max_crash_count
    return DynamicConfig(
        rules=rules,
        metrics_ttl=str(ttl),
        metrics_record_interval=str(interval),
        metrics_record_interval_ms=interval_ms,
        metrics_extra_pod_labels=dict(labels),
        hypervisor_max_crash_count=crashes,
        raw=dict(document),
        problems=tuple(problems),
        warnings=tuple(warnings),
    )
